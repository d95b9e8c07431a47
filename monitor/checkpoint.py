"""A pipeline's countable state as bytes, and back: what makes a worker restart exact.

The streaming worker keeps one pipeline per partition and, after folding a batch,
writes that pipeline's checkpoint together with the last offset applied per source
topic; events are acknowledged (and so committed) only after the write. On restart or
rebalance the new owner loads the checkpoint and skips offsets it already holds, so
redelivery after a crash neither loses nor double-counts a trace.

What is persisted: open window tables, totals, the last closed windows (with their
version components and last trace per cell: stage two detects on them), the watermark,
input/event/rejection counters, join counters, pending labels and feedback, and the
admitted label values of every cap. What is not (too large to write per batch): the
de-duplication horizon of trace ids and the refs of traces awaiting labels; after a
restart a producer retry of a trace folded before it counts again, and a label for such
a trace waits and expires.
"""

from __future__ import annotations

import zlib
from typing import Any, NamedTuple
from weakref import WeakKeyDictionary

import msgspec

from monitor.aggregate import Table
from monitor.contract import Feedback, Label, to_json
from monitor.ingest import Accepted, parse
from monitor.layout import Layout
from monitor.pipeline import Closed, Counters, Pipeline
from monitor.settings import Settings
from monitor.slices import Cap, Slicer

__all__ = ["Partial", "dump", "load", "partial"]

_VERSION = 3
_READS = (1, 2, 3)  # 1: no closed windows; 1-2: tables as plain dicts, all compressed
# Version 3 blobs are this prefix and plain msgpack; each table inside is compressed on
# its own, and a table unchanged since the pipeline's last checkpoint (most open windows
# between two batches) reuses its bytes: a 1.7 MB checkpoint cost ~20 ms to write whole.
_RAW = b"RGM3"
_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder()
Packed = dict[int, tuple[Table, int, bytes]]  # id(table) -> (table, its version, bytes)
_packed: WeakKeyDictionary[Pipeline, Packed] = WeakKeyDictionary()


def dump(pipeline: Pipeline, offsets: dict[str, int]) -> bytes:
    """Checkpoint bytes of a pipeline and the offsets it has applied (msgpack, tables
    compressed)."""
    before, now = _packed.get(pipeline, {}), {}

    def pack(table: Table) -> bytes:
        hit = before.get(id(table))
        if hit is not None and hit[0] is table and hit[1] == table.version:
            blob = hit[2]
        else:
            blob = zlib.compress(_encoder.encode(table.to_state()), 1)
        now[id(table)] = (table, table.version, blob)
        return blob

    state = {
        "version": _VERSION,
        "offsets": offsets,
        "watermark": pipeline.windows.watermark,
        "open": {str(start): pack(t) for start, t in pipeline.windows.open.items()},
        "totals": pack(pipeline.totals),
        "recent": [_closed_state(window, pack(window.table))
                   for window in pipeline.recent.values()],
        "closed_count": pipeline.closed_count,
        "input": dict(pipeline.input),
        "rejected": dict(pipeline.rejected_by_reason),
        "events": {kind: dict(c) for kind, c in pipeline.events.items()},
        "joined": dict(pipeline.joiner.joined),
        "expired": dict(pipeline.joiner.expired),
        "waiting": dict(pipeline.joiner.waiting()),
        "pending": [to_json(e) for events in pipeline.joiner.pending.values() for e in events],
        "caps": {
            "releases": sorted(pipeline.slicer.releases.admitted),
            "values": {d: sorted(c.admitted) for d, c in pipeline.slicer.values.items()},
            "missing": sorted(pipeline.admit_missing.admitted),
        },
    }
    _packed[pipeline] = now
    return _RAW + _encoder.encode(state)


def load(settings: Settings, blob: bytes | None, slicer: Slicer | None = None,
         admit_missing: Cap | None = None) -> tuple[Pipeline, dict[str, int]]:
    """A pipeline restored from checkpoint bytes (a fresh one for `None`), and its offsets.

    With shared `slicer`/`admit_missing` the checkpoint's admitted values join theirs."""
    pipeline = Pipeline(settings, slicer, admit_missing)
    if blob is None:
        return pipeline, {}
    state = _read(blob)
    layout = pipeline.layout
    pipeline.windows.watermark = state["watermark"]
    pipeline.windows.open = {int(s): _table(layout, t) for s, t in state["open"].items()}
    pipeline.totals = _table(layout, state["totals"])
    pipeline.recent = {w.start: w for w in (_closed(layout, c) for c in state.get("recent", []))}
    pipeline.closed_count = state.get("closed_count", 0)
    pipeline.input.update(state["input"])
    pipeline.rejected_by_reason.update(state["rejected"])
    for kind, counts in state["events"].items():
        pipeline.events[kind].update(counts)
    pipeline.joiner.joined.update(state["joined"])
    pipeline.joiner.expired.update(state["expired"])
    for raw in state["pending"]:
        result = parse(raw)
        if isinstance(result, Accepted) and isinstance(result.event, Label | Feedback):
            pipeline.joiner.on_event(result.event, pipeline.seen)
    caps = state["caps"]
    pipeline.slicer.releases.admitted.update(caps["releases"])
    for dim, values in caps["values"].items():
        if dim in pipeline.slicer.values:
            pipeline.slicer.values[dim].admitted.update(values)
    pipeline.admit_missing.admitted.update(caps["missing"])
    return pipeline, {topic: int(offset) for topic, offset in state["offsets"].items()}


class Partial(NamedTuple):
    """What stage two needs of one partition's checkpoint (monitor/merge.py)."""

    offsets: dict[str, int]
    watermark: float
    table: Table              # totals and open windows, merged
    recent: list[Closed]      # the last closed windows, oldest first
    closed_count: int         # windows the partition closed, ever
    counters: Counters        # the partition's input counters
    unpacked: dict[bytes, Table]  # tables by their bytes: the next decode reuses them


def partial(layout: Layout, blob: bytes, before: Partial | None = None) -> Partial:
    """The countable part of checkpoint bytes, without rebuilding a pipeline; tables whose
    bytes are unchanged since `before` (the partition's previous partial) are reused."""
    state = _read(blob)
    known = before.unpacked if before is not None else {}
    unpacked: dict[bytes, Table] = {}

    def unpack(data: Any) -> Table:
        if not isinstance(data, bytes):
            return _table(layout, data)
        found = unpacked[data] = known.get(data) or _table(layout, data)
        return found  # shared by partials: read only (merges make new tables)

    table = unpack(state["totals"])
    for _, data in sorted(state["open"].items(), key=lambda item: int(item[0])):
        table = table.merge(unpack(data))
    recent = [_closed(layout, c, unpack) for c in state.get("recent", [])]
    return Partial({t: int(o) for t, o in state["offsets"].items()}, state["watermark"], table,
                   recent, state.get("closed_count", 0), _counters(state), unpacked)


def _read(blob: bytes) -> dict[str, Any]:
    if blob.startswith(_RAW):
        state: dict[str, Any] = _decoder.decode(memoryview(blob)[len(_RAW):])
    else:
        state = _decoder.decode(zlib.decompress(blob))
    if state.get("version") not in _READS:
        raise ValueError(f"checkpoint version {state.get('version')!r} is not one of {_READS}")
    return state


def _table(layout: Layout, data: Any) -> Table:
    """A table from its checkpointed form: compressed bytes (v3) or a plain dict."""
    if isinstance(data, bytes):
        data = _decoder.decode(zlib.decompress(data))
    return Table.from_state(layout, data)


def _counters(state: dict[str, Any]) -> Counters:
    waiting = state.get("waiting", {})
    events = {kind: {**counts, "joined": state["joined"].get(kind, 0),
                     "expired": state["expired"].get(kind, 0), "waiting": waiting.get(kind, 0)}
              for kind, counts in state["events"].items()}
    return Counters(dict(state["input"]), dict(state["rejected"]), events)


def _closed_state(window: Closed, table: bytes) -> list[Any]:
    components = {r: [list(c) for c in seen] for r, seen in window.components.items()}
    last = [[release, [list(p) for p in pairs], *exemplar]
            for (release, pairs), exemplar in window.last.items()]
    return [window.start, table, components, last]


def _closed(layout: Layout, data: list[Any], unpack: Any = None) -> Closed:
    start, table, components, last = data
    return Closed(int(start), unpack(table) if unpack else _table(layout, table),
                  {r: {tuple(c) for c in seen} for r, seen in components.items()},
                  {(release, tuple((d, v) for d, v in pairs)): (int(i), str(t), float(ts))
                   for release, pairs, i, t, ts in last})
