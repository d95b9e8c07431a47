"""DecisionEmitter: validation, content stripping, bounded buffer, OpenTelemetry linkage
(no broker needed), and delivery through broker trouble on the real embedded broker."""

from __future__ import annotations

import asyncio
import json
import urllib.request

import pytest
from aiokafka import AIOKafkaConsumer
from opentelemetry.sdk.trace import TracerProvider
from workers import outcome, scrape, start_worker, stop, wait_for

from monitor.broker import EmbeddedBroker, free_port
from monitor.client import DecisionEmitter, ensure_topics


def _nowhere(**kwargs):
    """An emitter whose broker does not exist: nothing can be delivered."""
    return DecisionEmitter(bootstrap_servers=f"127.0.0.1:{free_port()}", **kwargs)


def test_invalid_events_are_reported_once_and_never_sent():
    emitter = _nowhere()
    try:
        with pytest.warns(UserWarning, match="reason_required"):
            assert not emitter.decision(release="r1", decision="abstain")
        assert not emitter.decision(release="r1", decision="abstain")  # no second warning
        with pytest.warns(UserWarning, match="not sent"):  # another reason, its own warning
            assert not emitter.decision(release="r1", decision="maybe")
        assert emitter.counts["invalid"] == 3 and emitter.counts["queued"] == 0
    finally:
        emitter.close(timeout_seconds=1)


def test_content_fields_are_stripped_and_the_buffer_is_bounded():
    emitter = _nowhere(buffer_size=10)
    try:
        assert emitter.decision(release="r1", decision="answer", question="secret?",
                                signals={"top_score": 0.7, "prompt": "secret!"})
        assert b"secret" not in emitter._buffer[0][2]
        for _ in range(49):
            emitter.decision(release="r1", decision="answer")
        assert emitter.counts["dropped"] == 40 and len(emitter._buffer) == 10
    finally:
        emitter.close(timeout_seconds=1)
    newest = _nowhere(buffer_size=5, drop="newest")
    try:
        results = [newest.decision(release="r1", decision="answer") for _ in range(8)]
        assert results == [True] * 5 + [False] * 3 and newest.counts["dropped"] == 3
    finally:
        newest.close(timeout_seconds=1)


def test_active_span_links_both_ways():
    tracer = TracerProvider().get_tracer("test")
    emitter = _nowhere()
    try:
        with tracer.start_as_current_span("answer") as span:
            assert emitter.decision(release="r1", decision="abstain", reason="weak_retrieval",
                                    signals={"top_score": 0.2})
        context = span.get_span_context()
        raw = emitter._buffer[0][2]
        assert format(context.trace_id, "032x").encode() in raw
        assert format(context.span_id, "016x").encode() in raw
        assert span.attributes["rag.decision"] == "abstain"
        assert span.attributes["rag.reason"] == "weak_retrieval"
        assert span.attributes["rag.signals.top_score"] == 0.2
        assert span.attributes["rag.release"] == "r1"
        assert span.attributes["rag.trace_id"] == json.loads(raw)["trace_id"]
    finally:
        emitter.close(timeout_seconds=1)


def _count_messages(bootstrap: str, topic: str) -> int:
    async def count() -> int:
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=None,
                                    auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        n = 0
        try:
            while batch := await consumer.getmany(timeout_ms=1500):
                n += sum(len(records) for records in batch.values())
        finally:
            await consumer.stop()
        return n
    return asyncio.run(count())


@pytest.mark.integration
def test_worker_counts_emitted_decisions(broker, tmp_path):
    process, port = start_worker(broker, tmp_path)
    emitter = DecisionEmitter(broker.settings())
    tracer = TracerProvider().get_tracer("app")
    try:
        for i in range(300):
            with tracer.start_as_current_span("request") as span:
                assert emitter.decision(release="r1", decision="answer", trace_id=f"e-{i}",
                                        signals={"top_score": 0.8}, slice={"language": "en"})
        last = format(span.get_span_context().trace_id, "032x")
        assert emitter.flush(timeout_seconds=30)
        assert emitter.counts["sent"] == 300
        wait_for(lambda: outcome(scrape(port), "folded") == 300, what="300 folded")
        # Grafana jumps from a panel point to the request's trace: OpenMetrics exemplars.
        request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers={
            "Accept": "application/openmetrics-text; version=1.0.0"})
        with urllib.request.urlopen(request, timeout=5) as response:
            text = response.read().decode()
        assert f'# {{trace_id="{last}"}}' in text
    finally:
        emitter.close()
        stop(process)


@pytest.mark.integration
def test_broker_outage_never_blocks_and_delivery_resumes(tmp_path):
    port = free_port()
    running = EmbeddedBroker(port=port, log=tmp_path / "broker.log").start()
    settings = running.settings()
    ensure_topics(settings)
    emitter = DecisionEmitter(settings, buffer_size=100, delivery_timeout_seconds=4)
    try:
        emitter.decision(release="r1", decision="answer")
        assert emitter.flush(timeout_seconds=30) and emitter.counts["sent"] == 1
        running.stop()
        # The calls only enqueue (never wait for the broker): a full buffer drops.
        accepted = [emitter.decision(release="r1", decision="answer") for _ in range(1000)]
        assert all(accepted)
        wait_for(lambda: emitter.counts["dropped"] + emitter.counts["failed"] > 0,
                 what="drop or failure counted")
        running = EmbeddedBroker(port=port, log=tmp_path / "broker2.log").start()
        ensure_topics(settings)  # the embedded broker keeps topics in memory only
        sent_before = emitter.counts["sent"]

        def delivering() -> bool:  # the application keeps serving requests meanwhile
            emitter.decision(release="r1", decision="answer")
            return emitter.counts["sent"] >= sent_before + 50

        wait_for(delivering, timeout=90, what="delivery after the broker came back")
        assert _count_messages(running.bootstrap, settings.topic_decisions) >= 50
    finally:
        emitter.close(timeout_seconds=10)
        running.stop()


@pytest.mark.integration
def test_the_docs_sdk_example_runs():
    import subprocess
    import sys
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "sending.md").read_text()
    section = page.split("## Sending decisions from your application", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "'sent': 2" in done.stdout and "I don't know." in done.stdout
