"""What real senders do that a span buffer must survive: an exporter that sends a
request again (a retry, a persistent queue replayed), and a host whose clock runs ahead."""

from __future__ import annotations

import json

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext, TraceFlags

from monitor.ingest.spanbuffer import SpanBuffer
from monitor.ingest.spans import Assembled, SpanIntake, forward
from monitor.settings import load
from tests.ingest.test_otlp_intake import ENCODINGS, decided_of, run
from tests.made_spans import a_fragment, a_span
from tests.otel_apps import genai_app, messages, spread


def test_a_host_whose_clock_runs_a_day_ahead_holds_no_other_trace_short_of_its_spans():
    """A span buffer's clock is the newest span end it has seen; a span dated a day
    ahead (a host with a wrong clock) moved it a day on, and every later trace was taken
    as soon as its decision and root came, without its chat spans that came a message
    later (24 late spans of 20 traces). The clock now moves to the median of the last
    fragments' ends, each at most the wall clock: a backlog (the spans end up to 19 s ago)
    is judged by its own time.

    Decided from the buffer's clock alone (no marks): read in order.
    """
    spans, decided = genai_app(20, seed=3)
    ahead, _ = genai_app(1, seed=4)
    day = 86_400 * 10**9
    ahead = [ReadableSpan(s.name, s.context, s.parent, s.resource, s.attributes, s.events,
                          s.links, s.kind, status=s.status, start_time=(s.start_time or 0) + day,
                          end_time=(s.end_time or 0) + day) for s in ahead]
    traces: dict[int, list[ReadableSpan]] = {}
    for span in spread(spans, 1.0):
        traces.setdefault(span.context.trace_id, []).append(span)
    raws: list[bytes] = []
    chats: list[ReadableSpan] = []
    for n, group in enumerate(traces.values()):  # each trace's chat spans a message later
        raws.append(encode_spans([s for s in group if not s.name.startswith("chat")] + chats
                                 + (ahead if n == 5 else [])).SerializeToString())
        chats = [s for s in group if s.name.startswith("chat")]
    raws.append(encode_spans(chats).SerializeToString())
    intake, assembled = run(raws)
    assert intake.buffer.counts["spans_late"] == 0 and len(assembled) == 21
    # Forwarded, the partition is said read to the median of its traces, not a day ahead.
    done = forward(raws, [("otlp_spans", 0, i) for i in range(len(raws))], 2, 1_000_000)
    assert done.newest[0] <= max(s.end_time or 0 for s in spans)
    _, whole = run([encode_spans(spread(spans, 1.0)).SerializeToString()])  # all at once
    assert decided_of(whole) == decided
    assert {item.raw for item in whole} < {item.raw for item in assembled}


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_request_exported_again_in_another_message_is_merged_once(encoding):
    """An exporter that sends an export request again (a retry after a timeout, its
    persistent queue replayed after a restart) writes the same spans at a new offset: each
    span is merged once per trace (by its span id), and the decisions are the same as
    from one copy. Before, the tokens, model calls and claims of such traces doubled."""
    spans, decided = genai_app(20, seed=8)
    raws = messages(spans, encoding, 6)
    once, assembled_once = run(raws)
    again = [raws[0], raws[0], raws[1], *raws[1:3], raws[3], *raws[3:]]  # 0, 1, 2 again
    twice, assembled_twice = run(again)
    assert [item.raw for item in assembled_twice] == [item.raw for item in assembled_once]
    assert decided_of(assembled_twice) == decided
    assert twice.buffer.counts["spans_duplicate"] == (
        twice.buffer.counts["spans_read"] - once.buffer.counts["spans_read"]) > 0
    assert twice.buffer.counts["spans_kept"] == once.buffer.counts["spans_kept"]
    # Within one message too (a batching step that merged a request and its retry).
    buffer = SpanBuffer(grace_seconds=2, timeout_seconds=30, max_traces=100, max_spans=10)
    root = a_span("1" * 16, "", 100.0, **{"rag.decision": "answer"})
    buffer.add(a_fragment("a" * 32, 1, root, root))
    assert len(buffer.pending["a" * 32].spans) == 1 and buffer.counts["spans_duplicate"] == 1


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_service_called_with_trace_context_is_whole_without_its_callers_spans(encoding):
    """A RAG service behind a traced gateway: its first span's parent is the gateway's
    (remote: the OTLP span flags say so), whose spans may never reach this topic. Its
    traces are assembled at the timeout as `assembled`, not `incomplete`, with the
    latency of its own first span; with the caller's root span there, as usual."""
    spans, decided = genai_app(12, seed=9)
    called = _called(spans, remote=True)
    intake, assembled = _at_timeout(called, encoding)
    assert decided_of(assembled) == decided
    assert intake.buffer.counts["traces_assembled"] == 12
    assert intake.buffer.counts["traces_incomplete"] == 0
    # A parent not said to be remote (a span of this service lost): incomplete.
    lost, _ = _at_timeout(_called(spans, remote=False), encoding)
    assert lost.buffer.counts["traces_incomplete"] == 12
    for item in assembled:
        first = min((s for s in called if f"{s.context.trace_id:032x}" == item.trace_id),
                    key=lambda s: s.start_time or 0)
        latency = json.loads(item.raw or b"")["usage"]["latency_ms"]
        assert latency == ((first.end_time or 0) - (first.start_time or 0)) / 1e6


def _called(spans: list[ReadableSpan], remote: bool) -> list[ReadableSpan]:
    """The spans with each trace's root made the child of a caller's span."""
    out = []
    for span in spans:
        trace = span.context.trace_id
        parent = (SpanContext(trace, 0xCA11, is_remote=remote,
                              trace_flags=TraceFlags(TraceFlags.SAMPLED))
                  if span.parent is None else span.parent)
        out.append(ReadableSpan(span.name, span.context, parent, span.resource,
                                span.attributes, span.events, span.links, span.kind,
                                status=span.status, start_time=span.start_time,
                                end_time=span.end_time))
    return out


def _at_timeout(spans: list[ReadableSpan], encoding: str) -> tuple[SpanIntake, list[Assembled]]:
    """The intake after every message, waiting for roots, then at the timeout."""
    intake = SpanIntake(load())
    for offset, raw in enumerate(messages(spans, encoding, 7)):
        intake.merge(intake.read(raw, ("otlp_spans", 0, offset)).fragments)
    assert intake.take() == []  # complete only with the root: waits for it
    newest = max(span.end_time or 0 for span in spans) / 1e9
    return intake, intake.take(newest + 31)  # past otlp_timeout_seconds


def test_a_service_with_little_traffic_waits_no_longer_than_its_grace_once_quiet():
    """The clock follows the median of the last fragments' ends: with a trace every 10 s
    it lags the newest by 20 s while spans come. Once the input is quiet for the grace,
    the clock moves on from the newest end seen, and each trace is taken then."""
    buffer = SpanBuffer(grace_seconds=2, timeout_seconds=30, max_traces=100, max_spans=10)
    for n in range(12):
        trace = f"{n:032x}"
        buffer.add(a_fragment(trace, n, a_span("1" * 16, "", 1000.0 + 10 * n,
                                               **{"rag.decision": "answer"})))
        assert buffer.due() == []                 # in its grace
        assert [ready.trace_id for ready in buffer.quiet(2.0)] == [trace]
    assert buffer.clock == 1000.0 + 10 * 11 + 2


def test_an_agent_of_hundreds_of_llm_calls_keeps_its_decision_beyond_the_span_limit():
    """Spans beyond `otlp_spans_per_trace_max` are counted, not kept; the decision span of
    an agent's trace that ends after hundreds of LLM spans was one of them, and the trace
    had no decision. Decision and root spans are kept beyond the limit (a few)."""
    buffer = SpanBuffer(grace_seconds=2, timeout_seconds=30, max_traces=100, max_spans=10)
    calls = [a_span(f"{n + 2:016x}", "1" * 16, 100.0 + n / 100,
                    **{"openinference.span.kind": "LLM", "llm.model_name": "m"})
             for n in range(30)]
    buffer.add(a_fragment("a" * 32, 1, *calls[:20]))
    buffer.add(a_fragment("a" * 32, 2, *calls[20:], a_span("1" * 16, "", 101.0,
                                                           **{"rag.decision": "answer"})))
    assert buffer.counts["spans_over_limit"] == 20 and buffer.counts["spans_kept"] == 11
    (ready,) = buffer.due(103.0)
    assert ready.complete and any("rag.decision" in span.attrs for span in ready.spans)
    flood = [a_span(f"{n + 100:016x}", "", 102.0, **{"rag.decision": "answer"})
             for n in range(50)]
    buffer.add(a_fragment("b" * 32, 3, *calls[:10], *flood))  # bounded all the same
    assert len(buffer.pending["b" * 32].spans) == 10 + 8
