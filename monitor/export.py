"""Prometheus exposition: a custom collector rendering the latest immutable snapshot.

Nothing is counted per event through prometheus_client (`.labels().inc()` per event
alone capped throughput at ~6k traces/s here). The worker swaps in a new `Snapshot`
after folding; at scrape time `Collector.collect()` turns it into metric families.

Series are a budget: the monitor's own health and every release total are always
exported; slice cells follow, in a stable order, until `series_budget` is reached; what
did not fit is counted in `ragmon_series_dropped`. Label values come from capped sets
(releases, slice values, reasons, missing ids), so the budget is rarely the limit.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final, NamedTuple

import numpy as np
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector as _Collector
from prometheus_client.samples import Exemplar

from monitor.aggregate import TOTAL, Cell, CellKey, Table
from monitor.contract import DECISIONS
from monitor.derive import LABEL_RATES, ratio
from monitor.drift import DriftView
from monitor.ingest import REASONS
from monitor.layout import CLAIM_KINDS, LABEL_COUNTS, Histogram, Layout
from monitor.pipeline import Pipeline
from monitor.reference import COMPONENT_NAMES

__all__ = [
    "ALL", "METRICS", "Collector", "Snapshot", "families", "parse_exposition", "serve",
    "snapshot_of",
]

ALL: Final = "all"  # dimension and value labels of a release's total
CELL_LABELS: Final = ("release", "dimension", "value")
# Every metric family name ragmon exports (dashboards and alert rules use only these).
METRICS: Final = (
    "ragmon_traces_total", "ragmon_reasons_total", "ragmon_claims_total",
    "ragmon_gate_leaks_total", "ragmon_requirements_total", "ragmon_requirement_coverage_total",
    "ragmon_missing_requirements_total", "ragmon_checks_total", "ragmon_feedback_total",
    "ragmon_label_outcomes_total", "ragmon_signal", "ragmon_latency_seconds",
    "ragmon_request_cost", "ragmon_answer_coverage_ratio", "ragmon_abstention_ratio",
    "ragmon_critical_claim_unsupported_ratio", "ragmon_requirement_coverage_ratio",
    "ragmon_all_required_ratio", "ragmon_input_messages_total", "ragmon_rejected_total",
    "ragmon_content_fields_dropped_total", "ragmon_label_events_total",
    "ragmon_dlq_produced_total", "ragmon_last_event_timestamp_seconds",
    "ragmon_watermark_lag_seconds", "ragmon_partitions_owned", "ragmon_batch_seconds_total",
    "ragmon_batches_total", "ragmon_redelivered_skipped_total", "ragmon_checkpoints_total",
    "ragmon_worker_errors_total", "ragmon_series", "ragmon_series_budget", "ragmon_series_dropped",
    "ragmon_slice_values_overflowed_total",
    "ragmon_drift_statistic", "ragmon_drift_threshold", "ragmon_drift_alarm",
    "ragmon_drift_alarms_total", "ragmon_drift_distance", "ragmon_drift_insufficient_data",
    "ragmon_reference_info", "ragmon_reference_traces", "ragmon_recalibration_required",
    "ragmon_reference_signal_bucket_ratio", "ragmon_label_rate", "ragmon_label_rate_traces",
    "ragmon_label_events_waiting",
)
STREAM_LABELS: Final = ("release", "dimension", "value", "signal", "direction")
_SIGNAL_BUCKETS: Final = 10  # exported buckets per unit-range signal (le=0.1 .. 1.0)


class Snapshot(NamedTuple):
    """What one scrape renders; built by the worker between batches, never mutated."""

    layout: Layout
    cells: dict[CellKey, Cell]
    input: dict[str, int]
    rejected: dict[str, int]
    events: dict[str, dict[str, int]]
    health: dict[str, float]
    drift: DriftView | None = None
    # (cell, decision) -> (otel trace id, event time, top_score) of a recent trace
    exemplars: Mapping[tuple[CellKey, str], tuple[str, float, float | None]] = \
        MappingProxyType({})


def snapshot_of(pipelines: Sequence[Pipeline], health: dict[str, float],
                drift: DriftView | None = None) -> Snapshot:
    """Everything the pipelines folded (closed and open windows), as one immutable value."""
    if not pipelines:
        raise ValueError("a snapshot needs at least one pipeline")
    table = Table.empty(pipelines[0].layout)
    inputs: Counter[str] = Counter()
    rejected: Counter[str] = Counter()
    events: dict[str, Counter[str]] = {}
    watermark = 0.0
    for pipeline in pipelines:
        table = table.merge(pipeline.merged())
        inputs.update(pipeline.input)
        rejected.update(pipeline.rejected_by_reason)
        for kind, counts in pipeline.events.items():
            events.setdefault(kind, Counter()).update(counts)
            events[kind]["joined"] += pipeline.joiner.joined[kind]
            events[kind]["expired"] += pipeline.joiner.expired[kind]
            events[kind]["waiting"] += pipeline.joiner.waiting()[kind]
        watermark = max(watermark, pipeline.windows.watermark)
    # Caps may be shared by the pipelines (one per partition): count each cap once.
    slicers = {id(p.slicer): p.slicer for p in pipelines}.values()
    caps = {id(p.admit_missing): p.admit_missing for p in pipelines}.values()
    overflowed = sum(s.overflowed for s in slicers) + sum(c.overflowed for c in caps)
    health = {**health, "watermark": watermark, "overflowed": overflowed}
    return Snapshot(pipelines[0].layout, table.cells(), dict(inputs), dict(rejected),
                    {kind: dict(counts) for kind, counts in events.items()}, health, drift,
                    _cell_exemplars(pipelines))


def _cell_exemplars(pipelines: Sequence[Pipeline],
                    ) -> dict[tuple[CellKey, str], tuple[str, float, float | None]]:
    """The newest exemplar of every (cell, decision): a slicing feeds its release total
    and one cell per slice pair."""
    found: dict[tuple[CellKey, str], tuple[str, float, float | None]] = {}
    for pipeline in pipelines:
        for ((release, pairs), decision), exemplar in list(pipeline.exemplars.items()):
            for key in ((release, TOTAL, TOTAL), *((release, d, v) for d, v in pairs)):
                old = found.get((key, decision))
                if old is None or old[1] < exemplar[1]:
                    found[(key, decision)] = exemplar
    return found


class Collector(_Collector):
    """Renders whatever snapshot `current` holds at scrape time."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.current: Snapshot | None = None

    def collect(self) -> Iterator[Metric]:
        if self.current is not None:
            yield from families(self.current, self.budget)


def families(snap: Snapshot, budget: int) -> list[Metric]:
    """Metric families of a snapshot, slice cells only as far as the series budget allows."""
    fams = _Families(snap.layout, snap.exemplars)
    totals = [k for k in sorted(snap.cells) if k[1] == TOTAL]
    slices = [k for k in sorted(snap.cells) if k[1] != TOTAL]
    for key in totals:
        fams.add_cell(key, snap.cells[key])
    dropped = 0
    for key in slices:
        if fams.series + fams.cell_series(snap.cells[key]) > budget - 64:  # 64: health
            dropped += 1
            continue
        fams.add_cell(key, snap.cells[key])
    health = _health(snap, budget)
    drift: list[Metric] = []
    if snap.drift is not None:
        room = budget - fams.series - sum(len(m.samples) for m in health) - 2
        drift, left_out = _drift(snap.drift, room, snap.layout)
        dropped += left_out
        health.extend(drift)
    series = fams.series + sum(len(m.samples) for m in health) + 2
    health.append(_gauge("ragmon_series", "Series in this scrape.", [], [((), series)]))
    health.append(_gauge("ragmon_series_dropped", "Slice cells left out by the series budget.",
                         [], [((), dropped)]))
    return fams.metrics() + health


class _Families:
    """Accumulates the per-cell families while counting their series."""

    def __init__(self, layout: Layout,
                 exemplars: Mapping[tuple[CellKey, str], tuple[str, float, float | None]]
                 ) -> None:
        self.layout = layout
        self.exemplars = exemplars
        self.series = 0
        c = CELL_LABELS
        self.traces = CounterMetricFamily(
            "ragmon_traces", "Decision traces folded, by decision.", labels=[*c, "decision"])
        self.reasons = CounterMetricFamily(
            "ragmon_reasons", "Traces by reason code (configured codes, else other).",
            labels=[*c, "reason"])
        self.claims = CounterMetricFamily(
            "ragmon_claims", "Atomic claims by importance and verdict.",
            labels=[*c, "importance", "verdict"])
        self.leaks = CounterMetricFamily(
            "ragmon_gate_leaks", "Answers holding a rendered critical claim that is not "
            "supported (the gate promises zero).", labels=list(c))
        self.requirements = CounterMetricFamily(
            "ragmon_requirements", "Traces with requirements: all, complete (all covered), "
            "critical_missed.", labels=[*c, "outcome"])
        self.coverage_sum = CounterMetricFamily(
            "ragmon_requirement_coverage", "Sum of per-trace requirement coverage; divided "
            "by ragmon_requirements_total{outcome=\"all\"} it is the mean.", labels=list(c))
        self.missing = CounterMetricFamily(
            "ragmon_missing_requirements", "Required parts missing from answers, by id.",
            labels=[*c, "requirement"])
        self.checks = CounterMetricFamily(
            "ragmon_checks", "Check outcomes: citation, verbatim_failure, self_check_<v>.",
            labels=[*c, "check"])
        self.feedback = CounterMetricFamily(
            "ragmon_feedback", "User feedback joined to traces.", labels=[*c, "score"])
        self.label_outcomes = CounterMetricFamily(
            "ragmon_label_outcomes", "Label outcomes joined to traces (see README).",
            labels=[*c, "outcome"])
        self.signal = HistogramMetricFamily(
            "ragmon_signal", "Distribution of gate signals.", labels=[*c, "signal"])
        self.latency = HistogramMetricFamily(
            "ragmon_latency_seconds", "Request latency reported in traces.", labels=list(c))
        self.cost = HistogramMetricFamily(
            "ragmon_request_cost", "Request cost reported in traces.", labels=list(c))
        self.gauges = {
            name: GaugeMetricFamily(f"ragmon_{name}_ratio", help_text, labels=list(c))
            for name, help_text in (
                ("answer_coverage", "(answer + partial) / traces, since start."),
                ("abstention", "abstain / traces, since start."),
                ("critical_claim_unsupported", "Traces with reason critical_claim_unsupported "
                 "/ traces, since start."),
                ("requirement_coverage", "Mean requirement coverage, since start."),
                ("all_required", "Share of traces covering every requirement, since start."),
            )
        }
        self.label_rate = GaugeMetricFamily(
            "ragmon_label_rate", "Label-based rates of CONTRACT.md over labelled traces, since "
            "start (rate: unsupported_answer_rate, false_abstention_rate, selective_accuracy, "
            "unsupported_answering_on_unanswerable, correct_on_answerable).",
            labels=[*c, "rate"])
        self.label_rate_traces = GaugeMetricFamily(
            "ragmon_label_rate_traces", "Labelled traces in the denominator of each "
            "ragmon_label_rate.", labels=[*c, "rate"])

    def cell_series(self, cell: Cell) -> int:
        """An upper bound of the series one cell adds (for the budget check)."""
        layout = self.layout
        hist = sum(_SIGNAL_BUCKETS + 3 for _ in layout.histograms)
        missing = sum(1 for kind, _ in cell.extras if kind == "missing")
        return (len(DECISIONS) + len(layout.reasons) + len(CLAIM_KINDS) + 1 + 4 + missing
                + 5 + 2 + len(LABEL_COUNTS) + hist + len(self.gauges)
                + 2 * len(LABEL_RATES))

    def add_cell(self, key: CellKey, cell: Cell) -> None:
        release, dim, value = key
        labels = [release, dim or ALL, value or ALL]
        col = self.layout.counts
        n = cell.counts
        before = self._count()
        for d in DECISIONS:
            found = self.exemplars.get((key, d))
            self.traces.add_metric([*labels, d], int(n[col[f"decision_{d}"]]),
                                   exemplar=None if found is None else
                                   Exemplar({"trace_id": found[0]}, 1.0, found[1]))
        for code in self.layout.reasons:
            self.reasons.add_metric([*labels, code], int(n[col[f"reason_{code}"]]))
        for kind in CLAIM_KINDS:
            importance, verdict = kind.split("_", 1)
            self.claims.add_metric([*labels, importance, verdict], int(n[col[f"claims_{kind}"]]))
        self.leaks.add_metric(labels, int(n[col["gate_leaks"]]))
        for outcome, name in (("all", "requirements_traces"), ("complete", "requirements_all"),
                              ("critical_missed", "requirements_critical_missed")):
            self.requirements.add_metric([*labels, outcome], int(n[col[name]]))
        coverage = float(cell.sums[self.layout.sums["coverage_sum"]])
        self.coverage_sum.add_metric(labels, coverage)
        for (kind, name), count in sorted(cell.extras.items()):
            if kind == "missing":
                self.missing.add_metric([*labels, name], count)
        for check, name in (("citation", "citation_true"),
                            ("verbatim_failure", "citation_verbatim_false"),
                            ("self_check_pass", "self_check_pass"),
                            ("self_check_reject", "self_check_reject"),
                            ("self_check_skipped", "self_check_skipped")):
            self.checks.add_metric([*labels, check], int(n[col[name]]))
        self.feedback.add_metric([*labels, "up"], int(n[col["feedback_up"]]))
        self.feedback.add_metric([*labels, "down"], int(n[col["feedback_down"]]))
        for outcome in LABEL_COUNTS:
            self.label_outcomes.add_metric([*labels, outcome], int(n[col[f"label_{outcome}"]]))
        for name, hist in self.layout.histograms.items():
            buckets, total = _buckets(hist, cell, scale=1e-3 if name == "latency_ms" else 1.0)
            if name == "latency_ms":
                self.latency.add_metric(labels, buckets, total / 1e3)
            elif name == "cost":
                self.cost.add_metric(labels, buckets, total)
            else:
                if name == "top_score":
                    buckets = self._with_exemplar(key, buckets)
                self.signal.add_metric([*labels, name], buckets, total)
        self._ratios(labels, cell)
        self.series += self._count() - before

    def _with_exemplar(self, key: CellKey, buckets: list[Any]) -> list[Any]:
        """top_score buckets with the newest traced request's id on the bucket it fell in."""
        found = [e for d in DECISIONS if (e := self.exemplars.get((key, d))) and e[2] is not None]
        if not found:
            return buckets
        trace_id, ts, top = max(found, key=lambda e: e[1])
        value = float(top if top is not None else 0.0)
        out: list[Any] = []
        placed = False
        for le, count in buckets:
            if not placed and count > 0 and (le == "+Inf" or value <= float(le)):
                out.append((le, count, Exemplar({"trace_id": trace_id}, value, ts)))
                placed = True
            else:
                out.append((le, count))
        return out

    def _ratios(self, labels: list[str], cell: Cell) -> None:
        col, n = self.layout.counts, cell.counts
        traces = int(n[col["traces"]])
        answered = int(n[col["decision_answer"]] + n[col["decision_partial"]])
        req = int(n[col["requirements_traces"]])
        values = {
            "answer_coverage": ratio(answered, traces),
            "abstention": ratio(int(n[col["decision_abstain"]]), traces),
            "critical_claim_unsupported": ratio(
                int(n[col["reason_critical_claim_unsupported"]])
                if "reason_critical_claim_unsupported" in col else 0, traces),
            "requirement_coverage": ratio(
                float(cell.sums[self.layout.sums["coverage_sum"]]), req),
            "all_required": ratio(int(n[col["requirements_all"]]), req),
        }
        for name, value in values.items():
            if value is not None:  # no data is no sample, not a zero
                self.gauges[name].add_metric(labels, value)
        for name, (num, den) in LABEL_RATES.items():
            denominator = int(n[col[f"label_{den}"]])
            if denominator:
                self.label_rate.add_metric(
                    [*labels, name], int(n[col[f"label_{num}"]]) / denominator)
                self.label_rate_traces.add_metric([*labels, name], denominator)

    def _count(self) -> int:
        return sum(len(m.samples) for m in self.metrics())

    def metrics(self) -> list[Metric]:
        return [self.traces, self.reasons, self.claims, self.leaks, self.requirements,
                self.coverage_sum, self.missing, self.checks, self.feedback,
                self.label_outcomes, self.signal, self.latency, self.cost,
                *self.gauges.values(), self.label_rate, self.label_rate_traces]


def _buckets(hist: Histogram, cell: Cell, scale: float) -> tuple[list[tuple[str, float]], float]:
    """Cumulative Prometheus buckets from the fine bins (coarsened), and the sum."""
    bins = cell.counts[hist.offset : hist.offset + hist.width]
    cumulative = np.cumsum(bins)
    edges = hist.edges
    # Fine bin i (1..len(edges)-1) ends at edges[i]; keep ~10 evenly spaced bounds.
    step = max(1, (len(edges) - 1) // _SIGNAL_BUCKETS)
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


def _gauge(name: str, help_text: str, labels: list[str],
           samples: list[tuple[tuple[str, ...], float]]) -> Metric:
    return _family(GaugeMetricFamily, name, help_text, labels, samples)


def _counter(name: str, help_text: str, labels: list[str],
             samples: list[tuple[tuple[str, ...], float]]) -> Metric:
    return _family(CounterMetricFamily, name, help_text, labels, samples)


def _health(snap: Snapshot, budget: int) -> list[Any]:
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
        _gauge("ragmon_label_events_waiting", "Label and feedback events waiting for their "
               "trace (they expire after pending_retention_seconds, counted as expired).",
               ["kind"], [((kind,), counts.get("waiting", 0))
                          for kind, counts in sorted(snap.events.items())]),
        _counter("ragmon_dlq_produced", "Dead letters produced.", [],
                 [((), h.get("dlq_produced", 0))]),
        _gauge("ragmon_last_event_timestamp_seconds", "Event time of the newest trace.", [],
               [((), h.get("watermark", 0.0))]),
        _gauge("ragmon_watermark_lag_seconds", "Wall clock minus the newest event time.", [],
               [((), h.get("watermark_lag", 0.0))]),
        _gauge("ragmon_partitions_owned", "Partitions of the decisions topic this worker owns.",
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
        _counter("ragmon_worker_errors", "Batches that failed and were dead-lettered whole.",
                 [], [((), h.get("errors", 0))]),
        _gauge("ragmon_series_budget", "The configured ceiling of exported series.", [],
               [((), budget)]),
        _counter("ragmon_slice_values_overflowed", "Label values mapped to other by caps.", [],
                 [((), h.get("overflowed", 0))]),
    ]


def _drift(view: DriftView, room: int, layout: Layout) -> tuple[list[Metric], int]:
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
    traces = GaugeMetricFamily("ragmon_reference_traces", "Traces in a release's reference.",
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
        "traces with the signal <= le (the reference's distribution, beside the live one).",
        labels=["release", "signal", "le"])
    for release, cell in sorted(view.reference_totals.items()):
        for name, hist in layout.histograms.items():
            if name in ("latency_ms", "cost"):
                continue
            buckets, _ = _buckets(hist, cell, scale=1.0)
            total = buckets[-1][1]
            for le, count in buckets if total else []:
                shares.add_metric([release, name, le], count / total)
    return [statistic, limit, alarm, insufficient, alarms, distance, info, traces,
            recalibration, shares], left_out


def serve(collector: Collector, host: str, port: int) -> CollectorRegistry:
    """Serve `collector` (alone: no process metrics) with prometheus_client's own HTTP
    server, which negotiates OpenMetrics (exemplars) as well as the text format."""
    registry = CollectorRegistry()
    registry.register(collector)
    start_http_server(port, addr=host, registry=registry)
    return registry


def parse_exposition(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Samples of a scraped /metrics page by (name, sorted labels): for the demo's view."""
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}
