"""What the metrics show at one moment: everything the pipelines folded, as one
immutable value.

The worker builds a `Snapshot` every second and hands it (pickled) to its page process
(`export/pages.py`), which renders it once (`export.collector.families`) for every scrape
until the next: scrapes never race the fold, nor run in the worker's process.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, NamedTuple

from monitor.aggregate.layout import Layout
from monitor.aggregate.pipeline import Counters, Pipeline
from monitor.aggregate.table import Cell, CellKey, Table
from monitor.detect.drift import DriftView

__all__ = ["ALL", "Health", "Local", "Snapshot", "local_of", "snapshot_from", "snapshot_of"]

ALL: Final = "all"  # dimension and value labels of a release's total


@dataclass
class Health:
    """The worker's own health; `monitor/export/health.py` exports each field as the
    ragmon_* metric of its name (counters with `_total`). The worker updates its own; a
    snapshot holds a copy."""

    dlq_produced: int = 0                 # dead letters produced
    batch_seconds: float = 0.0            # time spent folding batches
    batches: int = 0
    batches_dropped: int = 0              # fetched, then left to be read again (a rebalance)
    worker_errors: int = 0                # failures inside the worker
    redelivered_skipped: int = 0          # redelivered offsets a checkpoint already held
    checkpoints: int = 0                  # partition checkpoints written
    state_lost: int = 0                   # partitions whose checkpoint was gone or behind
    state_record_bytes: int = 0           # largest state record of the last batch
    state_max_bytes: int = 0              # the setting
    partitions_owned: int = 0
    detection_windows_skipped: int = 0    # closed windows drift detection never saw
    releases_owned: int = 0               # releases this worker exports
    watermark_lag_seconds: float = 0.0    # wall clock minus the newest event time
    last_event_timestamp_seconds: float = 0.0  # the newest event time (of the pipelines)
    slice_values_overflowed: int = 0      # values mapped to other by caps (the pipelines)
    slice_values_replaced: int = 0        # admitted values that left for busier ones or idle


class Snapshot(NamedTuple):
    """What one scrape renders; built by the worker between batches, never mutated."""

    layout: Layout
    cells: dict[CellKey, Cell]
    input: dict[str, int]
    rejected: dict[str, int]
    events: dict[str, dict[str, int]]
    health: Health
    drift: DriftView | None = None
    # (cell, decision) -> (otel trace id, event time, top_score) of a recent trace
    exemplars: Mapping[tuple[CellKey, str], tuple[str, float, float | None]] = \
        MappingProxyType({})
    # The otlp intake's counters (`SpanStage.counts`); None when it is off. (A plain
    # dict: snapshots are pickled to the page process, and a mappingproxy is not.)
    otlp: dict[str, int] | None = None


class Local(NamedTuple):
    """What a snapshot takes of the pipelines themselves once cells and counters come
    from stage two's merge (the worker's pipelines live in another process)."""

    watermark: float
    overflowed: int
    # (cell, decision) -> (otel trace id, event time, top_score) of a recent trace
    exemplars: Mapping[tuple[CellKey, str], tuple[str, float, float | None]]
    replaced: int = 0  # admitted releases and slice values that gave their place up


def local_of(pipelines: Sequence[Pipeline]) -> Local:
    """The newest event time, values beyond caps and exemplars of `pipelines`."""
    watermark = max(0.0, *(p.windows.watermark for p in pipelines))
    # Caps may be shared by the pipelines (one per partition): count each cap once.
    slicers = {id(p.slicer): p.slicer for p in pipelines}.values()
    caps = {id(p.admit_missing): p.admit_missing for p in pipelines}.values()
    overflowed = sum(s.overflowed for s in slicers) + sum(c.overflowed for c in caps)
    replaced = sum(s.replaced for s in slicers)
    return Local(watermark, overflowed, _cell_exemplars(pipelines), replaced)


def snapshot_of(pipelines: Sequence[Pipeline], health: Health,
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
    return snapshot_from(pipelines[0].layout, local_of(pipelines), health, drift, cells,
                         counters)


def snapshot_from(layout: Layout, local: Local, health: Health,
                  drift: DriftView | None, cells: Table, counters: Counters,
                  otlp: Mapping[str, int] | None = None) -> Snapshot:
    """A snapshot of merged `cells` and `counters` and of what `local` took."""
    health = dataclasses.replace(health, last_event_timestamp_seconds=local.watermark,
                                 slice_values_overflowed=local.overflowed,
                                 slice_values_replaced=local.replaced)
    return Snapshot(layout, cells.cells(), counters.input, counters.rejected, counters.events,
                    health, drift, local.exemplars, dict(otlp) if otlp is not None else None)


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
