"""Producers compress: a Java client with `compression.type=lz4`, the Collector's Kafka
exporter with `producer.compression: zstd`, a Python SDK with snappy. The worker reads
record batches of every codec Kafka has, on both brokers, from the decisions topic and
from the otlp topic alike. Before session 48 aiokafka ran without its codec extras
(cramjam): the first lz4, zstd or snappy batch stopped the worker's consumer with
UnsupportedCodecError."""

from __future__ import annotations

import pytest
from kafka import KafkaProducer
from workers import outcome, release_traces, scrape, start_worker, stop, wait_for

from monitor.simulate import Simulator
from monitor.worker.connection import kafka_python_options
from tests.otel_apps import genai_app, messages

pytestmark = pytest.mark.integration

CODECS = ("gzip", "snappy", "lz4", "zstd")


def test_record_batches_of_every_codec_are_read(broker, tmp_path):
    settings = broker.settings()
    traces = list(Simulator(seed=8, scenario="steady").traces(400 * len(CODECS)))
    spans, decided = genai_app(10 * len(CODECS), seed=81)
    spans_sent = messages(spans, "otlp_proto", 9)
    process, port = start_worker(broker, tmp_path, env={"RAGMON_OTLP_TOPIC": "otlp_spans"})
    try:
        for index, codec in enumerate(CODECS):
            producer = KafkaProducer(**kafka_python_options(settings), acks="all",
                                     compression_type=codec, linger_ms=50)
            try:
                for raw in traces[index::len(CODECS)]:
                    producer.send(settings.topic_decisions, raw)
                for raw in spans_sent[index::len(CODECS)]:
                    producer.send("otlp_spans", raw)
                producer.flush()
            finally:
                producer.close()
        expected = len(traces) + sum(decided.values())
        got = wait_for(lambda: (m := scrape(port)) and release_traces(m) >= expected and m,
                       timeout=120, what="every decision of every codec folded")
        assert release_traces(got) == expected
        assert outcome(got, "rejected") == 0
        assert got[("ragmon_otlp_traces_total", (("outcome", "assembled"),))] == sum(
            decided.values())
    finally:
        stop(process)
    assert "UnsupportedCodecError" not in (tmp_path / "worker.log").read_text(errors="replace")
