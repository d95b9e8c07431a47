"""The partitions a worker folds into, and how their state survives a crash or a move.

Each partition has one pipeline (held by the states process, `monitor/worker/states.py`) and
the last offset it applied per source topic. After
every batch, the partitions the batch touched are written to the broker: first each
one's new first sightings of trace ids as a de-duplication segment (compacted topic
`topic_seen`), then its checkpoint (compacted `topic_state`), all delivered before the
batch is acknowledged. A worker that gains a partition (restart, rebalance) restores
the newest checkpoint and the segments it covers, and skips offsets it already holds.

The topics are Faust topics handed in by `monitor/worker/app.py` (Faust's only home); this
module only calls their `send`.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import pickle
import socket
import time
from collections.abc import Awaitable, Iterable
from typing import Any, cast

from monitor.aggregate.pipeline import EventKind
from monitor.export.snapshot import Health, Local
from monitor.frames import FRAME_LENGTH, pack_frame
from monitor.settings import Settings
from monitor.worker import states, topics
from monitor.worker.states import (
    Folded,
    FoldedBatch,
    FoldGroups,
    Forget,
    Group,
    ReadLocal,
    Request,
    Restore,
    Restored,
)

__all__ = ["Folded", "Group", "Partitions"]

log = logging.getLogger("ragmon.worker")


class Partitions:
    """The partitions held here: their states (in the states process, `monitor/worker/states.py`),
    checkpoints, segments and restores."""

    def __init__(self, settings: Settings, state_topic: Any, seen_topic: Any,
                 health: Health) -> None:
        self.settings = settings
        self.state_topic = state_topic
        self.seen_topic = seen_topic
        self.health = health  # the worker's: checkpoints, state_lost, redelivered_skipped
        self.offsets: dict[int, dict[str, int]] = {}  # applied, by partition held here
        self.local: Local | None = None  # the pipelines' watermark, caps, exemplars
        # Offsets this process applied per partition, kept when a partition is revoked:
        # a later checkpoint behind them means the broker lost its log (memory broker).
        self.applied_here: dict[int, int] = {}
        self.restored_at = 0.0  # monotonic time of the last restore (progress, for stalls)
        self._recovering = asyncio.Lock()
        self._states = _StatesProcess(settings)

    @property
    def recovering(self) -> bool:
        return self._recovering.locked()

    def state_key(self, partition: int) -> bytes:
        return f"{self.settings.app_id}:{self.settings.topic_decisions}:{partition}".encode()

    def seen_key(self, partition: int, upto: int) -> bytes:
        return self.state_key(partition) + f":seen:{upto:020d}".encode()

    async def fold(self, kind: EventKind, groups: list[Group]) -> list[Folded]:
        """Fold each partition's group (partitions restored first); what to write. A
        partition revoked meanwhile (and so forgotten) is restored again and folds: its
        checkpoint is then what the old state would have written."""
        folded: list[Folded] = []
        while groups:
            done, missing, skipped = await self._states.fold(kind, groups)
            folded += done
            self.health.redelivered_skipped += skipped
            for partition in missing:
                self.offsets.pop(partition, None)
            await self.recover_all(missing)
            groups = [g for g in groups if g.partition in missing]
        for found in folded:
            self.offsets[found.partition] = found.offsets
        return folded

    async def refresh_local(self) -> None:
        self.local = await self._states.local()

    async def checkpoint(self, folded: list[Folded]) -> None:
        """For each partition a batch touched: its first sightings (so that a restart keeps
        catching duplicates and joining labels of traces folded before it), then its
        checkpoint, then tombstones for segments past the horizon. The partitions'
        records are sent at once, segments delivered before any checkpoint is sent (a
        checkpoint is never ahead of its segment), and all delivered before the batch is
        acknowledged (and so committed). A record over `state_max_bytes` would fail the
        same way on every retry: the worker says so and exits instead of stalling."""
        self._fits(folded)
        deliveries: list[Awaitable[Any]] = [
            await self.seen_topic.send(key=self.seen_key(f.partition, f.upto), value=f.segment,
                                       partition=f.partition)
            for f in folded if f.segment is not None]
        await asyncio.gather(*deliveries)
        deliveries = [await self.state_topic.send(
            key=self.state_key(f.partition), value=f.state, partition=f.partition)
            for f in folded]
        await asyncio.gather(*deliveries)
        for f in folded:
            self.health.checkpoints += 1
            self.applied_here[f.partition] = f.offsets.get(self.settings.topic_decisions, -1)
            for upto in f.expired:  # compaction then drops them
                await self.seen_topic.send(key=self.seen_key(f.partition, upto), value=None,
                                           partition=f.partition)

    def _fits(self, folded: list[Folded]) -> None:
        if not folded:
            return
        size, partition = max((max(len(f.state), len(f.segment or b"")), f.partition)
                              for f in folded)
        self.health.state_record_bytes = size
        if size > self.settings.state_max_bytes:
            log.critical("partition %d: a state record of %d bytes is over state_max_bytes "
                         "(%d): raise RAGMON_STATE_MAX_BYTES and the max.message.bytes of "
                         "%s and %s; exiting", partition, size, self.settings.state_max_bytes,
                         self.settings.topic_state, self.settings.topic_seen)
            os._exit(71)

    async def recover(self, partition: int) -> dict[str, int]:
        """The partition's applied offsets: held here, or restored from its checkpoint and
        segments."""
        await self.recover_all([partition])
        return self.offsets[partition]

    async def recover_all(self, partitions: Iterable[int]) -> None:
        """Restore every one of `partitions` not held here, at once: a restore mostly
        waits for the broker (reading to a topic's end), ~0.8 s a partition on the
        embedded broker, which one at a time made every start-up and rebalance pay it
        per partition."""
        async with self._recovering:
            missing = sorted({p for p in partitions if p not in self.offsets})
            if not missing:
                return
            restored = await asyncio.gather(*(self._restore(p) for p in missing))
            self.offsets.update(zip(missing, restored, strict=True))
            self.restored_at = time.monotonic()

    async def _restore(self, partition: int) -> dict[str, int]:
        settings = self.settings
        key = self.state_key(partition)
        heads, segments_read = await asyncio.gather(
            topics.read_topic(settings, settings.topic_state, partition, lambda k: k == key),
            topics.read_topic(settings, settings.topic_seen, partition,
                              lambda k: k.startswith(key + b":seen:")))
        blob = heads.get(key)
        offsets, seen = await self._states.restore(partition, blob,
                                                  list(segments_read.values()))
        log.info("partition %d: state %s, offsets %s, %d trace ids restored", partition,
                 "restored" if blob else "new", offsets, seen)
        applied = self.applied_here.get(partition, -1)
        if offsets.get(settings.topic_decisions, -1) < applied:
            # The checkpoint is gone or behind what this process wrote: the broker lost
            # its log (an in-memory broker restarted). Its offsets start again too, so
            # counting starts again rather than skipping new traces.
            self.health.state_lost += 1
            log.warning("partition %d: checkpoint offsets %s are behind offset %d applied "
                        "here: the broker lost its log; counting restarts", partition,
                        offsets, applied)
        return dict(offsets)

    async def forget(self, partitions: set[int]) -> None:
        """Drop states of partitions this worker no longer owns (the new owner restores)."""
        for partition in partitions:
            self.offsets.pop(partition, None)
        await self._states.forget(sorted(partitions))


class _StatesProcess:
    """The process holding the partition states (`states.serve`), one request at a time,
    one method per request (`monitor.worker.states.Request`).

    Started with `spawn` (a fork would copy the Faust process's threads and event
    loop). Requests and replies are frames on a socket pair read by the event loop
    itself: a thread waiting on a pipe took the interpreter lock from Faust's drain in
    5 ms slices (the switch interval) for every chunk of a batch. The states process exits when
    this process goes away; if it dies, so does this process: the states are gone, and
    a restart restores them from their checkpoints."""

    def __init__(self, settings: Settings) -> None:
        ours, theirs = socket.socketpair()
        context = multiprocessing.get_context("spawn")
        self.process = context.Process(target=states.serve, args=(theirs, settings),
                                       name="ragmon-states", daemon=True)
        self.process.start()
        theirs.close()
        self._socket = ours
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self._lock = asyncio.Lock()

    async def restore(self, partition: int, blob: bytes | None,
                      segments: list[bytes]) -> Restored:
        return cast(Restored, await self._call(Restore(partition, blob, segments)))

    async def fold(self, kind: EventKind, groups: list[Group]) -> FoldedBatch:
        return cast(FoldedBatch, await self._call(FoldGroups(kind, groups)))

    async def forget(self, partitions: list[int]) -> None:
        await self._call(Forget(partitions))

    async def local(self) -> Local:
        return cast(Local, await self._call(ReadLocal()))

    async def _call(self, request: Request) -> Any:
        async with self._lock:
            try:
                ok, value = pickle.loads(await self._roundtrip(pack_frame(request)))
            except (OSError, EOFError, asyncio.IncompleteReadError):
                log.critical("the states process (pid %s) died (exit code %s): exiting, so "
                             "that a restart restores the partitions from their checkpoints",
                             self.process.pid, self.process.exitcode)
                os._exit(70)
        if not ok:
            raise RuntimeError(f"states process, {type(request).__name__}: {value}")
        return value

    async def _roundtrip(self, request: list[bytes]) -> bytes:
        if self._streams is None:
            self._streams = await asyncio.open_connection(sock=self._socket, limit=1 << 22)
        reader, writer = self._streams
        writer.writelines(request)
        await writer.drain()
        (size,) = FRAME_LENGTH.unpack(
            await reader.readexactly(FRAME_LENGTH.size))
        return await reader.readexactly(size)
