"""Stage two of the aggregation: every partition's partial state -> one merged state.

Stage one is the per-partition fold (monitor/aggregate/pipeline.py); after each batch the worker
that owns a partition writes its checkpoint, the partition's cumulative partial, to the
state topic. Stage two reads the checkpoints of all partitions, whichever worker wrote
them, keeps the newest per partition and merges them, so the cells a worker exports
and the windows its detectors see cover all the traffic, not that worker's share.

Each release has one owner: the worker holding the decisions partition the release's
name hashes to (`owner`). Only the owner exports a release's cells and runs its
detectors, so several workers neither split a release's statistics (summing the
series over instances gives the totals) nor page twice for one change.

A checkpoint holds cumulative state, so reading one twice changes nothing; a closed
window is collected once per partition. A checkpoint carries only the last few closed
windows (pipeline.RECENT_CLOSED); if more closed between two reads (a backlog of old
traffic read fast), the ones not seen are counted in `skipped`, never silently lost.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable

from monitor.aggregate.checkpoint import Countable, countable
from monitor.aggregate.layout import Layout
from monitor.aggregate.pipeline import Counters
from monitor.aggregate.table import Table
from monitor.detect.watch import Raised, Watch

__all__ = ["Merger", "owner"]


def owner(release: str, partitions: int) -> int:
    """The decisions partition whose owner owns `release` (stable across processes)."""
    return zlib.crc32(release.encode()) % partitions


class Merger:
    """The newest partial of every partition; their merged table; detection on the
    windows every partition has closed."""

    def __init__(self, layout: Layout, watch: Watch) -> None:
        self.layout = layout
        self.watch = watch
        self.countables: dict[bytes, Countable] = {}
        self._collected: set[tuple[bytes, int]] = set()
        self._table: Table | None = None
        self.skipped = 0  # closed windows of some partition detection never saw

    def update(self, source: bytes, blob: bytes) -> None:
        """Take the newest checkpoint of partition `source` (bytes as written)."""
        before = self.countables.get(source)
        state = countable(self.layout, blob, before)
        self.countables[source] = state
        self._table = None
        done = self.watch.last_run  # windows up to here were detected on and forgotten
        fresh = [w for w in state.recent
                 if w.start > done and (source, w.start) not in self._collected]
        if before is not None:  # the newest of the windows closed since are in `recent`
            self.skipped += max(0, state.closed_count - before.closed_count - len(state.recent))
        self._collected.update((source, w.start) for w in fresh)
        self.watch.collect(fresh)

    def table(self) -> Table:
        """Every partition's totals and open windows, merged."""
        if self._table is None:
            table = Table.empty(self.layout)
            for _, state in sorted(self.countables.items()):
                table = table.merge(state.table)
            self._table = table
        return self._table

    def counters(self, sources: Iterable[bytes]) -> Counters:
        """The input counters of these partitions, summed (from their newest checkpoints:
        a partition that moved here counts before it has new traffic)."""
        return Counters.total(self.countables[s].counters for s in sources if s in self.countables)

    def detect(self, owns: Callable[[str], bool]) -> list[Raised]:
        """Run the detectors of the releases `owns` accepts on every complete window."""
        raised = self.watch.run([state.watermark for state in self.countables.values()],
                                owns=owns)
        done = self.watch.last_run
        self._collected = {(s, start) for s, start in self._collected if start > done}
        return raised
