"""What drift detection reports: stream keys, each stream's verdict, alarms, and the
immutable view the exporter shows (`Drift.view`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from monitor.aggregate.table import Cell

__all__ = ["Alarm", "DriftView", "StreamKey", "Verdict"]


class StreamKey(NamedTuple):
    release: str
    dimension: str  # "" for the release total
    value: str
    signal: str
    direction: str  # up, down, change


@dataclass(frozen=True)
class Verdict:
    """The latest state of one stream, as exported."""

    statistic: float
    threshold: float
    alarm_active: bool
    status: str  # ok, alarm, insufficient_data, small_reference, recalibration_required
    window_start: int
    since_windows: int = 0
    reference_value: float | None = None  # the watched quantity in the reference
    window_value: float | None = None     # ... and in the latest window


@dataclass(frozen=True)
class Alarm:
    """A stream crossed its threshold in the window starting at `window_start`."""

    key: StreamKey
    window_start: int
    statistic: float
    threshold: float
    since_windows: int  # the estimated change lies this many windows back
    reference_value: float | None
    current_value: float | None

    @property
    def group(self) -> str:
        """Alarms of one change: a slice and its release total share the group."""
        return f"{self.key.release}/{self.key.signal}/{self.key.direction}"


class DriftView(NamedTuple):
    """An immutable copy of what the exporter shows (built after each detection round)."""

    verdicts: dict[StreamKey, Verdict]
    alarm_counts: dict[StreamKey, int]
    exemplars: dict[StreamKey, str]
    references: dict[str, dict[str, Any]]       # release -> Reference.describe()
    reference_totals: dict[str, Cell]           # release -> its reference's total cell
    recalibration: dict[str, list[str]]         # release -> why ([] = no reference yet)
    distances: dict[tuple[str, str, str, str], dict[str, float]]  # cell + signal -> measure
