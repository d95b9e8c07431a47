"""The fast decode of repeating parts gives what a strict decode gives, or steps aside."""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import given, settings
from strategies import traces

from monitor.ingest import parse as ingest
from monitor.ingest import parts
from monitor.ingest.contract import Trace

STRICT = msgspec.json.Decoder(Trace)
HEAD = b'{"schema":"rag-decision/1","trace_id":"t1","ts":"2026-11-29T10:00:00Z",'


@given(traces())
@settings(max_examples=300)
def test_same_trace_as_a_strict_decode_on_a_miss_and_on_a_hit(trace):
    raw = json.dumps(trace, separators=(",", ":")).encode()
    assert parts.decode_trace(raw) == STRICT.decode(raw)
    assert parts.decode_trace(raw) == STRICT.decode(raw)  # now from the caches


def test_a_repeating_part_is_decoded_once_and_shared():
    first = parts.decode_trace(HEAD + b'"system":{"release":"r","model":"m"},"decision":"answer"}')
    second = parts.decode_trace(HEAD.replace(b"t1", b"t2")
                                + b'"system":{"release":"r","model":"m"},"decision":"answer"}')
    assert first.system is second.system
    assert first.trace_id != second.trace_id


@pytest.mark.parametrize("body", ids=lambda b: b.decode()[:40], argvalues=[
    b'"system":{"release":"' + b"r" * 65 + b'"},"decision":"answer"}',
    b'"system":{"release":"r","extra":1},"decision":"answer"}',
    b'"system":5,"decision":"answer"}',
    b'"system":{"release":"r"},"decision":"answer","slice":{"language":""}}',
    b'"system":{"release":"r"},"decision":"answer","slice":{"language":"' + b"x" * 65 + b'"}}',
    b'"system":{"release":"r"},"decision":"answer","slice":{"question":"secret"}}',
    b'"system":{"release":"r"},"decision":"answer","slice":{"language":1}}',
    b'"system":{"release":"r"},"decision":"answer","requirements":{"expected":[1]}}',
    b'"system":{"release":"r"},"decision":"answer","requirements":[]}',
    b'"system":{"release":"r"},"decision":"answer","checks":{"self_check":"maybe"}}',
    b'"system":{"release":"r"},"decision":"answer","checks":{"citation":true,"text":"x"}}',
])
def test_an_unusual_part_gets_the_strict_path_and_its_verdict(body):
    raw = HEAD + body
    with pytest.raises((parts.Unusual, msgspec.ValidationError)):
        parts.decode_trace(raw)
    fast, strict = ingest.parse(raw), ingest._parse_slow(raw, None)
    assert type(fast) is type(strict)
    assert fast.content_fields_dropped == strict.content_fields_dropped
    if isinstance(fast, ingest.Rejection):
        assert fast.reason == strict.reason
    else:
        assert fast.event == strict.event


def test_the_caches_stay_bounded_under_distinct_values():
    for i in range(parts.CACHE_MAX + 100):
        raw = HEAD + b'"system":{"release":"r"},"decision":"answer","slice":{"language":"v%d"}}' % i
        assert parts.decode_trace(raw).slice == {"language": f"v{i}"}
    assert len(parts.SLICE.cache) <= parts.CACHE_MAX
