"""The worker's `otlp` intake on both brokers: spans written by real instrumentation
(tests/otel_apps.py), encoded by the OTel SDK, produced to the Collector's topic as its
Kafka exporter would (unkeyed, and keyed by trace id), split across messages; the
worker's counts per release, decision and reason equal what the applications decided,
through kill -9, and no content marker leaves the worker."""

from __future__ import annotations

import json
import time
import urllib.request
from collections import Counter

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from workers import (
    OWNED,
    read_dlq,
    scrape,
    start_two_workers,
    start_worker,
    stop,
    topics_in_shape,
    wait_for,
)

from monitor.client import produce
from monitor.simulate import Simulator
from monitor.worker.connection import kafka_python_options
from tests.otel_apps import CONTENT_MARKER, genai_app, keyed_messages, langchain_app, messages
from tests.otlp_checks import replay_otlp, replayed_decisions, whole_decisions

pytestmark = pytest.mark.integration

OTLP = {"RAGMON_OTLP_TOPIC": "otlp_spans"}


def send(settings, raws: list[bytes], keys: list[bytes] | None = None,
         partition: int | None = None) -> None:
    """As the Collector's Kafka exporter: one message per export request, unkeyed by
    default (`partition_traces_by_id: false`), else each keyed (`keyed_messages`);
    `partition`: all to that one (a sticky partitioner at low traffic)."""
    producer = KafkaProducer(**kafka_python_options(settings), acks="all")
    try:
        for index, raw in enumerate(raws):
            producer.send("otlp_spans", value=raw, key=None if keys is None else keys[index],
                          partition=partition)
        producer.flush()
    finally:
        producer.close()


def send_keyed(settings, keyed: list[tuple[bytes, bytes]]) -> None:
    send(settings, [raw for _, raw in keyed], [key for key, _ in keyed])


def read_all(settings, topic: str) -> list[bytes]:
    """Every value in `topic` now (kafka-python, to each partition's end)."""
    consumer = KafkaConsumer(**kafka_python_options(settings), group_id=None,
                             enable_auto_commit=False)
    try:
        tps = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        end = consumer.end_offsets(tps)
        values: list[bytes] = []
        deadline = time.monotonic() + 60
        while any(consumer.position(tp) < end[tp] for tp in tps):
            assert time.monotonic() < deadline, f"{topic} not read within 60 s"
            for records in consumer.poll(timeout_ms=500).values():
                values += [r.value or b"" for r in records]
        return values
    finally:
        consumer.close()


def by_decision(samples) -> Counter[tuple[str, str]]:
    found: Counter[tuple[str, str]] = Counter()
    for (name, labels), value in samples.items():
        found_labels = dict(labels)
        if name == "ragmon_traces_total" and found_labels.get("dimension") == "all" and value:
            found[(found_labels["release"], found_labels["decision"])] += int(value)
    return found


def by_reason(samples, code: str) -> Counter[str]:
    found: Counter[str] = Counter()
    for (name, labels), value in samples.items():
        found_labels = dict(labels)
        if (name == "ragmon_reasons_total" and found_labels.get("dimension") == "all"
                and found_labels.get("reason") == code and value):
            found[found_labels["release"]] += int(value)
    return found


def otlp(samples, family: str, outcome: str) -> float:
    return samples.get((f"ragmon_otlp_{family}_total", (("outcome", outcome),)), 0)


def expected(decided) -> tuple[Counter[tuple[str, str]], dict[str, Counter[str]]]:
    decisions: Counter[tuple[str, str]] = Counter()
    reasons: dict[str, Counter[str]] = {}
    for (release, decision, reason), n in decided.items():
        decisions[(release, decision)] += n
        reasons.setdefault(reason, Counter())[release] += n
    return decisions, reasons


def test_spans_of_instrumented_apps_are_counted_as_the_apps_decided(broker, tmp_path):
    settings = broker.settings()
    lc_spans, lc_decided = langchain_app(40, seed=11)
    g_spans, g_decided = genai_app(30, seed=12)
    bad_spans, _ = genai_app(3, seed=13, release=None)  # no release: rejected
    process, port = start_worker(broker, tmp_path, env=OTLP)
    try:
        send(settings, messages(lc_spans, "otlp_proto", 9))
        send_keyed(settings, keyed_messages(g_spans, "otlp_json", 4))
        send(settings, [*messages(bad_spans, "otlp_proto", 100), b"\x00not otlp"])
        traces = 40 + 30
        got = wait_for(lambda: (m := scrape(port)) and otlp(m, "traces", "assembled") >= traces
                       and sum(by_decision(m).values()) >= traces and m,
                       timeout=120, what="every decision assembled and folded")
        time.sleep(3)  # nothing more may arrive: a double count would show now
        got = scrape(port)
        decisions, reasons = expected(lc_decided + g_decided)
        assert by_decision(got) == decisions
        for code in ("critical_claim_unsupported", "weak_retrieval"):
            assert by_reason(got, code) == reasons[code]
        assert otlp(got, "traces", "assembled") == traces
        assert otlp(got, "traces", "rejected") == 3
        assert otlp(got, "messages", "rejected") == 1
        assert otlp(got, "spans", "read") == len(lc_spans) + len(g_spans) + len(bad_spans)
        assert otlp(got, "spans", "late") == 0
        # Each decision produced is the one an intake makes of all of its trace's spans
        # at once: none assembled before some of its spans came.
        offline = whole_decisions([*messages(lc_spans, "otlp_proto", 9),
                                   *messages(g_spans, "otlp_proto", 4)])
        assert len(offline) == traces
        assert set(read_all(settings, settings.topic_decisions)) == offline
        assert got[("ragmon_content_fields_dropped_total", ())] > traces * 3
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as page:
            assert CONTENT_MARKER.encode() not in page.read()
        # `ragmon replay --otlp` on the same spans (as the Collector's file exporter
        # writes them) gives the same decisions.
        replayed = replay_otlp(tmp_path, messages(lc_spans, "otlp_json", 9)
                               + messages(g_spans, "otlp_json", 4))
        assert replayed_decisions(replayed) == by_decision(got)
        assert replayed["otlp"]["traces"]["assembled"] == traces
        letters = read_dlq(broker.bootstrap, settings.topic_dlq, 4)
        reasons_dlq = Counter(dict(r.headers)["ragmon.reason"].decode() for r in letters)
        assert reasons_dlq == {"missing_field": 3, "not_otlp": 1}
        for record in letters:
            headers = dict(record.headers)
            assert headers["ragmon.source.topic"] == b"otlp_spans"
            assert int(headers["ragmon.source.offset"]) >= 0
            assert CONTENT_MARKER.encode() not in (record.value or b"") + b"".join(
                headers.values())
    finally:
        stop(process)
    assert CONTENT_MARKER.encode() not in (tmp_path / "worker.log").read_bytes()
    for topic in (settings.topic_state, settings.topic_spans, settings.topic_decisions):
        assert CONTENT_MARKER.encode() not in b"".join(read_all(settings, topic))


def test_otlp_partitions_that_stay_empty_hold_no_trace_back(broker, tmp_path):
    """The span buffers wait for the slowest otlp partition not read to its end
    (docs/otlp.md); partitions the Collector never writes to, read by a group that has
    committed nothing there, are at their end from the start."""
    settings = broker.settings()
    spans, decided = genai_app(25, seed=21)
    process, port = start_worker(broker, tmp_path, env=OTLP)
    try:
        send(settings, messages(spans, "otlp_proto", 10), partition=0)
        got = wait_for(lambda: (m := scrape(port)) and sum(by_decision(m).values()) >= 25 and m,
                       timeout=90, what="every decision assembled and folded")
        assert by_decision(got) == expected(decided)[0]
        assert otlp(got, "spans", "late") == 0
    finally:
        stop(process)


def test_kill_9_with_spans_in_the_buffer_counts_exactly(broker, tmp_path):
    settings = broker.settings()
    spans, decided = genai_app(100, seed=21)
    raws = messages(spans, "otlp_proto", 7)
    # Half the traces keyed by their id (buffered in their otlp partition), half not
    # (buffered in the spans topic's): both buffers cut by the kill.
    keyed_spans, keyed_decided = genai_app(100, seed=22, release="g-2")
    keyed = keyed_messages(keyed_spans, "otlp_proto", 7)
    # A long grace holds traces in the buffer (and its checkpoint) across the kill.
    env = {**OTLP, "RAGMON_OTLP_GRACE_SECONDS": "4"}
    first, port = start_worker(broker, tmp_path, "first", env=env)
    send(settings, raws[:len(raws) // 2])
    send_keyed(settings, keyed[:len(keyed) // 2])
    wait_for(lambda: otlp(scrape(port), "spans", "read") >= len(spans) // 2,
             what="spans merged by the first worker")
    first.kill()  # kill -9: buffers, deliveries and commits cut wherever they were
    first.wait()
    send(settings, raws[len(raws) // 2:])
    send_keyed(settings, keyed[len(keyed) // 2:])
    send(settings, raws[:len(raws) // 4])  # the exporter retrying: spans delivered twice
    send_keyed(settings, keyed[:len(keyed) // 4])
    second, port = start_worker(broker, tmp_path, "second", env=env)
    try:
        wait_for(lambda: sum(by_decision(scrape(port)).values()) >= 200, timeout=120,
                 what="every decision folded after the restart")
        time.sleep(6)  # past the grace: a double count would show now
        got = scrape(port)
        decisions, _ = expected(decided + keyed_decided)
        assert by_decision(got) == decisions
        assert otlp(got, "traces", "assembled") + otlp(got, "traces", "incomplete") == 200
    finally:
        stop(second)


def test_two_workers_one_killed_the_other_takes_over_the_span_buffers(broker, tmp_path):
    settings = broker.settings()
    spans, decided = genai_app(120, seed=31)
    raws = messages(spans, "otlp_json", 5)
    keyed_spans, keyed_decided = genai_app(120, seed=32, release="g-2")
    keyed = keyed_messages(keyed_spans, "otlp_json", 5)  # buffered in their otlp partitions
    env = {**OTLP, "RAGMON_OTLP_GRACE_SECONDS": "4", "RAGMON_STALL_SECONDS": "15"}
    first, port_a, second, port_b = start_two_workers(broker, tmp_path, env)
    try:
        send(settings, raws[:len(raws) // 2])
        send_keyed(settings, keyed[:len(keyed) // 2])
        wait_for(lambda: otlp(scrape(port_a), "spans", "read")
                 + otlp(scrape(port_b), "spans", "read") >= len(spans) // 2,
                 what="both workers merging spans")
        first.kill()  # kill -9 with traces in its buffers: they move with the partitions
        first.wait()
        send(settings, raws[len(raws) // 2:])
        send_keyed(settings, keyed[len(keyed) // 2:])
        wait_for(lambda: scrape(port_b).get(OWNED) == 4, what="the survivor owning all")
        wait_for(lambda: sum(by_decision(scrape(port_b)).values()) >= 240, timeout=150,
                 what="every decision counted by the survivor")
        time.sleep(6)  # past the grace: a double count would show now
        decisions, _ = expected(decided + keyed_decided)
        assert by_decision(scrape(port_b)) == decisions
        # ... each from all of its spans: the killed worker's partitions, said to be at
        # their end before the kill, held the buffers until the survivor read them.
        assert otlp(scrape(port_b), "spans", "late") == 0
    finally:
        for process in (first, second):
            if process.poll() is None:
                stop(process)


def test_a_broker_restart_keeps_the_span_intake_exact(broker, tmp_path):
    """Apache Kafka restarted with its log while spans wait in the buffers: nothing
    lost, nothing counted twice. The embedded broker keeps its log in memory: after its
    restart the spans sent afterwards are all counted (none skipped as a redelivery of
    the old log's offsets). As for decisions (test_worker.py), the embedded broker is
    restarted once the worker is idle: a checkpoint written into the new log while a
    batch of the old one is still in flight carries the old log's offsets (a known gap
    of the decisions path too, noted on the issue)."""
    settings = broker.settings()
    before, decided_before = genai_app(60, seed=41)
    after, decided_after = genai_app(60, seed=42, release="g-2")
    process, port = start_worker(broker, tmp_path, env=OTLP)
    keep = broker.name == "kafka"
    try:
        send(settings, messages(before, "otlp_proto", 7))
        if keep:
            wait_for(lambda: otlp(scrape(port), "spans", "read") >= len(before) // 2,
                     what="spans merged before the restart")
        else:
            wait_for(lambda: sum(by_decision(scrape(port)).values()) == 60,
                     what="the decisions before the restart")
            time.sleep(3)  # its last checkpoints written
        broker.restart(keep_log=keep)
        if not keep:
            wait_for(lambda: topics_in_shape(settings), timeout=60, what="topics repaired")
        send(settings, messages(after, "otlp_proto", 7))
        want, _ = expected(decided_before + decided_after if keep else decided_after)
        wait_for(lambda: by_decision(scrape(port)) == want, timeout=150,
                 what="the decisions after the restart")
        time.sleep(4)
        assert by_decision(scrape(port)) == want
    finally:
        stop(process)


def test_hostile_spans_are_set_apart_and_the_intake_goes_on(broker, tmp_path):
    """Spans that stopped the intake before session 48 (an array-valued span kind and
    operation name; OTLP/JSON with a time beyond 64 bits, and arrays nested 5,000 deep):
    the trace of the first is assembled, the JSON messages are dead-lettered `not_otlp`,
    and an app's decisions sent after them are all counted."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    settings = broker.settings()
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.version": "h-1"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer("t").start_as_current_span("gate") as gate:
        gate.set_attributes({"rag.decision": "answer", "rag.reason": "ok"})
        with provider.get_tracer("t").start_as_current_span("llm") as llm:
            llm.set_attributes({"openinference.span.kind": ["LLM"],
                                "gen_ai.operation.name": ["chat"]})
    span = {"traceId": "a" * 32, "spanId": "b" * 16, "startTimeUnixNano": "1",
            "endTimeUnixNano": str(2**64), "attributes": []}
    deep = b'{"arrayValue": {"values": [' * 5000 + b'{"stringValue": "x"}' + b"]}}" * 5000
    hostile = [json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}).encode(),
               b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "' + b"c" * 32
               + b'", "spanId": "' + b"d" * 16 + b'", "attributes": [{"key": "rag.x", '
               b'"value": ' + deep + b"}]}]}]}]}"]
    spans, decided = genai_app(20, seed=61)
    process, port = start_worker(broker, tmp_path, env=OTLP)
    try:
        send(settings, [*messages(exporter.get_finished_spans(), "otlp_proto", 10), *hostile])
        send(settings, messages(spans, "otlp_proto", 10))
        got = wait_for(lambda: (m := scrape(port)) and sum(by_decision(m).values()) >= 21
                       and m, timeout=120, what="the decisions after the hostile spans")
        assert by_decision(got) == expected(decided)[0] + Counter({("h-1", "answer"): 1})
        assert otlp(got, "messages", "rejected") == 2
        letters = read_dlq(broker.bootstrap, settings.topic_dlq, 2)
        assert [dict(r.headers)["ragmon.reason"] for r in letters] == [b"not_otlp"] * 2
    finally:
        stop(process)


def test_a_flood_of_spans_that_never_complete_is_bounded_and_decisions_go_on(broker, tmp_path):
    """200,000 spans of 100,000 traces that never complete (no root ever arrives), the
    buffers bounded at 2,000 traces a partition: they are evicted (counted), memory
    stays bounded, the decisions topic's own traffic is counted meanwhile, and an
    instrumented app's decisions sent after the flood are all counted."""
    settings = broker.settings()
    flood = _never_completing(100_000)
    spans, decided = genai_app(50, seed=51)
    traces = list(Simulator(seed=5, scenario="steady").traces(1000))
    env = {**OTLP, "RAGMON_OTLP_PENDING_MAX": "2000"}
    process, port = start_worker(broker, tmp_path, env=env)
    try:
        send(settings, flood)
        produce(settings, settings.topic_decisions, traces)  # the SDK's path, meanwhile
        wait_for(lambda: otlp(scrape(port), "spans", "read") >= 200_000, timeout=240,
                 what="the flood read")
        send(settings, messages(spans, "otlp_proto", 10))
        wait_for(lambda: by_decision(scrape(port))[("g-1", "answer")] > 0
                 and sum(by_decision(scrape(port)).values()) >= 1050, timeout=120,
                 what="the decisions of both paths")
        got = scrape(port)
        app = Counter({key: n for key, n in by_decision(got).items() if key[0] == "g-1"})
        assert app == expected(decided)[0]
        assert sum(by_decision(got).values()) == 1050
        assert got[("ragmon_otlp_pending_traces", ())] <= 4 * 2000
        assert otlp(got, "traces", "evicted") >= 100_000 - 4 * 2000
        assert otlp(got, "spans", "read") == 200_000 + len(spans)
    finally:
        stop(process)


def _never_completing(traces: int) -> list[bytes]:
    """OTLP messages of `traces` traces of two child spans each, whose root never comes
    (built with the protobuf classes: the SDK cannot end a span without its parent's
    id being real)."""
    from opentelemetry.proto.trace.v1.trace_pb2 import TracesData
    out = []
    now = time.time_ns()
    for start in range(0, traces, 500):
        data = TracesData()
        scope = data.resource_spans.add().scope_spans.add()
        for n in range(start, min(start + 500, traces)):
            for child in (1, 2):
                span = scope.spans.add()
                span.trace_id = n.to_bytes(16, "big")
                span.span_id = (n * 4 + child).to_bytes(8, "big")
                span.parent_span_id = (n * 4).to_bytes(8, "big")
                span.name = "flood"
                span.start_time_unix_nano, span.end_time_unix_nano = now, now + 1000
                attribute = span.attributes.add()
                attribute.key, attribute.value.string_value = "rag.slice.language", "en"
        out.append(data.SerializeToString())
    return out
