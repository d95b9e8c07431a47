"""A pipeline's countable state as bytes, and back: what makes a worker restart exact.

The streaming worker keeps one pipeline per partition and, after folding a batch,
writes that pipeline's checkpoint together with the last offset applied per source
topic; events are acknowledged (and so committed) only after the write. On restart or
rebalance the new owner loads the checkpoint and skips offsets it already holds, so
redelivery after a crash neither loses nor double-counts a trace.

What is persisted: open window tables, totals, the last closed windows (with their
version components and last trace per cell: stage two detects on them), the watermark,
input/event/rejection counters, join counters, pending labels and feedback, and the
admitted label values of every cap. The de-duplication horizon (trace ids with the refs
label joins need) is too large to write per batch: each batch's first sightings go to
the seen topic as a segment of their own before the batch's checkpoint
(`dump_seen`), and a restore puts back the segments the checkpoint holds
(`restore_seen`); segments past the horizon get tombstones (`expired`).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple, TypeAlias
from weakref import WeakKeyDictionary

import lz4.frame
import msgspec

from monitor.aggregate.joins import TraceRef
from monitor.aggregate.layout import Layout
from monitor.aggregate.pipeline import Closed, Counters, Pipeline
from monitor.aggregate.table import Table
from monitor.ingest.contract import Feedback, Label, to_json
from monitor.ingest.parse import Accepted, parse
from monitor.ingest.slices import Cap, Slicer, Slicing
from monitor.settings import Settings

__all__ = ["Caps", "Countable", "Segment", "State", "WindowState", "countable", "decode", "dump",
           "dump_seen", "encode", "expired", "load", "readable", "restore_seen"]

_VERSION = 4
# 1: no closed windows; 1-2: tables as plain dicts, all compressed; 1-3: zlib; 4: lz4
_READS = (1, 2, 3, 4)
# Version 3+ blobs are this prefix and plain msgpack; each table inside is compressed on
# its own, and a table unchanged since the pipeline's last checkpoint (most open windows
# between two batches) reuses its bytes: a 1.7 MB checkpoint cost ~20 ms to write whole.
# The table a batch changed is compressed on every checkpoint, once per partition per
# batch: LZ4 measured 0.12 ms for a 6-dimension window's 194 kB where zlib level 1 took
# 0.8 ms (37 kB against 25 kB).
_RAW = b"RGM3"
_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder()
# A table as checkpointed: its compressed msgpack bytes (3+), or its plain state (1-2).
TableBytes: TypeAlias = bytes | dict[str, Any]
# The last trace of a cell of a closed window: release, slice pairs, input position,
# trace id, event time.
LastTrace: TypeAlias = tuple[str, list[tuple[str, str]], int, str, float]


class WindowState(msgspec.Struct, array_like=True):
    """A closed window as checkpointed (`Closed`): an array on the wire."""

    start: int
    table: TableBytes
    components: dict[str, list[list[str | None]]]  # per release, version tuples seen
    last: list[LastTrace]


class Caps(msgspec.Struct):
    """The admitted values of every cap."""

    releases: list[str]
    values: dict[str, list[str]]  # per slice dimension
    missing: list[str]            # requirement ids


class State(msgspec.Struct, kw_only=True):
    """A checkpoint, typed: the wire form of every version read (`_READS`); fields a
    version did not write take their defaults."""

    version: int
    offsets: dict[str, int]       # applied, per source topic
    watermark: float
    open: dict[str, TableBytes]   # open windows by start (msgpack keys are strings)
    totals: TableBytes
    recent: list[WindowState] = []  # the last closed windows (from 2)
    closed_count: int = 0
    input: dict[str, int]
    rejected: dict[str, int]
    events: dict[str, dict[str, int]]
    joined: dict[str, int]
    expired: dict[str, int]
    waiting: dict[str, int] = {}
    pending: list[bytes]          # labels and feedback waiting, as their wire form
    caps: Caps


_state_decoder = msgspec.msgpack.Decoder(State)
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
            blob = _compress(_encoder.encode(table.to_state()))
        now[id(table)] = (table, table.version, blob)
        return blob

    state = State(
        version=_VERSION,
        offsets=offsets,
        watermark=pipeline.windows.watermark,
        open={str(start): pack(t) for start, t in pipeline.windows.open.items()},
        totals=pack(pipeline.totals),
        recent=[_closed_state(window, pack(window.table))
                for window in pipeline.recent.values()],
        closed_count=pipeline.closed_count,
        input=dict(pipeline.input),
        rejected=dict(pipeline.rejected_by_reason),
        events={kind: dict(c) for kind, c in pipeline.events.items()},
        joined=dict(pipeline.joiner.joined),
        expired=dict(pipeline.joiner.expired),
        waiting=dict(pipeline.joiner.waiting()),
        pending=[to_json(e) for events in pipeline.joiner.pending.values() for e in events],
        caps=Caps(
            releases=sorted(pipeline.slicer.releases.admitted),
            values={d: sorted(c.admitted) for d, c in pipeline.slicer.values.items()},
            missing=sorted(pipeline.admit_missing.admitted),
        ),
    )
    _packed[pipeline] = now
    return encode(state)


def encode(state: State) -> bytes:
    """Checkpoint bytes of a state (`decode(encode(x)) == x`)."""
    return _RAW + _encoder.encode(state)


def decode(blob: bytes) -> State:
    """The state of checkpoint bytes of any version read (`_READS`)."""
    data = memoryview(blob)[len(_RAW):] if blob.startswith(_RAW) else zlib.decompress(blob)
    try:
        state = _state_decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise ValueError(f"not a checkpoint of a version read here {_READS}: {exc}") from None
    if state.version not in _READS:
        raise ValueError(f"checkpoint version {state.version!r} is not one of {_READS}")
    return state


def readable(blob: bytes, seen: bool = False) -> bytes:
    """A checkpoint (or, with `seen`, a de-duplication segment) as JSON with every
    compressed part expanded: what it holds, for a person or a test to read."""
    if seen:
        return msgspec.json.encode(_decoder.decode(_decompress(blob)))
    state = decode(blob)

    def expand(data: TableBytes) -> Any:
        return _decoder.decode(_decompress(data)) if isinstance(data, bytes) else data

    plain = msgspec.to_builtins(state, builtin_types=(bytes,))
    plain["open"] = {start: expand(t) for start, t in state.open.items()}
    plain["totals"] = expand(state.totals)
    plain["recent"] = [[w.start, expand(w.table), w.components, w.last] for w in state.recent]
    plain["pending"] = [raw.decode("utf-8", "replace") for raw in state.pending]
    return msgspec.json.encode(plain)


def load(settings: Settings, blob: bytes | None, slicer: Slicer | None = None,
         admit_missing: Cap | None = None,
         clock: float | None = None) -> tuple[Pipeline, dict[str, int]]:
    """A pipeline restored from checkpoint bytes (a fresh one for `None`), and its offsets.

    With shared `slicer`/`admit_missing` the checkpoint's admitted values join theirs.
    With the ingest `clock`, a watermark further ahead than `max_future_seconds` (written
    before future-dated traces were refused) is brought back to that limit, so a
    poisoned checkpoint cannot keep good traffic late."""
    pipeline = Pipeline(settings, slicer, admit_missing)
    if blob is None:
        return pipeline, {}
    state = decode(blob)
    layout = pipeline.layout
    pipeline.windows.watermark = state.watermark
    if clock is not None:
        pipeline.windows.watermark = min(state.watermark, clock + settings.max_future_seconds)
    pipeline.windows.open = {int(s): _table(layout, t) for s, t in state.open.items()}
    pipeline.totals = _table(layout, state.totals)
    pipeline.recent = {w.start: w for w in (_closed(layout, c) for c in state.recent)}
    pipeline.closed_count = state.closed_count
    pipeline.input.update(state.input)
    pipeline.rejected_by_reason.update(state.rejected)
    for kind, counts in state.events.items():
        pipeline.events[kind].update(counts)
    pipeline.joiner.joined.update(state.joined)
    pipeline.joiner.expired.update(state.expired)
    for raw in state.pending:
        result = parse(raw)
        if isinstance(result, Accepted) and isinstance(result.event, Label | Feedback):
            pipeline.joiner.on_event(result.event, pipeline.seen)
    caps = state.caps
    pipeline.slicer.releases.admitted.update(caps.releases)
    for dim, values in caps.values.items():
        if dim in pipeline.slicer.values:
            pipeline.slicer.values[dim].admitted.update(values)
    pipeline.admit_missing.admitted.update(caps.missing)
    return pipeline, dict(state.offsets)


class Countable(NamedTuple):
    """What stage two needs of one partition's checkpoint (monitor/worker/merge.py)."""

    offsets: dict[str, int]
    watermark: float
    table: Table              # totals and open windows, merged
    recent: list[Closed]      # the last closed windows, oldest first
    closed_count: int         # windows the partition closed, ever
    counters: Counters        # the partition's input counters
    unpacked: dict[bytes, Table]  # tables by their bytes: the next decode reuses them


def countable(layout: Layout, blob: bytes, before: Countable | None = None) -> Countable:
    """The countable part of checkpoint bytes, without rebuilding a pipeline; tables whose
    bytes are unchanged since `before` (the partition's previous one) are reused."""
    state = decode(blob)
    known = before.unpacked if before is not None else {}
    unpacked: dict[bytes, Table] = {}

    def unpack(data: TableBytes) -> Table:
        if not isinstance(data, bytes):
            return _table(layout, data)
        found = unpacked[data] = known.get(data) or _table(layout, data)
        return found  # shared between reads: read only (merges make new tables)

    table = unpack(state.totals)
    for _, data in sorted(state.open.items(), key=lambda item: int(item[0])):
        table = table.merge(unpack(data))
    recent = [_closed(layout, c, unpack) for c in state.recent]
    return Countable(dict(state.offsets), state.watermark, table, recent, state.closed_count,
                   _counters(state), unpacked)


def _table(layout: Layout, data: TableBytes) -> Table:
    """A table from its checkpointed form: compressed bytes (v3) or a plain dict."""
    state = _decoder.decode(_decompress(data)) if isinstance(data, bytes) else data
    return Table.from_state(layout, state)


def _compress(data: bytes) -> bytes:
    return lz4.frame.compress(data)  # type: ignore[no-any-return]


def _decompress(data: bytes) -> bytes:
    """LZ4 frames (version 4) or zlib streams (versions 1-3), told apart by their magic."""
    if data.startswith(_LZ4_MAGIC):
        return lz4.frame.decompress(data)  # type: ignore[no-any-return]
    return zlib.decompress(data)


def _counters(state: State) -> Counters:
    events = {kind: {**counts, "joined": state.joined.get(kind, 0),
                     "expired": state.expired.get(kind, 0),
                     "waiting": state.waiting.get(kind, 0)}
              for kind, counts in state.events.items()}
    return Counters(dict(state.input), dict(state.rejected), events)


def _closed_state(window: Closed, table: bytes) -> WindowState:
    components = {r: [list(c) for c in seen] for r, seen in window.components.items()}
    last = [(release, list(pairs), *exemplar)
            for (release, pairs), exemplar in window.last.items()]
    return WindowState(window.start, table, components, last)


def _closed(layout: Layout, data: WindowState,
            unpack: Callable[[TableBytes], Table] | None = None) -> Closed:
    return Closed(data.start, unpack(data.table) if unpack else _table(layout, data.table),
                  {r: {tuple(c) for c in seen} for r, seen in data.components.items()},
                  {_slicing(release, pairs): (i, t, ts)
                   for release, pairs, i, t, ts in data.last})


class Segment(NamedTuple):
    """A checkpointed slice of the de-duplication horizon: the first sightings of the
    batch whose last offset is `upto`."""

    upto: int
    newest: float  # event time of its newest trace
    entries: int


def dump_seen(entries: list[tuple[str, float, TraceRef]], upto: int) -> bytes:
    """Bytes of the first sightings of one batch (written before that batch's checkpoint).

    Each distinct slicing is written once (`slicings`) and entries refer to it by index:
    a batch repeats a few hundred slicings of up to seven pairs each, and encoding every
    entry's own copy was most of the cost."""
    index: dict[Slicing, int] = {}
    rows = []
    for trace_id, ts, ref in entries:
        slicing = ref.slicing
        at = index.get(slicing)
        if at is None:
            at = index[slicing] = len(index)
        rows.append((trace_id, ts, ref.window_start, at, ref.decision))
    # Tuples encode as arrays: the same wire form as lists, without copying each pair.
    return _compress(_encoder.encode({"upto": upto, "slicings": list(index), "entries": rows}))


def restore_seen(pipeline: Pipeline, blobs: list[bytes], applied: int) -> list[Segment]:
    """Put checkpointed first sightings back into a restored pipeline's horizon, oldest
    batch first. A segment of a batch the checkpoint does not hold (written, then a crash
    before the checkpoint) is ignored: that batch is delivered again and folds then."""
    segments = []
    decoded = [_decoder.decode(_decompress(blob)) for blob in blobs]
    for state in sorted(decoded, key=lambda s: int(s["upto"])):
        if int(state["upto"]) > applied:
            continue
        newest = float("-inf")
        for trace_id, ts, start, slicing, decision in _sightings(state):
            pipeline.seen.first(trace_id, ts, TraceRef(int(start), slicing, decision))
            newest = max(newest, ts)
        segments.append(Segment(int(state["upto"]), newest, len(state["entries"])))
    pipeline.seen.expire(pipeline.windows.watermark)
    pipeline.joiner.forget(pipeline.seen.refs)
    return segments


def _sightings(state: dict[str, Any]) -> Iterator[tuple[str, float, int, Slicing, str]]:
    """A segment's entries with their slicings, from either wire form (with a `slicings`
    dictionary, or, before it, each entry's release and pairs inline)."""
    if "slicings" in state:
        slicings = [_slicing(release, pairs) for release, pairs in state["slicings"]]
        for trace_id, ts, start, at, decision in state["entries"]:
            yield trace_id, ts, start, slicings[at], decision
        return
    for trace_id, ts, start, release, pairs, decision in state["entries"]:
        yield trace_id, ts, start, _slicing(release, pairs), decision


def _slicing(release: str, pairs: Iterable[Sequence[str]]) -> Slicing:
    """A slicing back from its msgpack form (pairs decode as lists)."""
    return release, tuple((d, v) for d, v in pairs)


def expired(segments: list[Segment], watermark: float, horizon_seconds: float,
            max_entries: int) -> tuple[list[Segment], list[Segment]]:
    """Segments still inside the de-duplication horizon (by event time, and the newest
    `max_entries` sightings), and those that can be deleted."""
    keep: list[Segment] = []
    held = 0
    for segment in sorted(segments, key=lambda s: s.upto, reverse=True):
        if segment.newest >= watermark - horizon_seconds and held < max_entries:
            keep.append(segment)
            held += segment.entries
    kept = {s.upto for s in keep}
    return sorted(keep), [s for s in segments if s.upto not in kept]
