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

from monitor.drift import Drift, DriftConfig
from monitor.pipeline import Pipeline
from monitor.settings import Settings
from monitor.watch import Raised, Watch

__all__ = ["Backtest", "to_record"]


class Backtest:
    """Feed batches of raw trace lines; collect alarm records as windows close."""

    def __init__(self, settings: Settings, config: DriftConfig) -> None:
        self.pipeline = Pipeline(settings)
        self.drift = Drift(self.pipeline.layout, config)
        self.watch = Watch(self.drift, settings.window_seconds,
                           settings.allowed_lateness_seconds)

    def feed(self, lines: Iterable[bytes]) -> Iterator[dict[str, Any]]:
        self.pipeline.feed(lines)
        yield from self._close(final=False)

    def finish(self) -> Iterator[dict[str, Any]]:
        yield from self._close(final=True)

    def _close(self, final: bool) -> Iterator[dict[str, Any]]:
        self.watch.collect(self.pipeline.close_ready(final=final))
        for raised in self.watch.run([self.pipeline.windows.watermark], final=final):
            yield to_record(raised)


def to_record(raised: Raised) -> dict[str, Any]:
    """The alarm line of `ragmon backtest` (and of the worker's alarm log)."""
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
