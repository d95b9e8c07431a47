"""Prometheus exposition: a custom collector rendering the latest immutable snapshot.

Nothing is counted per event through prometheus_client (`.labels().inc()` per event
alone capped throughput at ~6k traces/s here). The worker swaps in a new `Snapshot`
after folding; at scrape time `Collector.collect()` turns it into metric families.

The layout is lean by default (`metrics_detail`, docs/operating.md): a release total
exports every family; a slice exports the counters the dashboards and alert rules read
per slice (decisions, reasons, gate leaks, requirements, checks, label outcomes, its top
missing requirements), only those with a count, and no histograms, claims, feedback or
since-start ratios; its drift streams only while they are worth a look (health.py).
`metrics_detail="full"` exports every family for every cell.

Series are a budget: the monitor's own health and every release total are always
exported; slice cells follow, busiest first, until `series_budget` is reached; what did
not fit is counted in `ragmon_series_dropped`. Label values come from capped sets
(releases, slice values, reasons, missing ids), so the budget is rarely the limit.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator, Mapping
from typing import Any, Final

from prometheus_client.core import Metric
from prometheus_client.registry import Collector as _Collector
from prometheus_client.samples import Exemplar

from monitor.aggregate.derive import ratio
from monitor.aggregate.layout import CLAIM_KINDS, Layout
from monitor.aggregate.table import TOTAL, Cell, CellKey
from monitor.export import catalog as c
from monitor.export import health as status
from monitor.export.catalog import METRICS
from monitor.export.snapshot import ALL, Snapshot, snapshot_of
from monitor.ingest.contract import DECISIONS
from monitor.ingest.meaning import LABEL_OUTCOMES, LABEL_RATES

__all__ = [
    "ALL",
    "METRICS",
    "Collector",
    "PortInUse",
    "Snapshot",
    "cannot_listen",
    "check_port",
    "families",
    "parse_exposition",
    "snapshot_of",
]

# Missing requirements a slice exports in the lean layout: its most frequent.
SLICE_MISSING_TOP: Final = 3
# Check outcomes and label outcomes a slice exports in the lean layout: those the
# dashboards' per-slice rates read (self-check reject and verbatim failure rates; the
# unsupported answer and false abstention rates).
SLICE_CHECKS: Final = ("citation", "verbatim_failure", "self_check_pass", "self_check_reject")
SLICE_LABEL_OUTCOMES: Final = ("labelled", "answered_uc_known", "answered_uc_true",
                               "abstained_answerable_known", "abstained_answerable_true")


class Collector(_Collector):
    """Renders whatever snapshot `current` holds at scrape time.

    A snapshot's families are built once (~0.1 s of CPU for 6k series) and reused by
    every scrape until the next snapshot: HA Prometheus pairs and `?name[]=` scrapes of
    one family do not rebuild them."""

    def __init__(self, budget: int, detail: str = "lean") -> None:
        self.budget = budget
        self.full = detail == "full"
        self.current: Snapshot | None = None
        self._rendered: tuple[Snapshot, list[Metric]] | None = None

    def collect(self) -> Iterator[Metric]:
        snap, rendered = self.current, self._rendered
        if snap is None:
            return
        if rendered is None or rendered[0] is not snap:
            rendered = self._rendered = (snap, families(snap, self.budget, self.full))
        yield from rendered[1]


def families(snap: Snapshot, budget: int, full: bool = False) -> list[Metric]:
    """Metric families of a snapshot, slice cells only as far as the series budget allows;
    every family for every cell with `full` (`metrics_detail="full"`), else lean."""
    fams = _Families(snap.layout, snap.exemplars, full)
    totals, slices = _export_order(snap)
    for key in totals:
        fams.add_cell(key, snap.cells[key])
    dropped = 0
    for key in slices:
        if fams.series + fams.cell_series(key, snap.cells[key]) > budget - 64:  # health
            dropped += 1
            continue
        fams.add_cell(key, snap.cells[key])
    health = status.health(snap, budget)
    drift: list[Metric] = []
    if snap.drift is not None:
        room = budget - fams.series - sum(len(m.samples) for m in health) - 2
        drift, left_out = status.drift(snap.drift, room, snap.layout, full)
        dropped += left_out
        health.extend(drift)
    series = fams.series + sum(len(m.samples) for m in health) + 2
    health.append(c.SERIES.of([((), series)]))
    health.append(c.SERIES_DROPPED.of([((), dropped)]))
    return fams.metrics() + health


def _export_order(snap: Snapshot) -> tuple[list[CellKey], list[CellKey]]:
    """Release totals and slices, each busiest first: when the budget is short, the
    slices cut are the quietest, whatever their names (a flood of junk values or
    releases, a trace or two each, cannot push a real release's slices out)."""
    col = snap.layout.counts["traces"]
    by_volume = sorted(snap.cells, key=lambda k: (-int(snap.cells[k].counts[col]), k))
    return ([k for k in by_volume if k[1] == TOTAL], [k for k in by_volume if k[1] != TOTAL])


class _Families:
    """Accumulates the per-cell families while counting their series."""

    def __init__(self, layout: Layout,
                 exemplars: Mapping[tuple[CellKey, str], tuple[str, float, float | None]],
                 full: bool = False) -> None:
        self.layout = layout
        self.exemplars = exemplars
        self.full = full
        self.series = 0
        self.traces, self.reasons = c.TRACES.new(), c.REASONS.new()
        self.claims, self.leaks = c.CLAIMS.new(), c.GATE_LEAKS.new()
        self.requirements = c.REQUIREMENTS.new()
        self.coverage_sum = c.REQUIREMENT_COVERAGE.new()
        self.missing, self.checks = c.MISSING_REQUIREMENTS.new(), c.CHECKS.new()
        self.feedback, self.label_outcomes = c.FEEDBACK.new(), c.LABEL_OUTCOMES.new()
        self.signal, self.latency, self.cost = c.SIGNAL.new(), c.LATENCY.new(), c.COST.new()
        self.gauges = {name: family.new() for name, family in c.RATIOS.items()}
        self.label_rate, self.label_rate_traces = c.LABEL_RATE.new(), c.LABEL_RATE_TRACES.new()

    def cell_series(self, key: CellKey, cell: Cell) -> int:
        """An upper bound of the series one cell adds (for the budget check)."""
        layout = self.layout
        missing = sum(1 for kind, _ in cell.extras if kind == "missing")
        counters = len(DECISIONS) + len(layout.reasons) + 1 + 3 + 1
        if not (self.full or key[1] == TOTAL):
            return (counters + len(SLICE_CHECKS) + len(SLICE_LABEL_OUTCOMES)
                    + min(missing, SLICE_MISSING_TOP))
        hist = sum(status.SIGNAL_BUCKETS + 3 for _ in layout.histograms)
        return (counters + 5 + len(LABEL_OUTCOMES) + missing + len(CLAIM_KINDS) + 2 + hist
                + len(self.gauges) + 2 * len(LABEL_RATES))

    def add_cell(self, key: CellKey, cell: Cell) -> None:
        release, dim, value = key
        labels = [release, dim or ALL, value or ALL]
        before = self._count()
        full = self.full or dim == TOTAL
        self._counters(key, labels, cell, full)
        if full:
            self._detail(key, labels, cell)
        self.series += self._count() - before

    def _counters(self, key: CellKey, labels: list[str], cell: Cell, full: bool) -> None:
        """The counters every cell exports (in the lean layout a slice's only those with
        a count, its SLICE_MISSING_TOP most missing requirements, SLICE_CHECKS and
        SLICE_LABEL_OUTCOMES)."""
        col = self.layout.counts
        n = cell.counts

        def add(family: Any, more: list[str], count: float) -> None:
            if full or count:
                family.add_metric([*labels, *more], count)

        for d in DECISIONS:
            found = self.exemplars.get((key, d))
            count = int(n[col[f"decision_{d}"]])
            if full or count:
                self.traces.add_metric([*labels, d], count,
                                       exemplar=None if found is None else
                                       Exemplar({"trace_id": found[0]}, 1.0, found[1]))
        for code in self.layout.reasons:
            add(self.reasons, [code], int(n[col[f"reason_{code}"]]))
        add(self.leaks, [], int(n[col["gate_leaks"]]))
        for outcome, name in (("all", "requirements_traces"), ("complete", "requirements_all"),
                              ("critical_missed", "requirements_critical_missed")):
            add(self.requirements, [outcome], int(n[col[name]]))
        add(self.coverage_sum, [], float(cell.sums[self.layout.sums["coverage_sum"]]))
        missing = sorted(((count, name) for (kind, name), count in cell.extras.items()
                          if kind == "missing"), key=lambda item: (-item[0], item[1]))
        for count, name in sorted(missing if full else missing[:SLICE_MISSING_TOP],
                                  key=lambda item: item[1]):
            self.missing.add_metric([*labels, name], count)
        for check, name in (("citation", "citation_true"),
                            ("verbatim_failure", "citation_verbatim_false"),
                            ("self_check_pass", "self_check_pass"),
                            ("self_check_reject", "self_check_reject"),
                            ("self_check_skipped", "self_check_skipped")):
            if full or check in SLICE_CHECKS:
                add(self.checks, [check], int(n[col[name]]))
        for outcome in LABEL_OUTCOMES if full else SLICE_LABEL_OUTCOMES:
            add(self.label_outcomes, [outcome], int(n[col[f"label_{outcome}"]]))

    def _detail(self, key: CellKey, labels: list[str], cell: Cell) -> None:
        """What only release totals export in the lean layout: claims, feedback, the
        signal, latency and cost histograms, since-start ratios and label rates."""
        col = self.layout.counts
        n = cell.counts
        for kind in CLAIM_KINDS:
            importance, verdict = kind.split("_", 1)
            self.claims.add_metric([*labels, importance, verdict], int(n[col[f"claims_{kind}"]]))
        self.feedback.add_metric([*labels, "up"], int(n[col["feedback_up"]]))
        self.feedback.add_metric([*labels, "down"], int(n[col["feedback_down"]]))
        for name, hist in self.layout.histograms.items():
            buckets, total = status.buckets(hist, cell, scale=1e-3 if name == "latency_ms" else 1.0)
            if name == "latency_ms":
                self.latency.add_metric(labels, buckets, total / 1e3)
            elif name == "cost":
                self.cost.add_metric(labels, buckets, total)
            else:
                if name == "top_score":
                    buckets = self._with_exemplar(key, buckets)
                self.signal.add_metric([*labels, name], buckets, total)
        self._ratios(labels, cell)

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


class PortInUse(Exception):
    """The metrics endpoint cannot listen; the message names the address."""


def check_port(host: str, port: int) -> None:
    """Raise PortInUse if the metrics endpoint cannot listen at host:port."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise PortInUse(cannot_listen(host, port, exc)) from None


def cannot_listen(host: str, port: int, exc: OSError) -> str:
    return f"cannot serve metrics on {host}:{port} (metrics_port): {exc.strerror}"


def parse_exposition(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Samples of a scraped /metrics page by (name, sorted labels): for the demo's view."""
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}
