"""Labels on the real embedded broker: produced before and after their traces, they end
up in the windows of their traces' event time and in the exported label metrics."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from workers import scrape, start_worker, stop, wait_for

from monitor.aggregate import checkpoint
from monitor.aggregate.pipeline import Pipeline
from monitor.aggregate.table import TOTAL
from monitor.client import produce, read_latest
from monitor.export.collector import Collector, snapshot_of
from monitor.export.snapshot import Health

pytestmark = pytest.mark.integration

RELEASE = "2026.11.3"
START = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)  # a window boundary (60 s windows)


def _data(n: int = 600):
    rng = np.random.default_rng(8)
    traces, labels = [], []
    for i in range(n):
        answered = rng.random() < 0.8
        trace = {"schema": "rag-decision/1", "trace_id": f"lbl-{i:05d}",
                 "ts": (START + timedelta(seconds=i * 0.2)).isoformat(),  # 2 windows
                 "system": {"release": RELEASE},
                 "slice": {"language": "en" if i % 3 else "de"},
                 "decision": "answer" if answered else "abstain"}
        if not answered:
            trace["reason"] = "weak_retrieval"
        traces.append(trace)
        if i % 2 == 0 or i % 5 == 0:
            answerable = bool(rng.random() < 0.7)
            labels.append({"schema": "rag-label/1", "trace_id": trace["trace_id"],
                           "ts": "2026-11-30T08:00:00Z", "source": "human",
                           "answerable": answerable,
                           "correct": bool(answered and answerable and rng.random() < 0.9),
                           "unsupported_critical": bool(answered and not answerable)})
    return traces, labels


def encode(items):
    return [json.dumps(item).encode() for item in items]


def test_labels_before_and_after_their_traces_land_in_the_trace_windows(broker, tmp_path):
    traces, labels = _data()
    early = [x for x in labels if int(x["trace_id"][-5:]) % 2 == 0]   # before the traces
    late = [x for x in labels if int(x["trace_id"][-5:]) % 2 == 1]    # after them
    process, port = start_worker(broker, tmp_path, env={"RAGMON_PARTITIONS": "1"})
    try:
        settings = broker.settings(partitions=1)
        produce(settings, settings.topic_labels, encode(early))
        wait_for(lambda: scrape(port).get(("ragmon_label_events_waiting", (
            ("kind", "labels"),))) == len(early),
            what="early labels waiting for their traces")
        produce(settings, settings.topic_decisions, encode(traces))
        produce(settings, settings.topic_labels, encode(late))
        joined = ("ragmon_label_events_total", (("kind", "labels"), ("outcome", "joined")))
        got = wait_for(lambda: (m := scrape(port)).get(joined) == len(labels) and m,
                       what=f"{len(labels)} labels joined")
        # The exported label metrics equal the offline pipeline's on the same events.
        oracle = Pipeline(settings)
        oracle.feed_events(encode(early), "labels")
        oracle.feed(encode(traces))
        oracle.feed_events(encode(late), "labels")
        expected = _label_series(oracle)
        assert expected and {k: got.get(k) for k in expected} == expected
        # The windows of the worker's checkpoint hold each label in its trace's window.
        state = read_latest(settings, settings.topic_state)
        pipeline, _ = checkpoint.load(settings, next(iter(state.values())))
        assert sorted(pipeline.windows.open) == [int(START.timestamp()),
                                                 int(START.timestamp()) + 60]
        for start, table in pipeline.windows.open.items():
            cell = table.cell((RELEASE, TOTAL, TOTAL))
            labelled = cell.counts[pipeline.layout.counts["label_labelled"]]
            in_window = sum(
                1 for x in labels
                if start <= (START + timedelta(seconds=int(x["trace_id"][-5:]) * 0.2)
                             ).timestamp() < start + 60)
            assert labelled == in_window > 0
    finally:
        stop(process)


def _label_series(pipeline):
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    registry = CollectorRegistry()
    collector = Collector(20_000)
    registry.register(collector)
    collector.current = snapshot_of([pipeline], Health(), None)
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples
            if s.name.startswith(("ragmon_label_outcomes", "ragmon_label_rate"))}
