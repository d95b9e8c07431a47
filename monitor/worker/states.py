"""A worker's partition states and the fold into them, served in a process of their own.

The streaming worker is bound by Faust's per-message drain, which holds the worker
process's interpreter lock; folding and checkpointing in that process took ~50 us per
trace from it (`benchmarks/RESULTS.md`). So the partition states live in a process of
their own, the states process (`serve`, named `ragmon-states`), and the Faust process
only hands it each batch's raw values and offsets and sends back what it returns: dead
letters, de-duplication segments, checkpoints and tombstones. It holds no broker
connection: restores are read by the Faust process and handed in as bytes.

`States` is the plain-value part (no I/O): tests and the states process use the same
class. The requests are typed (`Restore`, `FoldGroups`, `Forget`, `ReadLocal`: one per
method of `States`), and `monitor/worker/partitions.py` has one client method per
request.
"""

from __future__ import annotations

import pickle
import socket
import sys
import time
import traceback
from collections import deque
from typing import Any, NamedTuple

from monitor import memory
from monitor.aggregate import checkpoint
from monitor.aggregate.admission import failed
from monitor.aggregate.pipeline import EventKind, Pipeline, slicer_of
from monitor.export.snapshot import Local, local_of
from monitor.frames import pack_frame, read_frame
from monitor.ingest.parse import Rejection
from monitor.ingest.slices import Cap
from monitor.settings import Settings

__all__ = [
    "FoldGroups",
    "Folded",
    "FoldedBatch",
    "Forget",
    "Group",
    "PartitionState",
    "ReadLocal",
    "Request",
    "Restore",
    "Restored",
    "States",
    "answer",
    "serve",
]

class PartitionState:
    """One partition's pipeline, the last offset it applied from each source topic, the
    checkpointed segments of its de-duplication horizon, and the checkpoint the pipeline
    stands at (restored or last written: where a failed batch rolls back to)."""

    def __init__(self, pipeline: Pipeline, offsets: dict[str, int],
                 segments: list[checkpoint.Segment], blob: bytes | None) -> None:
        self.pipeline = pipeline
        self.offsets = offsets
        self.segments = segments
        self.blob = blob


class Group(NamedTuple):
    """One partition's part of a batch, as the Faust process hands it over."""

    partition: int
    topic: str
    offsets: list[int]
    raws: list[bytes]


class Folded(NamedTuple):
    """What folding a group left to write, in this order, before the batch is
    acknowledged: dead letters, the segment, the checkpoint, then tombstones."""

    partition: int
    dead: list[tuple[int, Rejection]]   # index in the group, why
    segment: bytes | None               # the batch's first sightings of trace ids
    upto: int                           # the segment's (and checkpoint's) last offset
    state: bytes                        # the checkpoint
    expired: list[int]                  # `upto` of segments past the horizon
    offsets: dict[str, int]             # applied, after this batch


class Restore(NamedTuple):
    """Hold `partition` from its checkpoint and segments -> `Restored`."""

    partition: int
    blob: bytes | None
    segments: list[bytes]


class FoldGroups(NamedTuple):
    """Fold a batch's groups -> `FoldedBatch`."""

    kind: EventKind
    groups: list[Group]


class Forget(NamedTuple):
    """Drop the states of partitions no longer owned -> None."""

    partitions: list[int]


class ReadLocal(NamedTuple):
    """What the scrapes need of the pipelines held -> `Local`."""


Request = Restore | FoldGroups | Forget | ReadLocal


class Restored(NamedTuple):
    """The reply to `Restore`."""

    offsets: dict[str, int]  # applied, per source topic
    seen: int                # trace ids restored into the de-duplication horizon


class FoldedBatch(NamedTuple):
    """The reply to `FoldGroups`."""

    folded: list[Folded]     # per group held, what to write before the acknowledgement
    missing: list[int]       # partitions of the batch not held here
    skipped: int             # offsets skipped as already applied


class States:
    """The pipelines of the partitions held; restore, fold, forget."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.held: dict[int, PartitionState] = {}
        # Shared by every partition's pipeline: one value maps to `other` everywhere.
        self.slicer = slicer_of(settings)
        self.admit_missing = Cap(settings.missing_ids_max)

    def restore(self, partition: int, blob: bytes | None,
                segments: list[bytes]) -> Restored:
        """Hold `partition` from its checkpoint (`None`: new) and de-duplication segments;
        its applied offsets and the number of trace ids restored."""
        pipeline, offsets = checkpoint.load(self.settings, blob, self.slicer, self.admit_missing,
                                            clock=time.time())
        pipeline.journal = []
        kept = checkpoint.restore_seen(pipeline, segments,
                                       offsets.get(self.settings.topic_decisions, -1))
        self.held[partition] = PartitionState(pipeline, offsets, kept, blob)
        return Restored(offsets, len(pipeline.seen))

    def fold(self, kind: EventKind, groups: list[Group]) -> FoldedBatch:
        """Fold each group into its partition; the partitions not held (forgotten after a
        revoke since the batch began: restore and fold again); offsets skipped as
        already applied (redelivered)."""
        folded, missing, skipped = [], [], 0
        for group in groups:
            if group.partition not in self.held:
                missing.append(group.partition)
                continue
            found, applied = self._fold_group(kind, group)
            skipped += applied
            if found is not None:
                folded.append(found)
        return FoldedBatch(folded, missing, skipped)

    def forget(self, partitions: list[int]) -> None:
        for partition in partitions:
            self.held.pop(partition, None)

    def local(self) -> Local:
        """What the scrapes need of the pipelines held here (watermark, caps, exemplars)."""
        return local_of([s.pipeline for _, s in sorted(self.held.items())]
                        or [Pipeline(self.settings, self.slicer, self.admit_missing)])

    def _fold_raws(self, state: PartitionState, raws: list[bytes],
                   kind: EventKind) -> list[tuple[int, Rejection]]:
        """Fold `raws` into `state`; if that raises, roll back and fold them one at a time,
        so that the message whose fold raises is set apart alone (`worker_error`) and the
        rest of the batch counts exactly once."""
        clock = time.time()  # the ingest clock, the same for a batch and its retries
        try:
            return _feed(state.pipeline, raws, kind, clock)
        except Exception as exc:
            _log_failure(exc, f"folding a batch of {len(raws)} {kind}")
        self._roll_back(state)
        dead: list[tuple[int, Rejection]] = []
        done: list[bytes | None] = []  # in order: folded fine, or set apart (None)
        for index, raw in enumerate(raws):
            try:
                found = _feed(state.pipeline, [raw], kind, clock)
            except Exception as exc:
                _log_failure(exc, f"folding {kind} message {index} of the batch alone")
                self._roll_back(state)
                done.append(None)
                for again in done:  # as before, from the same state: so again
                    if again is None:
                        state.pipeline.set_apart(kind)
                    else:
                        _feed(state.pipeline, [again], kind, clock)
                dead.append((index, failed(raw, exc)))
                continue
            done.append(raw)
            dead.extend((index, rejection) for _, rejection in found)
        return dead

    def _roll_back(self, state: PartitionState) -> None:
        """Put `state`'s pipeline back where its last checkpoint left it: the tables and
        counters from that checkpoint, the de-duplication horizon without the first
        sightings since (what a restart from that checkpoint would hold; the open
        windows' exemplars and version components are lost, as in a restart)."""
        before = state.pipeline
        pipeline, _ = checkpoint.load(self.settings, state.blob, self.slicer,
                                      self.admit_missing)
        since = {trace_id for trace_id, _, _ in before.journal or ()}
        seen = before.seen
        for trace_id in since:
            seen.refs.pop(trace_id, None)
        seen.order = deque(entry for entry in seen.order if entry[1] not in since)
        pipeline.seen = seen
        pipeline.joiner.forget(seen.refs)
        pipeline.journal = []
        state.pipeline = pipeline

    def _fold_group(self, kind: EventKind, group: Group) -> tuple[Folded | None, int]:
        """What folding the group left to write (`None`: all applied), and how many of its
        offsets were already applied."""
        state = self.held[group.partition]
        applied = state.offsets.get(group.topic, -1)
        fresh = [i for i, offset in enumerate(group.offsets) if offset > applied]
        skipped = len(group.offsets) - len(fresh)
        if not fresh:
            return None, skipped
        raws = [group.raws[i] for i in fresh]
        dead = [(fresh[i], rejection) for i, rejection in self._fold_raws(state, raws, kind)]
        state.offsets[group.topic] = max(group.offsets[i] for i in fresh)
        # Take the batch's first sightings and start a fresh journal (no copy).
        sightings = state.pipeline.journal or []
        state.pipeline.journal = []
        upto = state.offsets.get(self.settings.topic_decisions, -1)
        segment = None
        if sightings:
            segment = checkpoint.dump_seen(sightings, upto)
            state.segments.append(checkpoint.Segment(upto, max(ts for _, ts, _ in sightings),
                                                     len(sightings)))
        blob = state.blob = checkpoint.dump(state.pipeline, state.offsets)
        state.segments, gone = checkpoint.expired(
            state.segments, state.pipeline.windows.watermark,
            self.settings.trace_retention_seconds, self.settings.trace_retention_max)
        return Folded(group.partition, dead, segment, upto, blob, [s.upto for s in gone],
                      dict(state.offsets)), skipped


def _feed(pipeline: Pipeline, raws: list[bytes], kind: EventKind,
          clock: float) -> list[tuple[int, Rejection]]:
    if kind == "decisions":
        dead = pipeline.feed(raws, clock=clock)
        pipeline.close_ready()  # into totals; stage two detects on them (merge.py)
        return dead
    return pipeline.feed_events(raws, kind)


def _log_failure(exc: Exception, what: str) -> None:
    """The traceback of a failed fold on stderr, without the exception's text (it could
    quote a message's content): its type and where it was raised."""
    frames = "".join(traceback.format_tb(exc.__traceback__))
    print(f"ragmon states process: {what} raised {type(exc).__name__} (text withheld: it "
          f"may quote input)\nTraceback (most recent call last):\n{frames}",
          file=sys.stderr, flush=True)


def answer(states: States, request: Request) -> Any:
    """What `states` answers to `request` (its reply's value)."""
    match request:
        case Restore(partition, blob, segments):
            return states.restore(partition, blob, segments)
        case FoldGroups(kind, groups):
            return states.fold(kind, groups)
        case Forget(partitions):
            return states.forget(partitions)
        case ReadLocal():
            return states.local()
    raise TypeError(f"not a request of the states process: {request!r}")


def serve(sock: socket.socket, settings: Settings) -> None:
    """The states process: answer requests (`Request`) on `sock` with `(True, value)` or
    `(False, traceback)` until the Faust process goes away (end of file on `sock`: a
    kill -9 of the worker takes its states with it, and the next owner restores).

    Messages are an 8-byte big-endian length and a pickle (`pack_frame`,
    `read_frame`)."""
    memory.tune_gc()  # a long fold over state without reference cycles (as replay)
    trimmed = time.monotonic()
    states = States(settings)
    with sock:
        while (request := read_frame(sock)) is not None:
            try:
                reply: tuple[bool, Any] = (True, answer(states, pickle.loads(request)))
            except Exception:
                reply = (False, traceback.format_exc())
            try:
                for part in pack_frame(reply):
                    sock.sendall(part)
            except OSError:
                return
            if time.monotonic() - trimmed >= memory.TRIM_SECONDS:  # after the reply: off its path
                memory.trim()
                trimmed = time.monotonic()
