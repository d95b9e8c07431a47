"""Trace ids seen within a retention horizon: duplicates are caught, join refs are kept.

At-least-once delivery and producer retries deliver some traces twice; the second copy
must not be folded. Each first sighting stores a small reference (its cells and
decision) that the label join needs later. Memory is bounded twice: entries older
than `horizon_seconds` behind the watermark are evicted, and so are the oldest once
`max_entries` is exceeded (counted in `evicted_early`).
"""

from __future__ import annotations

from collections import deque
from typing import Generic, TypeVar

__all__ = ["Seen"]

Ref = TypeVar("Ref")


class Seen(Generic[Ref]):
    """First-sighting registry: `first()` is False for a trace_id already inside the horizon."""

    def __init__(self, horizon_seconds: float, max_entries: int) -> None:
        self.horizon_seconds = horizon_seconds
        self.max_entries = max_entries
        self.refs: dict[str, Ref] = {}
        # (ts, trace_id) in arrival order; the compiled admission (monitor/aggregate/_admission.pyx)
        # adds to `refs` and `order` itself, as `first` does, and calls `evict_oldest`.
        self.order: deque[tuple[float, str]] = deque()
        self.evicted_early = 0

    def __len__(self) -> int:
        return len(self.refs)

    def first(self, trace_id: str, ts: float, ref: Ref) -> bool:
        if trace_id in self.refs:
            return False
        self.refs[trace_id] = ref
        self.order.append((ts, trace_id))
        if len(self.refs) > self.max_entries:
            self.evict_oldest()
        return True

    def evict_oldest(self) -> None:
        """Forget the oldest entry before its time: the bound `max_entries` was exceeded."""
        self._pop()
        self.evicted_early += 1

    def get(self, trace_id: str) -> Ref | None:
        return self.refs.get(trace_id)

    def expire(self, watermark: float) -> int:
        """Forget entries older than the horizon (in arrival order); returns how many."""
        cutoff = watermark - self.horizon_seconds
        n = 0
        while self.order and self.order[0][0] < cutoff:
            self._pop()
            n += 1
        return n

    def _pop(self) -> None:
        _, trace_id = self.order.popleft()
        self.refs.pop(trace_id, None)
