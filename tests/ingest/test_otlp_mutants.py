"""Messages of real instrumentation with parts replaced by values of other types and
sizes, through every step of the `otlp` intake a worker runs (decode, the spans
record, the buffer, assembly, the contract's parse, the checkpoint): each step either
takes a mutant or refuses it with the input's reason; none raises, and none reports
`worker_error` (a bug in ragmon). The session-48 poison pills (an integer beyond 64
bits, arrays nested past the recursion limit, an array where a string was read) were of
this kind; `tests/ingest/test_otlp_wire.py` mutates the protobuf bytes themselves."""

from __future__ import annotations

import json
import random
from typing import Any

import msgspec
import pytest

from monitor.ingest.spans import SpanIntake, forward, records_of, spans_record
from monitor.settings import load
from tests.otel_apps import genai_app, langchain_app, messages

# Values of every JSON type, at the edges of what the fields hold.
ODD_VALUES: list[Any] = [
    None, True, 0, -1, 2**63, -(2**63) - 1, 2**64, 10**40, 1.5, 1e308, -0.0, "", "x",
    "9" * 30, "-5", "NaN", "deadbeef", "\u00e9\u6f22", [], [1, "a"], {}, {"stringValue": 3},
    {"intValue": "12345678901234567890123"}, {"arrayValue": {"values": [{"arrayValue": {}}]}},
    {"kvlistValue": {"values": [{"key": "k"}]}}, {"bytesValue": "!!"},
]


def _nodes(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The path of every value under `node`."""
    found = [path]
    if isinstance(node, dict):
        for key, value in node.items():
            found += _nodes(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _nodes(value, (*path, index))
    return found


def _replace(node: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    copy = dict(node) if isinstance(node, dict) else list(node)
    copy[head] = _replace(node[head], rest, value)
    return copy


def _mutants(seed: int, count: int) -> list[bytes]:
    spans = genai_app(3, seed=seed)[0] + langchain_app(2, seed=seed)[0]
    documents = [json.loads(raw) for raw in messages(spans, "otlp_json", 4)]
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        document = rng.choice(documents)
        for _ in range(rng.randint(1, 3)):
            path = rng.choice(_nodes(document))
            document = _replace(document, path, rng.choice(ODD_VALUES))
        out.append(json.dumps(document).encode())
    return out


@pytest.mark.parametrize("seed", [1, 2])
def test_mutants_are_taken_or_refused_with_the_inputs_reason_never_raise(seed):
    mutants = _mutants(seed, 1500)
    sources = [("otlp_spans", 0, offset) for offset in range(len(mutants))]
    done = forward(mutants, sources, 2, 1_000_000)
    reasons = {reason for _, reason, _ in done.rejected}
    assert reasons <= {"not_otlp"}, reasons
    assert len(done.rejected) < len(mutants)  # most mutants are still trace data
    intake = SpanIntake(load(None))
    for partition, records in records_of(done.fragments, 2).items():
        for record in records:
            intake.merge(spans_record(record).fragments)
        assert partition in (0, 1)
    taken = intake.take(final=True)
    assert taken, "no trace assembled from any mutant"
    assert not [a for a in taken if a.rejection and a.rejection.reason == "worker_error"]
    for item in taken:
        assert (item.raw is None) != (item.rejection is None)
    restored = SpanIntake(load(None))
    restored.buffer.restore(intake.buffer.to_bytes())
    msgspec.msgpack.encode(done.fragments)
