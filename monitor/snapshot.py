"""What one scrape renders: everything the pipelines folded, as one immutable value.

The worker builds a `Snapshot` between batches and swaps it into the collector; a scrape
only reads it (`export.families`), so scrapes never race the fold.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Final, NamedTuple

from monitor.aggregate import Cell, CellKey, Table
from monitor.drift import DriftView
from monitor.layout import Layout
from monitor.pipeline import Counters, Pipeline

__all__ = ["ALL", "Snapshot", "snapshot_of"]

ALL: Final = "all"  # dimension and value labels of a release's total


class Snapshot(NamedTuple):
    """What one scrape renders; built by the worker between batches, never mutated."""

    layout: Layout
    cells: dict[CellKey, Cell]
    input: dict[str, int]
    rejected: dict[str, int]
    events: dict[str, dict[str, int]]
    health: dict[str, float]
    drift: DriftView | None = None
    # (cell, decision) -> (otel trace id, event time, top_score) of a recent trace
    exemplars: Mapping[tuple[CellKey, str], tuple[str, float, float | None]] = \
        MappingProxyType({})


def snapshot_of(pipelines: Sequence[Pipeline], health: dict[str, float],
                drift: DriftView | None = None, cells: Table | None = None,
                counters: Counters | None = None) -> Snapshot:
    """Everything the pipelines folded (closed and open windows), as one immutable value;
    `cells` and `counters`, if given, instead of the pipelines' (stage two's merge)."""
    if not pipelines:
        raise ValueError("a snapshot needs at least one pipeline")
    if cells is None:
        cells = Table.empty(pipelines[0].layout)
        for pipeline in pipelines:
            cells = cells.merge(pipeline.merged())
    if counters is None:
        counters = Counters.total(p.counters() for p in pipelines)
    watermark = max(0.0, *(p.windows.watermark for p in pipelines))
    # Caps may be shared by the pipelines (one per partition): count each cap once.
    slicers = {id(p.slicer): p.slicer for p in pipelines}.values()
    caps = {id(p.admit_missing): p.admit_missing for p in pipelines}.values()
    overflowed = sum(s.overflowed for s in slicers) + sum(c.overflowed for c in caps)
    health = {**health, "watermark": watermark, "overflowed": overflowed}
    return Snapshot(pipelines[0].layout, cells.cells(), counters.input, counters.rejected,
                    counters.events, health, drift, _cell_exemplars(pipelines))


def _cell_exemplars(pipelines: Sequence[Pipeline],
                    ) -> dict[tuple[CellKey, str], tuple[str, float, float | None]]:
    """The newest exemplar of every (cell, decision) over the pipelines."""
    found: dict[tuple[CellKey, str], tuple[str, float, float | None]] = {}
    for pipeline in pipelines:
        for key, exemplar in list(pipeline.exemplars.items()):
            old = found.get(key)
            if old is None or old[1] < exemplar[1]:
                found[key] = exemplar
    return found
