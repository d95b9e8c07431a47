"""The monitor's own health and its drift verdicts as metric families (with `export`,
prometheus_client's home): families built from a snapshot at scrape time."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from typing import Final

import numpy as np
from prometheus_client.core import Metric
from prometheus_client.samples import Exemplar

from monitor.aggregate.layout import Histogram, Layout
from monitor.aggregate.table import TOTAL, Cell
from monitor.detect.drift import DriftView
from monitor.export import catalog as c
from monitor.export.snapshot import ALL, Snapshot
from monitor.ingest.contract import COMPONENT_NAMES
from monitor.ingest.parse import REJECTION_REASONS
from monitor.ingest.spanbuffer import SPAN_OUTCOMES, TRACE_OUTCOMES

__all__ = ["DRIFT_FLOOR", "SIGNAL_BUCKETS", "buckets", "drift", "health"]

SIGNAL_BUCKETS: Final = 10  # exported buckets per unit-range signal (le=0.1 .. 1.0)
# A slice's drift stream exports its score (lean layout) while its statistic is at least
# this share of its threshold: the ones a ranking of slices by drift would show.
DRIFT_FLOOR: Final = 0.5


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


def health(snap: Snapshot, budget: int) -> list[Metric]:
    h = snap.health
    return [
        c.INPUT_MESSAGES.of(((k,), v) for k, v in sorted(snap.input.items())
                            if k != "content_fields_dropped"),
        # Every reason from the start (zero until seen): rate() and alerts need the series.
        c.REJECTED.of(((k,), v) for k, v in sorted({**dict.fromkeys(REJECTION_REASONS, 0),
                                                    **snap.rejected}.items())),
        c.CONTENT_FIELDS_DROPPED.of([((), snap.input.get("content_fields_dropped", 0)
                                     + (snap.otlp or {}).get("content_fields_dropped", 0))]),
        c.LABEL_EVENTS.of(((kind, k), v) for kind, counts in sorted(snap.events.items())
                          for k, v in sorted(counts.items()) if k != "waiting"),
        c.LABEL_EVENTS_WAITING.of(((kind,), counts.get("waiting", 0))
                                  for kind, counts in sorted(snap.events.items())),
        c.DLQ_PRODUCED.of([((), h.dlq_produced)]),
        c.LAST_EVENT.of([((), h.last_event_timestamp_seconds)]),
        c.WATERMARK_LAG.of([((), h.watermark_lag_seconds)]),
        c.PARTITIONS_OWNED.of([((), h.partitions_owned)]),
        c.BATCH_SECONDS.of([((), h.batch_seconds)]),
        c.BATCHES.of([((), h.batches)]),
        c.BATCHES_DROPPED.of([((), h.batches_dropped)]),
        c.REDELIVERED_SKIPPED.of([((), h.redelivered_skipped)]),
        c.CHECKPOINTS.of([((), h.checkpoints)]),
        c.STATE_RECORD_BYTES.of([((), h.state_record_bytes)]),
        c.STATE_MAX_BYTES.of([((), h.state_max_bytes)]),
        c.STATE_LOST.of([((), h.state_lost)]),
        c.WINDOWS_SKIPPED.of([((), h.detection_windows_skipped)]),
        c.RELEASES_OWNED.of([((), h.releases_owned)]),
        c.WORKER_ERRORS.of([((), h.worker_errors)]),
        c.SERIES_BUDGET.of([((), budget)]),
        c.SLICE_VALUES_OVERFLOWED.of([((), h.slice_values_overflowed)]),
        c.SLICE_VALUES_REPLACED.of([((), h.slice_values_replaced)]),
        *(_otlp(snap.otlp) if snap.otlp else []),
    ]


def _otlp(counts: Mapping[str, int]) -> list[Metric]:
    """The otlp intake's families, every outcome from the start (zero until seen)."""
    def of(prefix: str, outcomes: tuple[str, ...]) -> list[tuple[tuple[str], int]]:
        return [((name,), counts.get(f"{prefix}_{name}", 0)) for name in outcomes]
    return [c.OTLP_MESSAGES.of(of("messages", ("read", "rejected"))),
            c.OTLP_SPANS.of(of("spans", SPAN_OUTCOMES)),
            c.OTLP_TRACES.of(of("traces", TRACE_OUTCOMES)),
            c.OTLP_PENDING.of([((), counts.get("pending", 0))])]


def drift(view: DriftView, room: int, layout: Layout,
          full: bool = False) -> tuple[list[Metric], int]:
    """Drift families: release totals always, slice streams while `room` lasts; returns the
    families and the number of slice streams left out.

    Release totals export every drift family. In the lean layout (not `full`) a slice's
    stream exports its alarm only while it is in alarm, its alarm counter once it has
    raised one, and its score (statistic / threshold) only while that is at least
    DRIFT_FLOOR; how many streams of a release are armed, in alarm or cannot be judged
    is `ragmon_drift_streams`."""
    statistic, limit = c.DRIFT_STATISTIC.new(), c.DRIFT_THRESHOLD.new()
    score = c.DRIFT_SCORE.new()
    alarm, insufficient = c.DRIFT_ALARM.new(), c.DRIFT_INSUFFICIENT.new()
    alarms = c.DRIFT_ALARMS.new()
    reference_value, window_value = c.DRIFT_REFERENCE_VALUE.new(), c.DRIFT_WINDOW_VALUE.new()
    keys = sorted(view.verdicts, key=lambda k: (k.dimension != TOTAL, k))
    left_out = 0
    states: Counter[tuple[str, str]] = Counter()
    for key in keys:
        verdict = view.verdicts[key]
        states[(key.release, verdict.status)] += 1
        whole = full or key.dimension == TOTAL
        if key.dimension != TOTAL and room < 5:
            left_out += 1
            continue
        values = [key.release, key.dimension or ALL, key.value or ALL, key.signal, key.direction]
        raised = view.alarm_counts.get(key, 0)
        if whole:
            statistic.add_metric(values, verdict.statistic)
            limit.add_metric(values, verdict.threshold)
            room -= 2
            for family, shown in ((reference_value, verdict.reference_value),
                                  (window_value, verdict.window_value)):
                if shown is not None and math.isfinite(shown):
                    family.add_metric(values, shown)
                    room -= 1
        if math.isfinite(verdict.threshold) and verdict.threshold > 0 and (
                whole or verdict.statistic >= DRIFT_FLOOR * verdict.threshold):
            score.add_metric(values, verdict.statistic / verdict.threshold)
            room -= 1
        if whole or verdict.alarm_active:
            alarm.add_metric(values, 1.0 if verdict.alarm_active else 0.0)
            room -= 1
        if whole:
            insufficient.add_metric(values, 1.0 if verdict.status in (
                "insufficient_data", "recalibration_required") else 0.0)
            room -= 1
        if whole or raised:
            exemplar = view.exemplars.get(key)
            alarms.add_metric(values, raised, exemplar=Exemplar({"trace_id": exemplar}, 1.0)
                              if exemplar else None)
            room -= 1
    streams = c.DRIFT_STREAMS.of(((release, status), n)
                                 for (release, status), n in sorted(states.items()))
    distance = c.DRIFT_DISTANCE.new()
    for (release, dim, value, signal), measures in sorted(view.distances.items()):
        if dim != TOTAL and (not full or room < len(measures)):
            continue
        for measure, v in sorted(measures.items()):
            distance.add_metric([release, dim or ALL, value or ALL, signal, measure], v)
            room -= 1
    info = c.reference_info(COMPONENT_NAMES).new()
    traces = c.REFERENCE_TRACES.new()
    for release, described in sorted(view.references.items()):
        for components in described["components"][:1]:  # the first; all are in `list`
            info.add_metric([release, *(str(components[n]) for n in COMPONENT_NAMES)], 1.0)
        traces.add_metric([release], described["traces"])
    recalibration = c.RECALIBRATION_REQUIRED.new()
    releases = {k.release for k in view.verdicts} | set(view.references) | set(
        view.recalibration)
    for release in sorted(releases):
        recalibration.add_metric([release], 1.0 if release in view.recalibration else 0.0)
    shares = c.REFERENCE_BUCKETS.new()
    for release, cell in sorted(view.reference_totals.items()):
        for name, hist in layout.histograms.items():
            if name in ("latency_ms", "cost"):
                continue
            bounds, _ = buckets(hist, cell, scale=1.0)
            total = bounds[-1][1]
            for le, count in bounds if total else []:
                shares.add_metric([release, name, le], count / total)
    return [statistic, limit, score, alarm, insufficient, alarms, reference_value, window_value,
            streams, distance, info,
            traces, recalibration, shares], left_out
