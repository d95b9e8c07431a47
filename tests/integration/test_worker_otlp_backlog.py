"""A backlog of spans waiting in several partitions of the Collector's topic when the
worker starts (after an outage), exported in the order the spans ended, the exporter's
batches spread over the partitions: every decision the worker produces is byte for byte
the one an intake makes of all of its trace's spans at once, and no span comes late.

Each OTLP partition is read at its own pace, and a trace's spans sit in two of them
where an export batch ends: the span buffers wait for the slowest partition (the
watermark, docs/otlp.md). This backlog is too small to reproduce session 49's race (a
buffer that had a forwarded batch's first records and not yet its marks took traces
early: ~30 late spans in 60,000 requests, on Apache Kafka only); the unit case is in
`tests/ingest/test_span_marks.py`."""

from __future__ import annotations

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from test_worker_otlp import OTLP, by_decision, expected, otlp, read_all, send
from workers import scrape, start_worker, stop, wait_for

from monitor.worker.connection import kafka_python_options
from tests.otel_apps import genai_app, messages, spread
from tests.otlp_checks import whole_decisions

pytestmark = pytest.mark.integration

REQUESTS = 8000
SPANS_PER_MESSAGE = 200  # the exporter's batches


def test_a_backlog_over_several_partitions_assembles_every_trace_whole(broker, tmp_path):
    settings = broker.settings()
    spans, decided = genai_app(REQUESTS, seed=49)
    # 0.02 s apart: the last 160 s of traffic until now.
    ordered = sorted(spread(spans, 0.02), key=lambda span: span.end_time or 0)
    raws = [messages(ordered[at:at + SPANS_PER_MESSAGE], "otlp_proto", SPANS_PER_MESSAGE)[0]
            for at in range(0, len(ordered), SPANS_PER_MESSAGE)]
    admin = KafkaAdminClient(**kafka_python_options(settings))
    admin.create_topics([NewTopic("otlp_spans", settings.partitions, 1)])
    admin.close()
    for partition in range(settings.partitions):  # round robin: a trace's ends elsewhere
        send(settings, raws[partition::settings.partitions], partition=partition)
    # Batches as large as production's, so that a forwarded batch fills several records.
    process, port = start_worker(broker, tmp_path, env={**OTLP, "RAGMON_BATCH_SIZE": "10000"})
    try:
        got = wait_for(lambda: (m := scrape(port)) and sum(by_decision(m).values()) >= REQUESTS
                       and otlp(m, "traces", "assembled") >= REQUESTS and m,
                       timeout=240, what="every decision of the backlog folded")
        assert by_decision(got) == expected(decided)[0]
        assert otlp(got, "spans", "late") == 0
        assert otlp(got, "traces", "incomplete") == otlp(got, "traces", "evicted") == 0
        offline = whole_decisions(raws)
        assert len(offline) == REQUESTS
        assert set(read_all(settings, settings.topic_decisions)) == offline
    finally:
        stop(process)
