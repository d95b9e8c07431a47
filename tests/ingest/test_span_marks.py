"""The span buffer's watermark (`monitor/ingest/spanbuffer.py`, `Marks`): a buffer fed
from several OTLP partitions read at different paces takes no trace before every
partition that may still hold its spans has been read that far. Spans from the OTel SDK
(GenAI conventions) in OTLP messages over two partitions, one read to its end before the
other starts, as a worker catching up on a backlog may read them."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from monitor.ingest.spanbuffer import Marks, SpanBuffer
from monitor.ingest.spans import SpanIntake, forward, records_of, spans_record
from monitor.settings import load
from tests.made_spans import a_fragment, a_span
from tests.otel_apps import genai_app, messages, spread


def _buffer(marked: bool = False) -> SpanBuffer:
    return SpanBuffer(grace_seconds=2, timeout_seconds=30, max_traces=100, max_spans=10,
                      marked=marked)


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


def test_a_partition_behind_holds_the_clock_until_it_is_read_that_far():
    buffer = _buffer()
    root = a_span("1" * 16, "", 100.0, **{"rag.decision": "answer"})
    buffer.add(a_fragment("a" * 32, 1, root))
    buffer.add(a_fragment("b" * 32, 2, a_span("3" * 16, "", 200.0)))  # partition 0, far ahead
    buffer.mark(Marks(2, [(0, _ns(200.0), False), (1, _ns(99.0), False)]))
    assert buffer.now() == 99.0
    assert buffer.due() == []  # without the marks, 200 would take trace a without its child
    buffer.add(a_fragment("a" * 32, 3, a_span("2" * 16, "1" * 16, 99.5)))
    buffer.mark(Marks(2, [(1, _ns(150.0), False)]))
    (ready,) = buffer.due()
    assert ready.trace_id == "a" * 32 and len(ready.spans) == 2 and ready.complete
    assert buffer.counts["spans_late"] == 0


def test_nothing_is_taken_before_every_partition_is_heard_of_one_at_its_end_holds_nothing():
    buffer = _buffer()
    buffer.add(a_fragment("a" * 32, 1, a_span("1" * 16, "", 100.0, **{"rag.decision": "answer"})))
    buffer.mark(Marks(3, [(0, _ns(100.0), False), (1, 0, True)]))
    assert buffer.due(500.0) == []  # partition 2 unheard of: even a late clock waits
    assert buffer.due(final=True) != []  # the end of a file takes every trace regardless
    buffer.add(a_fragment("c" * 32, 2, a_span("4" * 16, "", 300.0, **{"rag.decision": "abstain"})))
    buffer.mark(Marks(3, [(2, 0, True)]))   # partition 2: empty, read to its end
    assert buffer.now() == 100.0            # partition 0 behind at 100 holds it
    buffer.mark(Marks(3, [(0, _ns(300.0), True)]))
    assert buffer.now() == 500.0  # every partition read to its end: the buffer's own clock
    restored = _buffer()
    restored.restore(buffer.to_bytes())
    assert (restored.sources, restored.marks, restored.now()) == (3, buffer.marks, 500.0)


def test_a_buffer_without_marks_keeps_its_own_clock():
    buffer = _buffer()
    buffer.add(a_fragment("a" * 32, 1, a_span("1" * 16, "", 100.0, **{"rag.decision": "answer"})))
    assert buffer.now() == 100.0 and len(buffer.due(102.0)) == 1


def _skewed(with_marks: bool) -> tuple[Counter[tuple[str, str, str]], Counter[Any], SpanIntake]:
    """60 requests a second apart over two OTLP partitions, partition 0 read to its end
    in batches of 3 messages before partition 1, each batch forwarded and marked as the
    worker does (newest span end forwarded, read to the end or not). The application's
    decisions, and what came out: (release, decision, reason, has retrieval)."""
    spans, decided = genai_app(60, seed=8)
    ordered = sorted(spread(spans, 1.0), key=lambda span: span.end_time or 0)
    raws = [messages(ordered[at:at + 12], "otlp_proto", 12)[0]  # exported as they end
            for at in range(0, len(ordered), 12)]
    parts = {0: raws[0::2], 1: raws[1::2]}
    intake = SpanIntake(load())
    newest = {0: 0, 1: 0}
    taken = []
    for partition, found in parts.items():
        for start in range(0, len(found), 3):
            batch = found[start:start + 3]
            done = forward(batch, [("otlp", partition, start + i) for i in range(len(batch))],
                           1, 1_000_000)
            assert not done.rejected
            newest[partition] = max(newest[partition], *done.newest.values())
            read_to_end = {0: partition == 1 or start + 3 >= len(found),
                           1: partition == 1 and start + 3 >= len(found)}
            marks = Marks(2, [(p, newest[p], read_to_end[p]) for p in (0, 1)])
            for record in records_of(done.fragments, 1, marks if with_marks else None)[0]:
                read = spans_record(record)
                intake.merge(read.fragments)
                if read.marks is not None:
                    intake.mark(read.marks)
            taken += intake.take()
    out: Counter[Any] = Counter()
    for item in taken + intake.take(final=True):
        assert item.raw is not None, item.rejection
        trace = json.loads(item.raw)
        out[(trace["system"]["release"], trace["decision"], trace["reason"],
             "retrieval" in trace)] += 1
    return decided, out, intake


def test_a_backlog_read_one_partition_after_the_other_assembles_every_trace_whole():
    decided, out, intake = _skewed(with_marks=True)
    assert out == Counter({(*key, True): n for key, n in decided.items()})
    assert intake.buffer.counts["spans_late"] == 0
    assert intake.buffer.counts["traces_incomplete"] == 0


def test_without_marks_the_same_backlog_assembles_traces_before_their_spans_arrive():
    """What the marks are for: read this way, a buffer on its own clock takes traces
    whose other spans are still unread in partition 1."""
    decided, out, intake = _skewed(with_marks=False)
    assert intake.buffer.counts["spans_late"] > 0
    assert out != Counter({(*key, True): n for key, n in decided.items()})


def test_a_forwarded_batch_marks_every_spans_partition_after_its_fragments():
    spans, _ = genai_app(6, seed=4)
    raws = messages(spans, "otlp_proto", 5, seed=4)
    done = forward(raws, [("otlp", 1, i) for i in range(len(raws))], 3, 1_000_000)
    # How far partition 1 is read: the median of its fragments' ends (a few spans dated
    # ahead, by a host whose clock runs ahead, move it not at all).
    ends = sorted(f.end for found in done.fragments.values() for f in found)
    assert done.newest == {1: ends[len(ends) // 2]}
    marks = Marks(2, [(1, done.newest[1], True)])
    records = records_of(done.fragments, 3, marks)
    assert sorted(records) == [0, 1, 2]  # a partition without fragments gets the marks alone
    for partition, found in records.items():
        read = [spans_record(record) for record in found]
        assert [r.marks for r in read] == [None] * (len(read) - 1) + [marks]
        assert sum(len(r.fragments) for r in read) == len(done.fragments.get(partition, []))
    unmarked = records_of(done.fragments, 3)  # only where there are fragments, no marks
    assert sorted(unmarked) == sorted(done.fragments)
    assert all(spans_record(r).marks is None for found in unmarked.values() for r in found)


def test_a_spans_record_from_before_the_marks_is_still_read():
    import msgspec
    fragment = a_fragment("a" * 32, 1, a_span("1" * 16, "", 100.0))
    old = msgspec.msgpack.encode([fragment])
    assert spans_record(old).fragments == [fragment] and spans_record(old).marks is None




def test_a_buffer_fed_through_the_spans_topic_takes_nothing_before_its_first_marks():
    """A forwarded batch's fragments to one spans partition can fill several records; the
    marks ride on the last. A worker's fetch may end between them: the buffer has
    fragments and no marks yet. By its own clock it took complete traces whose other
    spans were still in a slower OTLP partition (late spans on Apache Kafka)."""
    spans = [a_span(f"{n:016x}", "", 100.0 + n / 100, **{"rag.decision": "answer",
                                                         "rag.note": f"{n:0300d}"})
             for n in range(4000)]
    fragments = [a_fragment(f"{n:032x}", n, span) for n, span in enumerate(spans)]
    first, last = records_of({0: fragments}, 1, Marks(2, [(0, _ns(140.0), True),
                                                          (1, _ns(90.0), False)]))[0]
    intake = SpanIntake(load(), marked=True)
    early = spans_record(first)
    assert early.marks is None and early.fragments  # fragments before their marks
    intake.merge(early.fragments)
    assert intake.take(clock=1e6) == []
    unmarked = SpanIntake(load())  # a file, or an OTLP partition read in order
    unmarked.merge(early.fragments)
    assert len(unmarked.take()) > 0
    found = spans_record(last)
    intake.merge(found.fragments)
    intake.mark(found.marks)
    assert intake.take() == []  # partition 1 is behind at 90
    intake.mark(Marks(2, [(1, _ns(200.0), True)]))
    assert len(intake.take()) == 4000


def test_a_partition_said_at_its_end_holds_again_once_its_forwarder_falls_silent():
    """Forwarders repeat their marks every second. When one is killed, the partitions it
    read stay unread until a rebalance: its last word, "read to its end", must not let
    quiet buffers take traces whose spans wait there (59 late spans on Apache Kafka)."""
    buffer = _buffer(marked=True)
    buffer.add(a_fragment("a" * 32, 1, a_span("1" * 16, "", 100.0, **{"rag.decision": "answer"})))
    buffer.mark(Marks(2, [(0, _ns(100.0), True)], sent=1000.0))   # forwarder A
    buffer.mark(Marks(2, [(1, _ns(100.0), True)], sent=1000.0))   # forwarder B
    assert buffer.now() == 100.0
    buffer.mark(Marks(2, [(1, _ns(100.0), True)], sent=1002.0))   # B goes on, A is silent
    assert buffer.due(500.0) != []  # A's word is 2 s old: still trusted
    buffer.add(a_fragment("b" * 32, 2, a_span("2" * 16, "", 600.0, **{"rag.decision": "answer"})))
    buffer.mark(Marks(2, [(1, _ns(600.0), True)], sent=1003.5))
    assert buffer.now() == 100.0  # A's 3.5 s old: partition 0 holds the clock at its newest
    assert buffer.due(900.0) == []
    buffer.mark(Marks(2, [(0, _ns(100.0), True)], sent=1004.0))   # partition 0's new reader
    assert [ready.trace_id for ready in buffer.due(900.0)] == ["b" * 32]
    restored = _buffer()
    restored.restore(buffer.to_bytes())
    assert restored.heard == {0: 1004.0, 1: 1003.5}
