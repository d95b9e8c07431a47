"""The `otlp` intake without a broker: spans written by real instrumentation
(OpenInference's LangChain instrumentor, the OTel SDK under the GenAI conventions),
encoded by the OTel SDK's OTLP encoder, decoded, buffered and assembled into decisions;
`ragmon replay --otlp` on a file of them. The worker's intake is in test_worker_otlp.py."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from monitor.cli import main
from monitor.client import DecisionEmitter, annotate_span
from monitor.ingest.otlp import NotOtlp, decode
from monitor.ingest.spanbuffer import SpanBuffer
from monitor.ingest.spans import Assembled, SpanIntake, forward, records_of, spans_record
from monitor.settings import load
from tests.made_spans import a_fragment, a_span
from tests.otel_apps import (
    CONTENT_MARKER,
    genai_app,
    keyed_messages,
    langchain_app,
    messages,
)

ENCODINGS = ("otlp_proto", "otlp_json")
MARKER = CONTENT_MARKER.encode()


def run(raws: list[bytes], **overrides: Any) -> tuple[SpanIntake, list[Assembled]]:
    intake = SpanIntake(load(None, **overrides))
    out: list[Assembled] = []
    for offset, raw in enumerate(raws):
        found = intake.read(raw, ("otlp_spans", 0, offset))
        assert not isinstance(found, NotOtlp), found
        intake.merge(found.fragments)
        out += intake.take()
    return intake, out + intake.take(final=True)


def decided_of(assembled: list[Assembled]) -> Counter[tuple[str, str, str]]:
    found: Counter[tuple[str, str, str]] = Counter()
    for item in assembled:
        assert item.raw is not None, item.rejection
        trace = json.loads(item.raw)
        found[(trace["system"]["release"], trace["decision"], trace["reason"])] += 1
    return found


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_langchain_decisions_from_openinference_spans(encoding):
    spans, decided = langchain_app(30)
    # 7 spans a message after a shuffle: every trace (8 spans) is split across messages
    intake, assembled = run(messages(spans, encoding, per_message=7))
    assert decided_of(assembled) == decided
    counts = intake.buffer.counts
    assert counts["traces_assembled"] == 30 and counts["spans_read"] == len(spans)
    assert counts["content_fields_dropped"] > 30 * 5  # input/output values, documents, ...
    for item in assembled:
        assert item.raw is not None and MARKER not in item.raw
        trace = json.loads(item.raw)
        assert trace["system"]["app"] == "lc-rag"
        assert 5 <= trace["retrieval"]["top_k"] <= 10  # documents counted, content left
        assert trace["usage"]["model_calls"] == 1
        assert trace["otel"]["trace_id"] == trace["trace_id"] == item.trace_id


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_genai_conventions_fill_the_decision(encoding):
    spans, decided = genai_app(25)
    _, assembled = run(messages(spans, encoding, per_message=3))
    assert decided_of(assembled) == decided
    for item in assembled:
        assert item.raw is not None and MARKER not in item.raw
        trace = json.loads(item.raw)
        assert trace["system"] == {"app": "genai-rag", "release": "g-1",
                                   "model": "qwen3-0525", "index_version": "kb-2026-11"}
        retrieval = trace["retrieval"]
        assert retrieval["top_k"] == len(retrieval["chunk_ids"]) >= 5
        calls = trace["usage"]["model_calls"]
        assert trace["usage"]["input_tokens"] == 100 * calls
        assert trace["usage"]["output_tokens"] == 20 * calls
        assert 0 <= trace["evals"]["faithfulness"] <= 1
        assert trace["claims"] == [{"id": "c1", "importance": "critical",
                                    "verdict": "supported", "entailment": 0.9}]
    # top_score: the highest document score of the retrieval span
    by_trace = {f.trace_id: f for raw in messages(spans, "otlp_proto", 1000)
                for f in decode(raw, ("t", 0, 0)).fragments}  # type: ignore[union-attr]
    first = json.loads(assembled[0].raw or b"")
    docs = [d for s in by_trace[assembled[0].trace_id].spans for d in s.docs]
    assert first["signals"]["top_score"] == max(score for _, score in docs)


def test_contract_violations_are_rejected_without_content():
    spans, _ = genai_app(4, release=None)  # no rag.release, no service.version
    intake, assembled = run(messages(spans, "otlp_proto", 100))
    assert [a.rejection.reason for a in assembled if a.rejection] == ["missing_field"] * 4
    assert all(MARKER not in (a.rejection.payload if a.rejection else b"") for a in assembled)
    assert intake.buffer.counts["traces_rejected"] == 4

    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.version": "r9"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer("t").start_as_current_span("gate") as span:
        span.set_attribute("rag.decision", "maybe")
    with provider.get_tracer("t").start_as_current_span("gate") as span:
        span.set_attribute("rag.decision", "answer")
        span.set_attribute("rag.signals.top_score", float("nan"))
    _, assembled = run(messages(exporter.get_finished_spans(), "otlp_proto", 10))
    assert sorted(a.rejection.reason for a in assembled if a.rejection) == [
        "invalid_value", "non_finite"]


def test_traces_without_a_decision_are_counted_not_rejected():
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.version": "r9"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    for _ in range(3):
        with tracer.start_as_current_span("GET /healthz"), tracer.start_as_current_span("db"):
            pass
    intake, assembled = run(messages(exporter.get_finished_spans(), "otlp_proto", 4))
    assert assembled == [] and intake.buffer.counts["traces_no_decision"] == 3
    assert intake.buffer.counts["spans_read"] == 6


@pytest.mark.parametrize("raw,reason", [
    (b"\xff\xfe not protobuf", "not_otlp"),
    (b'{"resourceSpans": "no"}', "not_otlp"),
    (b'{"hello": 1}', "not_otlp"),
    (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"spanId": "00"}]}]}]}', "not_otlp"),
    (b"{" + b" " * 1_000_001 + b"}", "too_large"),
])
def test_bytes_that_are_not_otlp_say_why_without_quoting_them(raw, reason):
    found = decode(raw, ("otlp_spans", 0, 7))
    assert isinstance(found, NotOtlp) and found.reason == reason
    assert raw[:12].decode("latin-1") not in found.detail


def test_redelivered_fragments_merge_once_and_late_spans_are_counted():
    buffer = SpanBuffer(grace_seconds=2, timeout_seconds=30, max_traces=100, max_spans=10)
    decision = a_fragment("a" * 32, 1, a_span("1" * 16, "", 100.0, **{"rag.decision": "answer"}))
    child = a_fragment("a" * 32, 2, a_span("2" * 16, "1" * 16, 99.0))
    for fragment in (child, decision, child, decision):  # a redelivery of both
        buffer.add(fragment)
    assert len(buffer.pending["a" * 32].spans) == 2
    assert buffer.counts["spans_duplicate"] == 2
    assert buffer.due(101.0) == []            # grace not yet passed
    (ready,) = buffer.due(102.0)
    assert ready.complete and ready.source == ("otlp_spans", 0, 1)
    buffer.add(a_fragment("a" * 32, 3, a_span("3" * 16, "1" * 16, 103.0)))
    assert buffer.counts["spans_late"] == 1 and len(buffer) == 0


@pytest.mark.parametrize("encoding", ["otlp_proto", "otlp_json"])
def test_messages_keyed_by_their_trace_stay_in_their_partition_with_the_same_decisions(
        encoding):
    """`partition_traces_by_id: true`: a message keyed by its one trace's id (in hex, or
    its 16 bytes) is buffered where it came from; any other is re-keyed through the spans
    topic. Either way the same decisions come out."""
    spans, decided = genai_app(30, seed=5)
    keyed = keyed_messages(spans, encoding, 7)
    keys: list[bytes | None] = [key for key, _ in keyed]
    keys[0] = bytes.fromhex(keys[0].decode())  # 16 raw bytes name it too
    keys[1] = keys[2]                          # another trace's id: re-keyed
    keys[3] = None                             # unkeyed: re-keyed
    others, decided_others = genai_app(3, seed=6)
    raws = [raw for _, raw in keyed] + messages(others, encoding, 100)
    keys += [keyed_messages(others, encoding, 100)[0][0]]  # several traces: re-keyed
    sources = [("otlp_spans", i % 3, i) for i in range(len(raws))]
    done = forward(raws, sources, 4, 1_000_000, keys)
    local = [fragment for fragments in done.local.values() for fragment in fragments]
    assert len(local) == len(keyed) - 2
    assert all(where == ("otlp_spans", fragment.source[1])
               for where, fragments in done.local.items() for fragment in fragments)
    assert {0, 1, 3, len(raws) - 1} & {f.source[2] for f in local} == {0}
    chunks = records_of(done.fragments, 4)
    forwarded = [f for found in chunks.values() for c in found for f in spans_record(c).fragments]
    assert {f.source[2] for f in forwarded} == {1, 3, len(raws) - 1}
    # Merged per partition (local) or per spans partition (forwarded), as the worker
    # does: the decisions are the applications', the repeated spans merged once.
    intakes: dict[object, SpanIntake] = {}
    for where, fragments in done.local.items():
        intakes.setdefault(where, SpanIntake(load())).merge(fragments)
    for partition, found in chunks.items():
        for chunk in found:
            intakes.setdefault(partition, SpanIntake(load())).merge(spans_record(chunk).fragments)
    found = Counter()
    for intake in intakes.values():
        for item in intake.take(final=True):
            trace = json.loads(item.raw)
            found[(trace["system"]["release"], trace["decision"], trace.get("reason"))] += 1
    assert found == decided + decided_others


def test_a_trace_without_its_root_waits_for_the_timeout_then_is_incomplete():
    buffer = SpanBuffer(grace_seconds=2, timeout_seconds=30, max_traces=100, max_spans=10)
    buffer.add(a_fragment("b" * 32, 1, a_span("1" * 16, "9" * 16, 100.0,
                                            **{"rag.decision": "abstain"})))
    assert buffer.due(125.0) == []
    (ready,) = buffer.due(131.0)
    assert not ready.complete and ready.spans


def test_the_buffer_is_bounded_under_a_flood_of_traces_that_never_complete():
    buffer = SpanBuffer(grace_seconds=2, timeout_seconds=1e9, max_traces=1000, max_spans=4)
    whole = a_fragment("e" * 32, 0, a_span("1" * 16, "", 100.0, **{"rag.decision": "answer"}))
    buffer.add(whole)  # complete, in its grace: never evicted by the flood behind it
    for n in range(50_000):
        buffer.add(a_fragment(f"{n:032x}", n, a_span("1" * 16, "2" * 16, 100.0 + n / 1000),
                             a_span("3" * 16, "2" * 16, 100.0)))
        assert len(buffer) <= 1000
    assert buffer.counts["traces_evicted"] == 50_000 - 999  # the complete one stays
    assert [ready.trace_id for ready in buffer.due()][:1] == ["e" * 32]
    one = "f" * 32  # one trace of many spans keeps max_spans of them
    for n in range(100):
        buffer.add(a_fragment(one, 10**6 + n, a_span(f"{n:016x}", "2" * 16, 200.0)))
    assert len(buffer.pending[one].spans) == 4 and buffer.counts["spans_over_limit"] == 96


def test_a_restored_buffer_assembles_exactly_as_one_never_stopped():
    spans, decided = langchain_app(20, seed=5)
    raws = messages(spans, "otlp_proto", per_message=5)
    settings = load(None)
    first = SpanIntake(settings)
    out: list[Assembled] = []
    for offset, raw in enumerate(raws[:len(raws) // 2]):
        first.merge(first.read(raw, ("otlp_spans", 0, offset)).fragments)  # type: ignore[union-attr]
        out += first.take()
    blob = first.buffer.to_bytes()
    assert MARKER not in blob
    second = SpanIntake(settings)
    second.buffer.restore(blob)
    for offset, raw in enumerate(raws[len(raws) // 2:], len(raws) // 2):
        second.merge(second.read(raw, ("otlp_spans", 0, offset)).fragments)  # type: ignore[union-attr]
        out += second.take()
    out += second.take(final=True)
    assert decided_of(out) == decided
    assert second.buffer.counts["traces_assembled"] == 20


def test_replay_otlp_gives_what_the_applications_decided(tmp_path):
    lc_spans, lc_decided = langchain_app(40, seed=7)
    g_spans, g_decided = genai_app(30, seed=8)
    path = tmp_path / "spans.jsonl"
    lines = (messages(lc_spans, "otlp_json", 9) + messages(g_spans, "otlp_json", 4)
             + [b"not otlp at all"])
    path.write_bytes(b"\n".join(lines) + b"\n")
    out, dlq = tmp_path / "summary.json", tmp_path / "dlq.jsonl"
    assert main(["replay", "--otlp", str(path), "--out", str(out), "--dlq", str(dlq),
                 "--no-progress"]) == 0
    summary = json.loads(out.read_text())
    decided = lc_decided + g_decided
    for release in {r for r, _, _ in decided}:
        want = Counter({d: n for (r, d, _), n in decided.items() if r == release})
        got = summary["releases"][release]["total"]["decisions"]
        assert {d: n for d, n in got.items() if n} == dict(want)
        reasons = summary["releases"][release]["total"]["reasons"]
        for code in ("critical_claim_unsupported", "weak_retrieval"):
            assert reasons[code] == sum(n for (r, _, c), n in decided.items()
                                        if r == release and c == code)
    otlp = summary["otlp"]
    assert otlp["traces"]["assembled"] == 70 and otlp["messages"]["rejected"] == 1
    assert otlp["spans"]["read"] == len(lc_spans) + len(g_spans)
    (letter,) = [json.loads(line) for line in dlq.read_text().splitlines()]
    assert letter["reason"] == "not_otlp" and letter["line"] == len(lines)
    assert CONTENT_MARKER not in out.read_text() + dlq.read_text()


def test_what_the_sdk_puts_on_a_span_is_read_back_as_the_same_decision():
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "app"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    fields = {
        "slice": {"language": "de", "risk": "high"}, "signals": {"top_score": 0.71},
        "query_tokens": 14, "cluster": "returns-3", "rule": "T_CRITICAL",
        "claims": [{"id": "c1", "importance": "critical", "verdict": "unsupported",
                    "entailment": 0.18, "evidence": ["kb#1"], "rendered": False}],
        "requirements": {"expected": ["a", "b"], "covered": ["a"], "critical": ["b"],
                         "rubric": "v3"},
        "checks": {"citation": True, "verbatim": False, "self_check": "pass"},
        "usage": {"cost": 0.01, "input_tokens": 812}, "evals": {"faithfulness": 0.9},
        "system": {"model": "qwen3", "index_version": "kb-11"},
    }
    emitter = DecisionEmitter(bootstrap_servers="127.0.0.1:9")  # nothing listens: queued
    try:
        with tracer.start_as_current_span("rag request"):
            with tracer.start_as_current_span("gate"):
                emitter.decision(release="r7", decision="partial",
                                 reason="critical_claim_unsupported",
                                 **json.loads(json.dumps(fields)))
            with tracer.start_as_current_span("gate again"):
                assert annotate_span(decision="abstain", reason="weak_retrieval",
                                     trace_id="req-2", release="r7",
                                     question=CONTENT_MARKER)  # content: never set
        sent = json.loads(emitter._buffer[0][2])
    finally:
        emitter.close(timeout_seconds=1)
    assert not annotate_span(decision="answer")  # no recording span here
    spans = exporter.get_finished_spans()
    assert all(CONTENT_MARKER not in str(dict(s.attributes or {})) for s in spans)
    _, assembled = run(messages(spans, "otlp_proto", 10))
    (got,) = [json.loads(a.raw or b"") for a in assembled]
    # the decision span is the last to end, and it holds the later annotation
    assert got["trace_id"] == "req-2" and got["decision"] == "abstain"
    spans_of_first = [s for s in spans if s.name != "gate again"]
    _, assembled = run(messages(spans_of_first, "otlp_json", 10))
    (got,) = [json.loads(a.raw or b"") for a in assembled]
    for key in ("trace_id", "decision", "reason", "slice", "signals", "query_tokens",
                "cluster", "rule", "claims", "requirements", "checks", "evals"):
        assert got[key] == sent[key], key
    assert got["system"] == {"app": "app", **sent["system"]}
    assert got["usage"]["cost"] == 0.01 and got["usage"]["input_tokens"] == 812


class _Receiver(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP endpoint (what the Collector's otlp receiver is): keeps the bodies."""

    bodies: ClassVar[list[bytes]] = []

    def do_POST(self) -> None:
        size = int(self.headers["Content-Length"])
        _Receiver.bodies.append(self.rfile.read(size))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *_: Any) -> None:
        pass


@pytest.mark.parametrize("app", ["langchain_app.py", "plain_otel_app.py"])
def test_the_documented_examples_run_as_written(app):
    """docs/otlp/*.py, run as docs/otlp.md says, export OTLP/HTTP to a receiver;
    the requests they send (the bytes the Collector forwards) assemble into decisions."""
    _Receiver.bodies = []
    server = http.server.HTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        env = {**os.environ, "OTEL_SERVICE_NAME": "support-assistant",
               "OTEL_RESOURCE_ATTRIBUTES": "service.version=2026.12.1",
               "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{server.server_port}"}
        docs = Path(__file__).resolve().parents[2] / "docs" / "otlp"
        done = subprocess.run([sys.executable, str(docs / app), "--requests", "12"],
                              env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
    finally:
        server.shutdown()
    intake, assembled = run(_Receiver.bodies)
    decisions = [json.loads(a.raw or b"") for a in assembled]
    assert len(decisions) == 12 and intake.buffer.counts["traces_rejected"] == 0
    assert {d["system"]["release"] for d in decisions} == {"2026.12.1"}
    assert {d["system"]["app"] for d in decisions} == {"support-assistant"}
    assert all("top_score" in d["signals"] for d in decisions)
