"""Drift detection on closed windows: streams per (release, slice, signal, direction).

For every release, `Drift.observe` takes each closed window's merged table and:

1. without a reference: folds the window into an accumulator and freezes the reference
   after `reference_traces` traces (the release is "recalibration required" meanwhile);
2. with a reference that has not seen the version components now in traffic: marks
   the release "recalibration required" and keeps its detectors silent (drift against
   a stale reference is not news, the stale reference is);
3. otherwise updates one GLR detector (`detectors`) per stream of every cell the
   reference holds enough traffic for, with a threshold from the family's false-alarm
   budget (`thresholds`), and returns the alarms; then offers the window to the
   reference's growth (`growth`: alarm-free traffic joins it a block later, up to
   `reference_max_traces`), which sharpens the null estimates the detectors use.

Streams of a cell (signal, direction): each continuous signal's location (up, down)
and spread (`<signal>_spread` up, down); `critical_claim_unsupported_rate` up;
`answer_coverage` down and up; `reason_mix` change; `self_check_reject_rate` and
`verbatim_failure_rate` up; `gate_leak`, where any occurrence alarms (with or without
a reference: an incident needs none). After an alarm
the detector restarts; the stream stays in alarm (`alarm_active`) until it has gone
`alarm_hold_windows` windows without alarming again, so a change that persists is one
alarm, not one per window.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Literal

import numpy as np

from monitor.aggregate.layout import Layout
from monitor.aggregate.table import TOTAL, Cell, CellKey, Table
from monitor.detect import arming
from monitor.detect import detectors as det
from monitor.detect.growth import Growth
from monitor.detect.reference import Accumulator, Reference
from monitor.detect.report import Alarm, DriftView, StreamKey, Verdict
from monitor.detect.shares import LOG_ODDS, at_budget, small_reference
from monitor.detect.streams import EXCLUDED_SIGNALS, distances, stream_specs, with_shape
from monitor.detect.thresholds import arl0_windows, threshold
from monitor.ingest.contract import Components
from monitor.settings import Settings

__all__ = ["Alarm", "Drift", "DriftConfig", "DriftView", "StreamKey", "Verdict"]


@dataclass(frozen=True)
class DriftConfig:
    window_seconds: float = 60.0
    reference_traces: int = 2_000
    reference_max_traces: int = 20_000  # growth after the freeze stops here (detect/growth.py)
    min_reference_traces: int = 200   # per stream denominator, else insufficient data
    share_odds_ratio: float = math.exp(LOG_ODDS)  # the change a young share is tuned to
    false_alarm_days: float = 30.0
    false_alarm_days_by_family: dict[str, float] = field(default_factory=dict)
    arl0_traces: float | None = None  # per-stream budget in traces (backtests, benchmarks)
    alarm_hold_windows: int = 30

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: Any) -> DriftConfig:
        values: dict[str, Any] = {
            "window_seconds": float(settings.window_seconds),
            "reference_traces": settings.reference_traces,
            "reference_max_traces": settings.reference_max_traces,
            "min_reference_traces": settings.min_reference_traces,
            "share_odds_ratio": settings.share_odds_ratio,
            "false_alarm_days": settings.false_alarm_days,
            "false_alarm_days_by_family": dict(settings.false_alarm_days_by_family),
            "alarm_hold_windows": settings.alarm_hold_windows,
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


class Drift:
    """References, detectors and verdicts of every release; fed closed windows."""

    def __init__(self, layout: Layout, config: DriftConfig, arm_inline: bool = True) -> None:
        self.layout = layout
        self.config = config
        self.arm_inline = arm_inline
        self.armed = True
        self.specs = stream_specs(layout, math.log(config.share_odds_ratio))
        self.spec_of = {(spec.signal, spec.direction): spec for spec in self.specs}
        self.references: dict[str, Reference] = {}
        self.pending: dict[str, Accumulator] = {}
        self.detectors: dict[StreamKey, det.Detector] = {}
        self.window_n: dict[StreamKey, float] = {}
        self.verdicts: dict[StreamKey, Verdict] = {}
        self.last_alarm: dict[StreamKey, int] = {}
        self.stale: dict[str, list[str]] = {}   # release -> component changes
        self.distances: dict[tuple[str, str, str, str], dict[str, float]] = {}
        self.alarm_counts: dict[StreamKey, int] = {}
        self.exemplars: dict[StreamKey, str] = {}  # trace_id of the latest alarm's window
        self.windows_seen: dict[str, int] = {}
        self.growth: dict[str, Growth[Accumulator]] = {}
        # The null model each threshold was simulated for, and a count of stream builds
        # (arming, in a thread, sees the fold's builds by it).
        self.armed_with: dict[StreamKey, det.NullModel] = {}
        self.built = 0

    # --- references ------------------------------------------------------------------

    def recalibration_required(self, release: str) -> bool:
        return release not in self.references or bool(self.stale.get(release))

    def install(self, reference: Reference) -> None:
        """Use `reference` for its release (frozen here, by a command, or from a file)."""
        release = reference.release
        self.references[release] = reference
        self.pending.pop(release, None)
        self._drop_streams(release)
        self._build_streams(reference)
        self.growth[release] = Growth(reference.traces, self.config.reference_traces,
                                      self.config.reference_max_traces,
                                      partial(Accumulator, release, self.layout))
        self.armed = False
        if self.arm_inline:
            self.arm()

    def _build_streams(self, reference: Reference) -> None:
        """A detector per stream the reference holds enough traffic for. Streams that
        exist (a grown reference) keep their history, their reference shape, and their
        threshold until `arm` sets the one for the new reference size."""
        cells = {(k[1], k[2]) for k in reference.table.keys}
        for spec in self.specs:
            for dimension, value in cells:
                cell = reference.cell(dimension, value)
                key = StreamKey(reference.release, dimension, value, spec.signal,
                                spec.direction)
                detector = self.detectors.get(key)
                armed = None if detector is None else detector.model
                built = None if cell is None else spec.build(cell, armed)
                if built is None or built[1] < self.config.min_reference_traces:
                    continue
                model, n_ref = built
                window_n = n_ref / reference.windows
                model = with_shape(model, window_n, armed)
                if detector is not None and detector.model.width == model.width:
                    detector.model = model
                else:
                    self.detectors[key] = det.Detector(model, np.inf)
                self.window_n[key] = window_n
        # A young share's CUSUM keeps its budget only at short budgets (shares.at_budget);
        # a stream's budget is known once its family's streams are all built.
        per_family = self._family_sizes()
        for key, detector in self.detectors.items():
            detector.model = at_budget(detector.model, self._budget(key, per_family))
        self.built += 1

    def refreeze(self, release: str) -> None:
        """Drop the release's reference; the next `reference_traces` traces freeze a new one
        (`ragmon reference freeze --release R` without a traces file)."""
        self.references.pop(release, None)
        self.pending[release] = Accumulator(release, self.layout)
        self._drop_streams(release)

    def _drop_streams(self, release: str) -> None:
        self.stale.pop(release, None)
        self.growth.pop(release, None)
        for key in [k for k in self.detectors if k.release == release]:
            del self.detectors[key]
            self.armed_with.pop(key, None)
            self.verdicts.pop(key, None)
            self.last_alarm.pop(key, None)

    def arm(self) -> None:
        """Set the threshold of every detector whose null model has none yet, from its
        family's budget. Simulation takes seconds for a new kind of stream: the worker
        runs this in a thread while the fold goes on (detectors wait with an infinite
        threshold: insufficient data); the work list (`arming`) is taken afresh whenever
        the fold has built streams meanwhile, unarmed streams first."""
        while True:
            built = self.built
            todo = arming.to_arm(self.detectors, self.armed_with, self.window_n)
            if not todo:
                self.armed = self.built == built
                if self.armed:
                    return
                continue
            per_family = self._family_sizes()
            for key, detector, model in todo:
                budget = self._budget(key, per_family)
                # An unarmed stream with a shape is armed on its model first (cached, ms)
                # and on its shape (a simulation) when its turn comes again: every stream
                # armed within seconds, the shape's correction soon after.
                first = getattr(model, "atoms", None) is not None and not np.isfinite(
                    detector.threshold)
                simulated = replace(model, atoms=None) if first else model  # type: ignore[type-var]
                detector.threshold = threshold(simulated, max(self.window_n[key], 1e-9), budget)
                if not first:
                    self.armed_with[key] = model
                if self.built != built:
                    break  # new streams: they go first

    def _family(self, key: StreamKey) -> str:
        return self.spec_of[(key.signal, key.direction)].family

    def _family_sizes(self) -> Counter[str]:
        """Streams per family (over a copy: the fold may build streams meanwhile)."""
        return Counter(self._family(key) for key in list(self.detectors))

    def _budget(self, key: StreamKey, per_family: Counter[str]) -> float:
        """Windows between false alarms for one stream: `arl0_traces` over its window, or
        its family's time budget shared by the family's streams."""
        fam = self._family(key)
        days = self.config.false_alarm_days_by_family.get(fam, self.config.false_alarm_days)
        budget = (self.config.arl0_traces / max(self.window_n[key], 1e-9)
                  if self.config.arl0_traces is not None
                  else arl0_windows(days, per_family[fam], self.config.window_seconds))
        return max(budget, 2.0)

    # --- the fold --------------------------------------------------------------------

    def observe(self, window_start: int, table: Table,
                components: dict[str, set[Components]], now: float) -> list[Alarm]:
        """Fold one closed window (all partitions merged); return the alarms it raised."""
        alarms: list[Alarm] = []
        cells = table.cells()
        releases = sorted({k[0] for k in cells})
        for release in releases:
            self.windows_seen[release] = self.windows_seen.get(release, 0) + 1
            seen = components.get(release, set())
            # Leaks are incidents: judged with or without a (valid) reference.
            alarms.extend(self._leaks(release, window_start, cells))
            reference = self.references.get(release)
            if reference is None:
                self._accumulate(release, window_start, table, seen, now)
                continue
            changes = reference.changed_components(seen)
            if changes:
                self.stale[release] = changes
                self.growth.pop(release, None)  # a stale reference does not grow
                self._mark(release, window_start, "recalibration_required")
                continue
            alarms.extend(self._detect(release, window_start, cells, reference))
            self._grow(release, window_start, table, seen)
        for alarm in alarms:
            self.alarm_counts[alarm.key] = self.alarm_counts.get(alarm.key, 0) + 1
        return alarms

    def _grow(self, release: str, window_start: int, table: Table,
              seen: set[Components]) -> None:
        """Offer the window to the release's reference growth; fold in a block that may.
        A drift alarm of this window or one still held (`last_alarm`, which every alarm
        sets) makes the window alarmed; gate leaks are incidents, not drift."""
        growth = self.growth.get(release)
        if growth is None or growth.is_done:
            return
        before = growth.block.traces
        growth.block.add(window_start, table, seen)
        alarmed = any(k.release == release and k.signal != "gate_leak"
                      and self._is_latched(k, window_start) for k in self.last_alarm)
        block = growth.observe(growth.block.traces - before, alarmed)
        if block is not None:
            grown = self.references[release] = self.references[release].grow(block)
            self._build_streams(grown)
            self.armed = False
            if self.arm_inline:
                self.arm()

    def _accumulate(self, release: str, window_start: int, table: Table,
                    seen: set[Components], now: float) -> None:
        acc = self.pending.get(release)
        if acc is None:
            acc = self.pending[release] = Accumulator(release, self.layout)
        acc.add(window_start, table, seen)
        if acc.traces >= self.config.reference_traces:
            self.install(acc.freeze(now))

    def _mark(self, release: str, window_start: int, status: str) -> None:
        for key, verdict in list(self.verdicts.items()):
            if key.release == release and key.signal != "gate_leak":
                self.verdicts[key] = Verdict(verdict.statistic, verdict.threshold, False,
                                             status, window_start)

    def _leaks(self, release: str, window_start: int, cells: dict[CellKey, Cell]) -> list[Alarm]:
        """Gate leaks of the window: an incident, not a statistic (no reference, no budget)."""
        alarms: list[Alarm] = []
        gate = self.layout.counts["gate_leaks"]
        for (rel, dimension, value), cell in cells.items():
            if rel != release:
                continue
            leaks = int(cell.counts[gate])
            key = StreamKey(release, dimension, value, "gate_leak", "up")
            if leaks:
                if not self._is_latched(key, window_start):
                    alarms.append(Alarm(key, window_start, float(leaks), 0.0, 1, 0.0,
                                        float(leaks)))
                self.last_alarm[key] = window_start
            self.verdicts[key] = self._verdict(key, float(leaks), 0.0, window_start,
                                               "alarm" if leaks else "ok", 1)
        return alarms

    def _detect(self, release: str, window_start: int, cells: dict[CellKey, Cell],
                reference: Reference) -> list[Alarm]:
        alarms: list[Alarm] = []
        for (rel, dimension, value), cell in cells.items():
            if rel != release:
                continue
            ref_cell = reference.cell(dimension, value)
            if ref_cell is not None:
                for name, hist in self.layout.histograms.items():
                    if name not in EXCLUDED_SIGNALS:
                        found = distances(hist, ref_cell, cell)
                        if found:
                            self.distances[(release, dimension, value, name)] = found
            for spec in self.specs:
                key = StreamKey(release, dimension, value, spec.signal, spec.direction)
                detector = self.detectors.get(key)
                if detector is None:
                    continue
                n, t = spec.window(cell, detector.model)
                if n <= 0:
                    continue
                update = detector.update(n, t)
                if not np.isfinite(update.threshold):
                    update = replace(update, status="insufficient_data")
                elif update.status == "ok":
                    update = replace(update, status=_quiet(detector.model))
                latched = self._is_latched(key, window_start)
                if update.alarm:
                    self.last_alarm[key] = window_start
                self.verdicts[key] = self._verdict(
                    key, update.statistic, update.threshold, window_start, update.status,
                    update.since, None if ref_cell is None else spec.value(ref_cell),
                    spec.value(cell))
                if update.alarm and not latched:  # a persisting change stays one alarm
                    alarms.append(Alarm(
                        key, window_start, update.statistic, update.threshold, update.since,
                        None if ref_cell is None else spec.value(ref_cell),
                        spec.value(cell)))
        return alarms

    def _is_latched(self, key: StreamKey, window_start: int) -> bool:
        last = self.last_alarm.get(key)
        hold = self.config.alarm_hold_windows * self.config.window_seconds
        return last is not None and window_start - last < hold

    def _verdict(self, key: StreamKey, statistic: float, limit: float, window_start: int,
                 status: str, since: int, reference_value: float | None = None,
                 window_value: float | None = None) -> Verdict:
        return Verdict(statistic, limit, self._is_latched(key, window_start), status,
                       window_start, since, reference_value, window_value)

    def view(self, owns: Callable[[str], bool] | None = None) -> DriftView:
        """What to export; only of the releases `owns` accepts, if given (stage two: a
        release's owner exports its drift state, monitor/worker/merge.py)."""
        keep = owns or (lambda _: True)
        releases = {r for r in (set(self.windows_seen) | set(self.references)
                                | set(self.pending)) if keep(r)}
        verdicts = {}
        for key, verdict in list(self.verdicts.items()):
            if not keep(key.release):
                continue
            detector = self.detectors.get(key)
            if detector is not None and detector.threshold != verdict.threshold:
                verdict = replace(verdict, threshold=detector.threshold)  # calibrated since
                if verdict.status == "insufficient_data" and np.isfinite(detector.threshold):
                    # armed; judged at its next window
                    verdict = replace(verdict, status=_quiet(detector.model))
            verdicts[key] = verdict
        references = {r: ref for r, ref in self.references.items() if keep(r)}
        return DriftView(
            verdicts, {k: n for k, n in self.alarm_counts.items() if keep(k.release)},
            {k: e for k, e in self.exemplars.items() if keep(k.release)},
            {r: ref.describe() for r, ref in references.items()},
            {r: cell for r, ref in references.items()
             if (cell := ref.cell(TOTAL, TOTAL)) is not None},
            {r: list(self.stale.get(r, [])) for r in releases if self.recalibration_required(r)},
            {k: dict(v) for k, v in self.distances.items() if keep(k[0])},
        )


def _quiet(model: det.NullModel) -> Literal["ok", "small_reference"]:
    """The status of an armed stream without an alarm: `small_reference` where its share's
    reference is too small for its budget to be assured (`shares.small_reference`)."""
    return "small_reference" if small_reference(model) else "ok"
