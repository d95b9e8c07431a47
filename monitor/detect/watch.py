"""Closed windows of many partitions -> one merged window -> drift detection.

Each partition's pipeline closes a window when its own watermark passes it. Detection
must see the whole window: `Watch` merges what every partition closed for a window
start and runs `Drift.observe` once no partition that has seen data can still add to it
(a partition without traffic never holds a window back). The worker feeds it the
partitions' checkpoints (monitor/worker/merge.py); the offline backtest one pipeline.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from monitor.aggregate.pipeline import Closed
from monitor.aggregate.table import Exemplar, Table
from monitor.detect.drift import Alarm, Drift
from monitor.ingest.contract import Components
from monitor.ingest.slices import Slicing

__all__ = ["Raised", "Watch", "to_record"]


@dataclass(frozen=True)
class Raised:
    """An alarm (or, with `alarm` None, a release that now requires recalibration)."""

    window_start: int
    release: str
    alarm: Alarm | None
    exemplar: Exemplar | None
    changes: tuple[str, ...] = ()


@dataclass
class _Closing:
    table: Table
    components: dict[str, set[Components]] = field(default_factory=dict)
    last: dict[Slicing, Exemplar] = field(default_factory=dict)


class Watch:
    """Merges closed windows across pipelines and runs the detectors on complete ones."""

    def __init__(self, drift: Drift, window_seconds: int, lateness_seconds: int) -> None:
        self.drift = drift
        self.window_seconds = window_seconds
        self.lateness_seconds = lateness_seconds
        self.closing: dict[int, _Closing] = {}
        self.last_run = -1  # the newest window start detected on

    def collect(self, closed: Iterable[Closed]) -> None:
        """Take closed windows of one partition (`Pipeline.close_ready()` returns them)."""
        for window in closed:
            if window.start <= self.last_run:
                continue  # already detected on: a partition that closed it late, or again
            entry = self.closing.get(window.start)
            if entry is None:
                entry = self.closing[window.start] = _Closing(Table.empty(window.table.layout))
            entry.table = entry.table.merge(window.table)
            for release, seen in window.components.items():
                entry.components.setdefault(release, set()).update(seen)
            for slicing, last in window.last.items():
                if slicing not in entry.last or entry.last[slicing][0] < last[0]:
                    entry.last[slicing] = last

    def run(self, watermarks: Sequence[float], final: bool = False,
            owns: Callable[[str], bool] | None = None) -> list[Raised]:
        """Detect on every window no partition can still add to (all of them if `final`),
        given each partition's watermark; only on releases `owns` accepts, if given."""
        marks = [w for w in watermarks if w > float("-inf")]
        horizon = min(marks) - self.lateness_seconds if marks else float("-inf")
        raised: list[Raised] = []
        for start in sorted(self.closing):
            if not final and start + self.window_seconds > horizon:
                break
            entry = self.closing.pop(start)
            self.last_run = max(self.last_run, start)
            table = entry.table if owns is None else entry.table.only(owns)
            stale_before = {r for r, changes in self.drift.stale.items() if changes}
            alarms = self.drift.observe(start, table, entry.components,
                                        now=float(start + self.window_seconds))
            for release, changes in sorted(self.drift.stale.items()):
                if changes and release not in stale_before:
                    raised.append(Raised(start, release, None, _find(entry, release, "", ""),
                                         tuple(changes)))
            for alarm in alarms:
                key = alarm.key
                exemplar = _find(entry, key.release, key.dimension, key.value)
                if exemplar is not None:
                    self.drift.exemplars[key] = exemplar[1]
                raised.append(Raised(start, key.release, alarm, exemplar))
        return raised


def _find(entry: _Closing, release: str, dimension: str, value: str) -> Exemplar | None:
    """The last trace of the window that fell into the cell (release, dimension, value)."""
    best: Exemplar | None = None
    for (rel, pairs), last in entry.last.items():
        in_cell = rel == release and (not dimension or (dimension, value) in pairs)
        if in_cell and (best is None or last[0] > best[0]):
            best = last
    return best


def to_record(raised: Raised) -> dict[str, Any]:
    """The alarm line of `ragmon backtest` and of the worker's alarm log."""
    index, trace_id, ts = raised.exemplar or (None, None, None)
    where = {"trace_index": index, "trace_id": trace_id,
             "ts": None if ts is None else _iso(ts)}
    alarm = raised.alarm
    if alarm is None:
        return {"alarm": "recalibration_required", "release": raised.release,
                "dimension": None, "value": None, "signal": None, "direction": None, **where,
                "statistic": None, "threshold": None, "window_start": _iso(raised.window_start),
                "changes": list(raised.changes)}
    key = alarm.key
    return {
        "alarm": "gate_leak" if key.signal == "gate_leak" else "drift",
        "release": key.release,
        "dimension": key.dimension or None,
        "value": key.value or None,
        "signal": key.signal,
        "direction": key.direction,
        **where,
        "statistic": round(alarm.statistic, 4),
        "threshold": round(alarm.threshold, 4),
        "window_start": _iso(alarm.window_start),
        "since_windows": alarm.since_windows,
        "reference_value": alarm.reference_value,
        "current_value": alarm.current_value,
        "group": alarm.group,
    }


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")
