"""Event-time windows: which window a trace belongs to, the watermark, lateness, closing.

The watermark is the largest event time seen. A window [start, start + size) closes
once `start + size <= watermark - lateness`; a trace whose window has closed (or would
have) is late: the caller counts it and keeps it out of the fold. The admission applies
the rule per message, inline (monitor/aggregate/admission.py and its compiled twin);
here the windows are held and closed.
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
