"""A pipeline's countable state as bytes, and back: what makes a worker restart exact.

The streaming worker keeps one pipeline per partition and, after folding a batch,
writes that pipeline's checkpoint together with the last offset applied per source
topic; events are acknowledged (and so committed) only after the write. On restart or
rebalance the new owner loads the checkpoint and skips offsets it already holds, so
redelivery after a crash neither loses nor double-counts a trace.

What is persisted: open window tables, totals, the watermark, input/event/rejection
counters, join counters, pending labels and feedback, and the admitted label values of
every cap. What is not (too large to write per batch): the de-duplication horizon of
trace ids and the refs of traces awaiting labels; after a restart a producer retry of a
trace folded before it counts again, and a label for such a trace waits and expires.
"""

from __future__ import annotations

import zlib
from typing import Any

import msgspec

from monitor.aggregate import Table
from monitor.contract import Feedback, Label, to_json
from monitor.ingest import Accepted, parse
from monitor.pipeline import Pipeline
from monitor.settings import Settings
from monitor.slices import Cap, Slicer

__all__ = ["dump", "load"]

_VERSION = 1
_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder()


def dump(pipeline: Pipeline, offsets: dict[str, int]) -> bytes:
    """Checkpoint bytes of a pipeline and the offsets it has applied (compressed msgpack)."""
    state = {
        "version": _VERSION,
        "offsets": offsets,
        "watermark": pipeline.windows.watermark,
        "open": {str(start): t.to_state() for start, t in pipeline.windows.open.items()},
        "totals": pipeline.totals.to_state(),
        "input": dict(pipeline.input),
        "rejected": dict(pipeline.rejected_by_reason),
        "events": {kind: dict(c) for kind, c in pipeline.events.items()},
        "joined": dict(pipeline.joiner.joined),
        "expired": dict(pipeline.joiner.expired),
        "pending": [to_json(e) for events in pipeline.joiner.pending.values() for e in events],
        "caps": {
            "releases": sorted(pipeline.slicer.releases.admitted),
            "values": {d: sorted(c.admitted) for d, c in pipeline.slicer.values.items()},
            "missing": sorted(pipeline.admit_missing.admitted),
        },
    }
    return zlib.compress(_encoder.encode(state), 1)


def load(settings: Settings, blob: bytes | None, slicer: Slicer | None = None,
         admit_missing: Cap | None = None) -> tuple[Pipeline, dict[str, int]]:
    """A pipeline restored from checkpoint bytes (a fresh one for `None`), and its offsets.

    With shared `slicer`/`admit_missing` the checkpoint's admitted values join theirs."""
    pipeline = Pipeline(settings, slicer, admit_missing)
    if blob is None:
        return pipeline, {}
    state: dict[str, Any] = _decoder.decode(zlib.decompress(blob))
    if state.get("version") != _VERSION:
        raise ValueError(f"checkpoint version {state.get('version')!r} is not {_VERSION}")
    layout = pipeline.layout
    pipeline.windows.watermark = state["watermark"]
    pipeline.windows.open = {int(s): Table.from_state(layout, t) for s, t in state["open"].items()}
    pipeline.totals = Table.from_state(layout, state["totals"])
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
