"""A span buffer's checkpoint and a spans record fit their topics, whatever the spans
carry. Spans of big traces can outgrow `state_max_bytes` before `otlp_pending_max`
traces wait, and a record the producer refuses was retried forever (the intake stopped,
before session 48). Past the limit a checkpoint evicts the oldest waiting traces,
counted, incomplete ones first; spans records are cut by their encoded size."""

from __future__ import annotations

import random

from monitor.ingest.otlp import Fragment, Span
from monitor.ingest.spanbuffer import Marks, SpanBuffer
from monitor.ingest.spans import _FRAGMENTS_BYTES, SpansRecord, _records, records_of, spans_record

LIMIT = 1024 * 1024


def _fragment(number: int, rng: random.Random, complete: bool) -> Fragment:
    trace_id, root = f"{number:032x}", f"{number:016x}"
    spans = [Span(f"{number * 8 + i + 1:016x}", root, 10**18, 10**18 + 5, "svc", "r1",
                  {"openinference.span.kind": "LLM", "rag.note": rng.randbytes(150).hex()})
             for i in range(5)]
    if complete:
        spans.append(Span(root, "", 10**18, 10**18 + 9, "svc", "r1", {"rag.decision": "answer"}))
    return Fragment(trace_id, ("otlp_spans", 0, number), spans, len(spans), 0, 10**18 + 9)


def test_a_checkpoint_past_the_limit_evicts_the_oldest_incomplete_traces_until_it_fits():
    rng = random.Random(4)
    buffer = SpanBuffer(grace_seconds=2, timeout_seconds=30, max_traces=100_000, max_spans=256)
    for number in range(1, 3001):  # incomplete (no root yet), oldest first
        buffer.add(_fragment(number, rng, complete=False))
    for number in range(3001, 3101):  # complete, waiting for their grace
        buffer.add(_fragment(number, rng, complete=True))
    assert len(buffer.to_bytes()) > 2 * LIMIT  # the test means something

    blob = buffer.to_bytes(LIMIT)
    assert len(blob) <= LIMIT
    evicted = buffer.counts["traces_evicted"]
    assert evicted > 0 and len(buffer) == 3100 - evicted
    assert all(f"{n:032x}" in buffer.pending for n in range(3001, 3101))  # complete kept
    assert f"{3000:032x}" in buffer.pending and f"{1:032x}" not in buffer.pending
    restored = SpanBuffer(grace_seconds=2, timeout_seconds=30, max_traces=100_000,
                          max_spans=256)
    restored.restore(blob)
    assert restored.pending.keys() == buffer.pending.keys()
    assert restored.counts == buffer.counts
    (ready, *_) = restored.due(10**9 + 12.0)
    assert ready.complete  # a complete trace is still assembled from the restored buffer


def test_complete_traces_go_too_when_nothing_else_is_left():
    rng = random.Random(5)
    buffer = SpanBuffer(grace_seconds=2, timeout_seconds=30, max_traces=100_000, max_spans=256)
    for number in range(1, 2001):
        buffer.add(_fragment(number, rng, complete=True))
    blob = buffer.to_bytes(LIMIT)
    assert len(blob) <= LIMIT and buffer.counts["traces_evicted"] > 0
    assert f"{2000:032x}" in buffer.pending  # the newest stay


def test_spans_records_stay_under_their_size_whatever_the_spans_carry():
    """A forwarded batch's records were cut by span count (a guess of ~300 bytes a span):
    spans with big kept attributes made records the spans topic refuses, retried
    forever. They are cut by their encoded size now, and read back whole and in order."""
    rng = random.Random(6)
    fragments = {0: [_fragment(n, rng, complete=n % 3 == 0) for n in range(1, 4001)], 1: []}
    marks = Marks(2, [(0, 10**18, False)])
    records = records_of(fragments, 2, marks)
    assert len(records[0]) > 3 and len(records[1]) == 1
    assert all(len(record) <= _FRAGMENTS_BYTES + 64 for record in records[0])
    read = [spans_record(record) for record in records[0]]
    assert [f.trace_id for r in read for f in r.fragments] == [
        f.trace_id for f in fragments[0]]
    assert [r.marks for r in read] == [None] * (len(read) - 1) + [marks]
    for record in read[:2]:  # the same bytes msgspec writes for the same record
        assert _records.encode(SpansRecord(record.fragments, record.marks)) in records[0]
