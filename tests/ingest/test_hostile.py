"""Hostile input (issue #22): every message of the corpus (tests/hostile.py, > 300 cases)
becomes an event or a rejection with a reason, never an exception; both admission paths
give the same outcome; planted content never reaches a dead letter, metric or state."""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest
from hostile import MARKER, corpus, suite
from prometheus_client import CollectorRegistry, generate_latest

from monitor.aggregate import checkpoint
from monitor.aggregate.compiled import COMPILED
from monitor.aggregate.pipeline import Pipeline
from monitor.cli import main
from monitor.export.collector import Collector, snapshot_of
from monitor.export.snapshot import Health
from monitor.ingest.parse import REJECTION_REASONS, Accepted, Rejection, parse
from monitor.ingest.slices import Slicer
from monitor.settings import load
from monitor.simulate import Simulator

CASES = corpus()
NOW = time.time()


def test_the_corpus_is_large_and_its_names_unique():
    assert len(CASES) >= 300
    assert len({name for name, _ in CASES}) == len(CASES)


# The suite's n_ files ragmon does not reject as not JSON: the number literals Python's
# JSON reader takes (NaN, Infinity). Decided: a message holding one is rejected as
# `non_finite` where the value would be read, and dropped with the content where it is
# the value of a content field (it is never read, stored or dead-lettered).
NON_STANDARD = {"n_number_NaN.json", "n_number_infinity.json", "n_number_minus_infinity.json"}


def test_the_public_suite_is_judged_as_json_is():
    """JSONTestSuite (a corpus nobody here wrote): what must be JSON never reads as
    `not_json`, what must not be is `not_json`, whole or inside a content field."""
    names = {name for name, _ in suite()}
    assert len(names) == 340 and sum(n.startswith("n_") for n in names) == 188
    seen = {}
    for case, raw in CASES:
        form, _, name = case.partition(": ")
        if form.startswith("suite "):
            result = parse(raw)
            seen[(form, name)] = result.reason if isinstance(result, Rejection) else "ok"
    for (form, name), reason in seen.items():
        if name.startswith("y_"):
            assert reason != "not_json", (form, name)
        elif name.startswith("n_") and name not in NON_STANDARD:
            assert reason == "not_json", (form, name, reason)
    assert {seen[("suite whole", n)] for n in NON_STANDARD} == {"non_finite"}
    assert {seen[("suite in question", n)] for n in NON_STANDARD} == {"ok"}
    # A valid JSON text that is not an object is never a trace.
    assert {seen[("suite whole", n)] for n in names if n.startswith("y_array")} == {
        "not_object"}


def test_parse_is_total_on_every_case():
    outcomes: Counter[str] = Counter()
    for name, raw in CASES:
        result = parse(raw)
        assert isinstance(result, Accepted | Rejection), name
        if isinstance(result, Rejection):
            assert result.reason in REJECTION_REASONS, (name, result.reason)
            assert MARKER.encode() not in result.payload, name
            outcomes[result.reason] += 1
        else:
            outcomes["accepted"] += 1
    # The corpus reaches most reasons, and accepts what it should (e.g. a UTF-8 BOM).
    assert outcomes["accepted"] > 20 and len(outcomes) >= 10, outcomes


def _fold(compiled: bool) -> tuple[Pipeline, list[tuple[str, Rejection]]]:
    pipeline = Pipeline(load(), compiled=compiled)
    pipeline.journal = []  # first sightings kept, as the worker keeps them
    dead: list[tuple[str, Rejection]] = []
    raws = [raw for _, raw in CASES]
    for start in range(0, len(raws), 50):
        batch = raws[start:start + 50]
        for index, rejection in pipeline.feed(batch, clock=NOW):
            dead.append((CASES[start + index][0], rejection))
        counts = pipeline.counters().input
        assert counts["read"] == counts["valid"] + counts["rejected"] == start + len(batch)
    return pipeline, dead


@pytest.mark.skipif(not COMPILED, reason="the compiled admission is not built")
def test_both_paths_give_the_same_outcome_on_every_case():
    compiled, dead_c = _fold(True)
    python, dead_p = _fold(False)
    assert [(n, r.reason, r.payload) for n, r in dead_c] == [
        (n, r.reason, r.payload) for n, r in dead_p]
    assert compiled.counters() == python.counters()


@pytest.mark.parametrize("compiled", [True, False] if COMPILED else [False])
def test_planted_content_reaches_no_output(compiled):
    pipeline, dead = _fold(compiled)
    marker = MARKER.encode()
    for name, rejection in dead:
        assert marker not in rejection.payload, name
        assert MARKER not in rejection.detail, name
    registry = CollectorRegistry()
    collector = Collector(20_000)
    registry.register(collector)
    collector.current = snapshot_of([pipeline], Health())
    assert marker not in generate_latest(registry)
    assert marker not in checkpoint.readable(checkpoint.dump(pipeline, {}))
    assert pipeline.journal
    segment = checkpoint.dump_seen(pipeline.journal, 0)
    assert marker not in checkpoint.readable(segment, seen=True)
    summary = json.dumps(pipeline.counters())
    assert MARKER not in summary


def test_replay_gives_the_same_reasons_and_writes_no_content(tmp_path):
    """`ragmon replay` (one message per line: the cases without a newline in them). A
    blank line in a file separates messages (skipped); on a topic it is a message
    (not_json)."""
    lines = [raw for _, raw in CASES if b"\n" not in raw and b"\r" not in raw]
    path, dlq, out = tmp_path / "hostile.jsonl", tmp_path / "dlq.jsonl", tmp_path / "s.json"
    path.write_bytes(b"\n".join(lines) + b"\n")
    assert main(["replay", str(path), "--dlq", str(dlq), "--out", str(out),
                 "--no-progress"]) == 0
    doc = json.loads(out.read_text())
    messages = [raw for raw in lines if raw and not raw.isspace()]
    dead = Pipeline(load()).feed(messages)
    expected = Counter(r.reason for _, r in dead if r.reason != "late")
    assert {k: v for k, v in doc["rejected_by_reason"].items() if v} == dict(expected)
    assert doc["input"]["read"] == len(messages)
    assert MARKER not in dlq.read_text() and MARKER not in out.read_text()


class _Faulty(Slicer):
    """A slicer with a planted fault (the one stand-in in this file): it raises for the
    traces named boom-*, as a bug in any step of the admission would."""

    def keys(self, trace):  # type: ignore[no-untyped-def]
        if trace.trace_id.startswith("boom"):
            raise RuntimeError(f"planted fault {MARKER}")
        return super().keys(trace)


@pytest.mark.parametrize("compiled", [True, False] if COMPILED else [False])
def test_a_failure_while_admitting_a_message_sets_apart_that_message_only(compiled):
    settings = load()
    good = list(Simulator(seed=9, scenario="steady").traces(3000))
    boom = [json.dumps({**json.loads(good[i]), "trace_id": f"boom-{i}",
                        "slice": {"language": f"xx-{i}"}}).encode() for i in range(4)]
    mixed = good[:]
    for k, message in enumerate(boom):
        mixed.insert(500 + 700 * k, message)
    faulty = Pipeline(settings, slicer=_Faulty(settings.slice_dimensions, 50, 20),
                      compiled=compiled)
    clean = Pipeline(settings, compiled=compiled)
    dead = [d for i in range(0, len(mixed), 1000)
            for d in ((i + j, r) for j, r in faulty.feed(mixed[i:i + 1000], clock=NOW))]
    for i in range(0, len(good), 1000):
        clean.feed(good[i:i + 1000], clock=NOW)
    assert [(i, r.reason) for i, r in dead] == [(500 + 700 * k, "worker_error")
                                                 for k in range(4)]
    assert all(MARKER not in r.detail and b"unparsed" in r.payload for _, r in dead)
    counts = faulty.counters().input
    assert counts["read"] == 3004 and counts["valid"] + counts["rejected"] == 3004
    assert counts["folded"] == 3000 and faulty.counters().rejected == {"worker_error": 4}
    a, b = faulty.merged(), clean.merged()
    assert a.keys == b.keys and (a.counts[: len(a)] == b.counts[: len(b)]).all()
