"""Event-time windows: which window a trace belongs to, the watermark, lateness, closing.

The watermark is the largest event time seen. A window [start, start + size) closes
once `start + size <= watermark - lateness`; a trace whose window has closed (or would
have) is late: the caller counts it and keeps it out of the fold.

    >>> w = Windows(layout, window_seconds=60, lateness_seconds=30)
    >>> w.observe(120.0); w.is_late(10.0)   # window [0, 60) closed at watermark 90
    True
"""

from __future__ import annotations

from monitor.aggregate.layout import Layout
from monitor.aggregate.table import Table

__all__ = ["Windows"]


class Windows:
    """Open windows keyed by their start (epoch seconds), and the closing rule."""

    def __init__(self, layout: Layout, window_seconds: int, lateness_seconds: int) -> None:
        self.layout = layout
        self.window_seconds = window_seconds
        self.lateness_seconds = lateness_seconds
        self.watermark = float("-inf")
        self.open: dict[int, Table] = {}

    def start_of(self, ts: float) -> int:
        return int(ts // self.window_seconds) * self.window_seconds

    def is_late(self, ts: float) -> bool:
        return self.start_of(ts) + self.window_seconds <= self.watermark - self.lateness_seconds

    def observe(self, ts: float) -> None:
        if ts > self.watermark:
            self.watermark = ts

    def table(self, start: int) -> Table:
        table = self.open.get(start)
        if table is None:
            table = self.open[start] = Table.empty(self.layout)
        return table

    def close_ready(self) -> list[tuple[int, Table]]:
        """Remove and return, oldest first, the windows past the allowed lateness."""
        horizon = self.watermark - self.lateness_seconds
        ready = sorted(s for s in self.open if s + self.window_seconds <= horizon)
        return [(start, self.open.pop(start)) for start in ready]

    def close_all(self) -> list[tuple[int, Table]]:
        return [(start, self.open.pop(start)) for start in sorted(self.open)]
