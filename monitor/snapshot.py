"""What one scrape renders: everything the pipelines folded, as one immutable value.

The worker builds a `Snapshot` between batches and swaps it into the collector; a scrape
only reads it (`export.families`), so scrapes never race the fold.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Final, NamedTuple

from monitor.aggregate import TOTAL, Cell, CellKey, Table
from monitor.drift import DriftView
from monitor.layout import Layout
from monitor.pipeline import Pipeline

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
                drift: DriftView | None = None) -> Snapshot:
    """Everything the pipelines folded (closed and open windows), as one immutable value."""
    if not pipelines:
        raise ValueError("a snapshot needs at least one pipeline")
    table = Table.empty(pipelines[0].layout)
    inputs: Counter[str] = Counter()
    rejected: Counter[str] = Counter()
    events: dict[str, Counter[str]] = {}
    watermark = 0.0
    for pipeline in pipelines:
        table = table.merge(pipeline.merged())
        inputs.update(pipeline.input)
        rejected.update(pipeline.rejected_by_reason)
        for kind, counts in pipeline.events.items():
            events.setdefault(kind, Counter()).update(counts)
            events[kind]["joined"] += pipeline.joiner.joined[kind]
            events[kind]["expired"] += pipeline.joiner.expired[kind]
            events[kind]["waiting"] += pipeline.joiner.waiting()[kind]
        watermark = max(watermark, pipeline.windows.watermark)
    # Caps may be shared by the pipelines (one per partition): count each cap once.
    slicers = {id(p.slicer): p.slicer for p in pipelines}.values()
    caps = {id(p.admit_missing): p.admit_missing for p in pipelines}.values()
    overflowed = sum(s.overflowed for s in slicers) + sum(c.overflowed for c in caps)
    health = {**health, "watermark": watermark, "overflowed": overflowed}
    return Snapshot(pipelines[0].layout, table.cells(), dict(inputs), dict(rejected),
                    {kind: dict(counts) for kind, counts in events.items()}, health, drift,
                    _cell_exemplars(pipelines))


def _cell_exemplars(pipelines: Sequence[Pipeline],
                    ) -> dict[tuple[CellKey, str], tuple[str, float, float | None]]:
    """The newest exemplar of every (cell, decision): a slicing feeds its release total
    and one cell per slice pair."""
    found: dict[tuple[CellKey, str], tuple[str, float, float | None]] = {}
    for pipeline in pipelines:
        for ((release, pairs), decision), exemplar in list(pipeline.exemplars.items()):
            for key in ((release, TOTAL, TOTAL), *((release, d, v) for d, v in pairs)):
                old = found.get((key, decision))
                if old is None or old[1] < exemplar[1]:
                    found[(key, decision)] = exemplar
    return found
