"""Spans that carry a lot (big kept attributes, many spans a trace) under the smallest
`state_max_bytes` (1 MiB): the span buffers outgrow what one checkpoint record may hold
long before `otlp_pending_max` traces wait. The checkpoints evict the oldest waiting
traces (counted) instead of being refused, and the decisions after them are counted.
Before session 48 the refused checkpoint was retried forever: the intake stopped."""

from __future__ import annotations

import random
import time

import pytest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData
from test_worker_otlp import send
from workers import release_traces, scrape, start_worker, stop, wait_for

from tests.otel_apps import genai_app, messages

pytestmark = pytest.mark.integration


def _big_incomplete(traces: int, seed: int) -> list[bytes]:
    """`traces` traces of five LLM spans with 300 random hex characters each in a kept
    attribute, whose root never comes."""
    rng, now, out = random.Random(seed), time.time_ns(), []
    for start in range(0, traces, 40):  # 200 spans a message, as the exporter batches
        data = TracesData()
        scope = data.resource_spans.add().scope_spans.add()
        for n in range(start, min(start + 40, traces)):
            for child in range(1, 6):
                span = scope.spans.add(trace_id=(n + 1).to_bytes(16, "big"),
                                       span_id=((n + 1) * 8 + child).to_bytes(8, "big"),
                                       parent_span_id=((n + 1) * 8).to_bytes(8, "big"),
                                       name="llm", start_time_unix_nano=now,
                                       end_time_unix_nano=now + 1000)
                note = rng.randbytes(150).hex()
                span.attributes.extend([
                    KeyValue(key="openinference.span.kind", value=AnyValue(string_value="LLM")),
                    KeyValue(key="rag.note", value=AnyValue(string_value=note))])
        out.append(data.SerializeToString())
    return out


def test_span_buffers_bigger_than_a_checkpoint_evict_and_the_intake_goes_on(broker, tmp_path):
    settings = broker.settings()
    spans, decided = genai_app(20, seed=71)
    env = {"RAGMON_OTLP_TOPIC": "otlp_spans", "RAGMON_STATE_MAX_BYTES": str(1024 * 1024)}
    process, port = start_worker(broker, tmp_path, env=env)
    flood = _big_incomplete(8000, seed=7)
    evicted = ("ragmon_otlp_traces_total", (("outcome", "evicted"),))
    read = ("ragmon_otlp_messages_total", (("outcome", "read"),))
    try:
        # The flood first, read to its end, then the app: an app trace merged between
        # flood messages is as old as they are, and may be evicted with them (a Kafka
        # producer spreads unkeyed messages at random, so the order in which the
        # worker meets them is not the order sent).
        send(settings, flood)
        wait_for(lambda: (m := scrape(port)) and m.get(read, 0) >= len(flood)
                 and m.get(evicted, 0) > 0, timeout=180, what="the flood read and evicted")
        send(settings, messages(spans, "otlp_proto", 10))
        seen: list = [{}]

        def decided_all():
            seen[0] = scrape(port)
            return release_traces(seen[0]) >= 20 and seen[0]

        try:
            got = wait_for(decided_all, timeout=180, what="the decisions after the big spans")
        except AssertionError as error:  # what held them: the intake's own counters
            held = {k: v for k, v in seen[0].items() if "otlp" in k[0] or "input" in k[0]}
            raise AssertionError(f"{error}; counters {held}") from None
        assert release_traces(got) == sum(decided.values())
    finally:
        stop(process)
    assert "MessageSizeTooLarge" not in (tmp_path / "worker.log").read_text(errors="replace")
