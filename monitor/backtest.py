"""Backtest: replay traces in file order through the same fold and detectors as the worker.

The first `reference_traces` traces of each release freeze its reference; every closed
window then updates the detectors, and each alarm becomes one JSON record pointing at
the last input trace of the window and cell that raised it. This is how a rule is
tried on history before it pages anyone.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

from monitor.aggregate import TOTAL
from monitor.drift import Alarm, Drift, DriftConfig
from monitor.pipeline import Pipeline
from monitor.settings import Settings

__all__ = ["Backtest"]


class Backtest:
    """Feed batches of raw trace lines; collect alarm records as windows close."""

    def __init__(self, settings: Settings, config: DriftConfig) -> None:
        self.pipeline = Pipeline(settings)
        self.drift = Drift(self.pipeline.layout, config)
        self.window_seconds = settings.window_seconds

    def feed(self, lines: Iterable[bytes]) -> Iterator[dict[str, Any]]:
        self.pipeline.feed(lines)
        yield from self._close(final=False)

    def finish(self) -> Iterator[dict[str, Any]]:
        yield from self._close(final=True)

    def _close(self, final: bool) -> Iterator[dict[str, Any]]:
        for start, table in self.pipeline.close_ready(final=final):
            stale_before = {r for r in self.drift.stale if self.drift.stale[r]}
            alarms = self.drift.observe(start, table,
                                        self.pipeline.closed_components.get(start, {}),
                                        now=float(start + self.window_seconds))
            for release, changes in sorted(self.drift.stale.items()):
                if changes and release not in stale_before:
                    yield self._recalibration(start, release, changes)
            for alarm in alarms:
                yield self._record(alarm)

    def _where(self, start: int, release: str, dimension: str,
               value: str) -> tuple[int | None, str | None, str | None]:
        last = self.pipeline.last_trace(start, release, dimension, value)
        if last is None:
            return None, None, None
        index, trace_id, ts = last
        return index, trace_id, _iso(ts)

    def _record(self, alarm: Alarm) -> dict[str, Any]:
        key = alarm.key
        index, trace_id, ts = self._where(alarm.window_start, key.release, key.dimension,
                                          key.value)
        return {
            "alarm": "gate_leak" if key.signal == "gate_leak" else "drift",
            "release": key.release,
            "dimension": key.dimension or None,
            "value": key.value if key.dimension != TOTAL else None,
            "signal": key.signal,
            "direction": key.direction,
            "trace_index": index,
            "trace_id": trace_id,
            "ts": ts,
            "statistic": round(alarm.statistic, 4),
            "threshold": round(alarm.threshold, 4),
            "window_start": _iso(alarm.window_start),
            "since_windows": alarm.since_windows,
            "reference_value": alarm.reference_value,
            "current_value": alarm.current_value,
            "group": alarm.group,
        }

    def _recalibration(self, start: int, release: str, changes: list[str]) -> dict[str, Any]:
        index, trace_id, ts = self._where(start, release, TOTAL, TOTAL)
        return {
            "alarm": "recalibration_required", "release": release, "dimension": None,
            "value": None, "signal": None, "direction": None, "trace_index": index,
            "trace_id": trace_id, "ts": ts, "statistic": None, "threshold": None,
            "window_start": _iso(start), "changes": changes,
        }


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")
