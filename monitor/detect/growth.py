"""Reference growth: a healthy release's reference keeps learning after its freeze.

A reference frozen from the first 2,000 traces estimates the null law with an error of
its own (a 2% rate from 40 events: +-16%), and the two-sample detectors pay for that
error in delay: with a 2,000-trace reference a 2% -> 3% rise is caught in ~1.8x the
time of a detector that knows the true rate, with 10,000 traces in ~1.3x
(benchmarks/RESULTS.md). Traffic that came after the freeze and raised no alarm is more
of the same, so it joins the reference - carefully, because the point of a reference
is that it does not follow a change:

- traffic is collected in blocks of `step` traces (the release total);
- a complete block joins only after the *next* block is complete too (one block of
  guard), and only if no drift alarm of the release fell in either: a change in
  progress is alarmed on, or still unseen and then at most one block old, never learnt
  on the spot; an alarm drops both blocks;
- growth stops at `limit` traces, so the reference ends frozen again, only larger;
- the caller stops feeding it when the reference goes stale (a version component
  changed): a stale reference does not grow.

The policy is independent of what a block holds (a table of window statistics in the
worker, arrays of values in the benchmark): the caller adds each window to `block`
and reports it with `observe`, which hands back a block once it may join.

    >>> g = Growth(200, step=100, limit=400, new_block=list)
    >>> g.block.append("w1"); g.observe(100, alarmed=False) is None   # block 1 complete
    True
    >>> g.block.append("w2"); g.observe(100, alarmed=False)           # block 2: 1 joins
    ['w1']
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["Growth"]

B = TypeVar("B")


class Growth(Generic[B]):
    """When blocks of post-freeze traffic may join a reference of `traces` traces."""

    def __init__(self, traces: int, step: int, limit: int, new_block: Callable[[], B]) -> None:
        self.traces = traces          # in the reference, blocks that joined included
        self.step = max(1, step)
        self.limit = limit
        self.new_block = new_block
        self.block: B = new_block()   # the block being filled
        self.block_traces = 0
        self.held: B | None = None    # a complete clean block, waiting out its guard
        self.held_traces = 0

    @property
    def is_done(self) -> bool:
        return self.traces >= self.limit

    def observe(self, traces: int, alarmed: bool) -> B | None:
        """A window of `traces` traces was added to `block`; `alarmed`: a drift alarm of
        the release fell in it (or is still active). Returns a block that may join the
        reference now (its traces are counted in `traces` from here on), else None."""
        if self.is_done:
            return None
        if alarmed:
            self.held, self.held_traces = None, 0
            self._restart()
            return None
        self.block_traces += traces
        if self.block_traces < self.step:
            return None
        ready, ready_traces = self.held, self.held_traces
        self.held, self.held_traces = self.block, self.block_traces
        self._restart()
        if ready is None:
            return None
        self.traces += ready_traces
        return ready

    def _restart(self) -> None:
        self.block, self.block_traces = self.new_block(), 0
