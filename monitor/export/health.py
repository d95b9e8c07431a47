"""The monitor's own health and its drift verdicts as metric families (with `export`,
prometheus_client's home): families built from a snapshot at scrape time."""

from __future__ import annotations

from typing import Any, Final

import numpy as np
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.samples import Exemplar

from monitor.aggregate.layout import Histogram, Layout
from monitor.aggregate.table import TOTAL, Cell
from monitor.detect.drift import DriftView
from monitor.detect.reference import COMPONENT_NAMES
from monitor.export.snapshot import ALL, Snapshot
from monitor.ingest.parse import REASONS

__all__ = ["SIGNAL_BUCKETS", "STREAM_LABELS", "buckets", "drift", "gauge", "health"]

STREAM_LABELS: Final = ("release", "dimension", "value", "signal", "direction")
SIGNAL_BUCKETS: Final = 10  # exported buckets per unit-range signal (le=0.1 .. 1.0)


def buckets(hist: Histogram, cell: Cell, scale: float) -> tuple[list[tuple[str, float]], float]:
    """Cumulative Prometheus buckets from the fine bins (coarsened), and the sum."""
    bins = cell.counts[hist.offset : hist.offset + hist.width]
    cumulative = np.cumsum(bins)
    edges = hist.edges
    # Fine bin i (1..len(edges)-1) ends at edges[i]; keep ~10 evenly spaced bounds.
    step = max(1, (len(edges) - 1) // SIGNAL_BUCKETS)
    picks = list(range(step, len(edges), step))
    buckets = [(_le(edges[i] * scale), float(cumulative[i])) for i in picks]
    buckets.append(("+Inf", float(cumulative[-1])))
    return buckets, float(cell.sums[hist.sum_col])


def _le(bound: float) -> str:
    return f"{bound:.6g}"


def _family(kind: type[GaugeMetricFamily] | type[CounterMetricFamily], name: str,
            help_text: str, labels: list[str],
            samples: list[tuple[tuple[str, ...], float]]) -> Metric:
    family = kind(name, help_text, labels=labels)
    for values, value in samples:
        family.add_metric(list(values), value)
    return family


def gauge(name: str, help_text: str, labels: list[str],
           samples: list[tuple[tuple[str, ...], float]]) -> Metric:
    return _family(GaugeMetricFamily, name, help_text, labels, samples)


def _counter(name: str, help_text: str, labels: list[str],
             samples: list[tuple[tuple[str, ...], float]]) -> Metric:
    return _family(CounterMetricFamily, name, help_text, labels, samples)


def health(snap: Snapshot, budget: int) -> list[Any]:
    h = snap.health
    return [
        _counter("ragmon_input_messages", "Decision messages by outcome.", ["outcome"],
                 [((k,), v) for k, v in sorted(snap.input.items())
                  if k != "content_fields_dropped"]),
        # Every reason from the start (zero until seen): rate() and alerts need the series.
        _counter("ragmon_rejected", "Rejected decision messages by reason.", ["reason"],
                 [((k,), v) for k, v in sorted({**dict.fromkeys(REASONS, 0),
                                                **snap.rejected}.items())]),
        _counter("ragmon_content_fields_dropped", "Content fields dropped at ingest.", [],
                 [((), snap.input.get("content_fields_dropped", 0))]),
        _counter("ragmon_label_events", "Label and feedback events by kind and outcome.",
                 ["kind", "outcome"],
                 [((kind, k), v) for kind, counts in sorted(snap.events.items())
                  for k, v in sorted(counts.items()) if k != "waiting"]),
        gauge("ragmon_label_events_waiting", "Label and feedback events waiting for their "
               "trace (they expire after pending_retention_seconds, counted as expired).",
               ["kind"], [((kind,), counts.get("waiting", 0))
                          for kind, counts in sorted(snap.events.items())]),
        _counter("ragmon_dlq_produced", "Dead letters produced.", [],
                 [((), h.get("dlq_produced", 0))]),
        gauge("ragmon_last_event_timestamp_seconds", "Event time of the newest trace.", [],
               [((), h.get("watermark", 0.0))]),
        gauge("ragmon_watermark_lag_seconds", "Wall clock minus the newest event time.", [],
               [((), h.get("watermark_lag", 0.0))]),
        gauge("ragmon_partitions_owned", "Partitions of the decisions topic this worker owns.",
               [], [((), h.get("partitions", 0))]),
        _counter("ragmon_batch_seconds", "Time spent folding batches.", [],
                 [((), h.get("batch_seconds", 0.0))]),
        _counter("ragmon_batches", "Batches folded.", [], [((), h.get("batches", 0))]),
        _counter("ragmon_redelivered_skipped", "Messages skipped because their partition's "
                 "checkpoint already holds their offset (redelivery after a crash or "
                 "rebalance; a surge without one means offsets went backwards).", [],
                 [((), h.get("replayed_skipped", 0))]),
        _counter("ragmon_checkpoints", "Partition checkpoints written.", [],
                 [((), h.get("checkpoints", 0))]),
        gauge("ragmon_state_record_bytes", "Largest checkpoint or de-duplication segment "
              "of the last batch written (the worker exits when one is over "
              "ragmon_state_max_bytes).", [], [((), h.get("state_record_bytes", 0))]),
        gauge("ragmon_state_max_bytes", "The configured ceiling of a state record "
              "(state_max_bytes).", [], [((), h.get("state_max_bytes", 0))]),
        _counter("ragmon_state_lost", "Partitions whose checkpoint was gone or behind the "
                 "offsets this worker had applied (the broker lost its log, e.g. an in-memory "
                 "broker restarted): their counts start again.", [],
                 [((), h.get("state_lost", 0))]),
        _counter("ragmon_detection_windows_skipped", "Closed windows of some partition that "
                 "drift detection never saw: more closed between two reads of the "
                 "checkpoints than a checkpoint carries (a fast backlog of old traffic).", [],
                 [((), h.get("windows_skipped", 0))]),
        gauge("ragmon_releases_owned", "Releases whose cells and drift state this worker "
              "exports (each release has one owner among the workers).", [],
              [((), h.get("releases_owned", 0))]),
        _counter("ragmon_worker_errors", "Batches that failed and were dead-lettered whole.",
                 [], [((), h.get("errors", 0))]),
        gauge("ragmon_series_budget", "The configured ceiling of exported series.", [],
               [((), budget)]),
        _counter("ragmon_slice_values_overflowed", "Label values mapped to other by caps.", [],
                 [((), h.get("overflowed", 0))]),
    ]


def drift(view: DriftView, room: int, layout: Layout) -> tuple[list[Metric], int]:
    """Drift families: release totals always, slice streams while `room` lasts; returns the
    families and the number of slice streams left out."""
    labels = list(STREAM_LABELS)
    statistic = GaugeMetricFamily(
        "ragmon_drift_statistic", "GLR statistic of a drift stream (nats).", labels=labels)
    limit = GaugeMetricFamily(
        "ragmon_drift_threshold", "Alarm threshold of the stream, from its false-alarm budget.",
        labels=labels)
    alarm = GaugeMetricFamily(
        "ragmon_drift_alarm", "1 while the stream is in alarm (latched until it has been "
        "quiet for alarm_hold_windows windows).", labels=labels)
    insufficient = GaugeMetricFamily(
        "ragmon_drift_insufficient_data", "1 when the stream cannot be judged (no usable "
        "reference, or recalibration required).", labels=labels)
    alarms = CounterMetricFamily(
        "ragmon_drift_alarms", "Alarms raised per stream (one per change); the exemplar is a "
        "trace of the window that raised the latest.", labels=labels)
    keys = sorted(view.verdicts, key=lambda k: (k.dimension != TOTAL, k))
    left_out = 0
    for key in keys:
        if key.dimension != TOTAL and room < 4:
            left_out += 1
            continue
        verdict = view.verdicts[key]
        values = [key.release, key.dimension or ALL, key.value or ALL, key.signal, key.direction]
        statistic.add_metric(values, verdict.statistic)
        limit.add_metric(values, verdict.threshold)
        alarm.add_metric(values, 1.0 if verdict.alarm_active else 0.0)
        insufficient.add_metric(values, 1.0 if verdict.status in (
            "insufficient_data", "recalibration_required") else 0.0)
        exemplar = view.exemplars.get(key)
        alarms.add_metric(values, view.alarm_counts.get(key, 0),
                          exemplar=Exemplar({"trace_id": exemplar}, 1.0) if exemplar else None)
        room -= 5
    distance = GaugeMetricFamily(
        "ragmon_drift_distance", "Latest window vs reference distribution of a signal "
        "(explanation, not the alarm): ks, psi, wasserstein.",
        labels=["release", "dimension", "value", "signal", "measure"])
    for (release, dim, value, signal), measures in sorted(view.distances.items()):
        if dim != TOTAL and room < len(measures):
            continue
        for measure, v in sorted(measures.items()):
            distance.add_metric([release, dim or ALL, value or ALL, signal, measure], v)
            room -= 1
    info = GaugeMetricFamily(
        "ragmon_reference_info", "The frozen reference of a release (value 1; its version "
        "components as labels).", labels=["release", *COMPONENT_NAMES])
    traces = GaugeMetricFamily("ragmon_reference_traces",
                               "Traces in a release's reference (it grows after the freeze "
                               "with alarm-free traffic, up to reference_max_traces).",
                               labels=["release"])
    for release, described in sorted(view.references.items()):
        for components in described["components"][:1]:  # the first; all are in `list`
            info.add_metric([release, *(str(components[n]) for n in COMPONENT_NAMES)], 1.0)
        traces.add_metric([release], described["traces"])
    recalibration = GaugeMetricFamily(
        "ragmon_recalibration_required", "1 when a release has no reference yet or a version "
        "component changed since it was frozen: drift is not judged until a new freeze.",
        labels=["release"])
    releases = {k.release for k in view.verdicts} | set(view.references) | set(
        view.recalibration)
    for release in sorted(releases):
        recalibration.add_metric([release], 1.0 if release in view.recalibration else 0.0)
    shares = GaugeMetricFamily(
        "ragmon_reference_signal_bucket_ratio", "Cumulative share of a release's reference "
        "traces with the signal <= bound (the reference's distribution, beside the live "
        "histogram's le buckets; not named le: only histograms may carry that label).",
        labels=["release", "signal", "bound"])
    for release, cell in sorted(view.reference_totals.items()):
        for name, hist in layout.histograms.items():
            if name in ("latency_ms", "cost"):
                continue
            bounds, _ = buckets(hist, cell, scale=1.0)
            total = bounds[-1][1]
            for le, count in bounds if total else []:
                shares.add_metric([release, name, le], count / total)
    return [statistic, limit, alarm, insufficient, alarms, distance, info, traces,
            recalibration, shares], left_out
