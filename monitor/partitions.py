"""The partitions a worker folds into, and how their state survives a crash or a move.

Each partition has one pipeline and the last offset it applied per source topic. After
every batch, the partitions the batch touched are written to the broker: first each
one's new first sightings of trace ids as a de-duplication segment (compacted topic
`topic_seen`), then its checkpoint (compacted `topic_state`), all delivered before the
batch is acknowledged. A worker that gains a partition (restart, rebalance) restores
the newest checkpoint and the segments it covers, and skips offsets it already holds.

The topics are Faust topics handed in by `monitor/app.py` (Faust's only home); this
module only calls their `send`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from typing import Any

from monitor import checkpoint, topics
from monitor.labels import TraceRef
from monitor.pipeline import Pipeline
from monitor.settings import Settings
from monitor.slices import Cap, Slicer

__all__ = ["Folded", "PartitionState", "Partitions"]

log = logging.getLogger("ragmon.worker")


class PartitionState:
    """One partition's pipeline, the last offset it applied from each source topic, and
    the checkpointed segments of its de-duplication horizon."""

    def __init__(self, pipeline: Pipeline, offsets: dict[str, int],
                 segments: list[checkpoint.Segment]) -> None:
        self.pipeline = pipeline
        self.offsets = offsets
        self.segments = segments


# A partition a batch touched: its state and the batch's first sightings of trace ids.
Folded = tuple[int, PartitionState, list[tuple[str, float, TraceRef]]]


class Partitions:
    """States of the partitions held here; their checkpoints, segments and restores."""

    def __init__(self, settings: Settings, state_topic: Any, seen_topic: Any,
                 health: dict[str, float]) -> None:
        self.settings = settings
        self.state_topic = state_topic
        self.seen_topic = seen_topic
        self.health = health  # the worker's: checkpoints, state_lost
        self.states: dict[int, PartitionState] = {}
        # Shared by every partition's pipeline: one value maps to `other` everywhere.
        self.slicer = Slicer(settings.slice_dimensions, settings.slice_values_max,
                             settings.releases_max)
        self.admit_missing = Cap(settings.missing_ids_max)
        # Offsets this process applied per partition, kept when a partition is revoked:
        # a later checkpoint behind them means the broker lost its log (memory broker).
        self.applied_here: dict[int, int] = {}
        self.restored_at = 0.0  # monotonic time of the last restore (progress, for stalls)
        self._recovering = asyncio.Lock()

    @property
    def recovering(self) -> bool:
        return self._recovering.locked()

    def state_key(self, partition: int) -> bytes:
        return f"{self.settings.app_id}:{self.settings.topic_decisions}:{partition}".encode()

    def seen_key(self, partition: int, upto: int) -> bytes:
        return self.state_key(partition) + f":seen:{upto:020d}".encode()

    def pipelines(self) -> list[Pipeline]:
        """The pipelines held here, by partition (a fresh empty one if none)."""
        found = [state.pipeline for _, state in sorted(self.states.items())]
        return found or [Pipeline(self.settings, self.slicer, self.admit_missing)]

    async def checkpoint(self, folded: list[Folded]) -> None:
        """For each partition a batch touched: its first sightings (so that a restart keeps
        catching duplicates and joining labels of traces folded before it), then its
        checkpoint. The partitions' records are sent at once, segments delivered before
        any checkpoint is sent (a checkpoint is never ahead of its segment), and all
        delivered before the batch is acknowledged (and so committed)."""
        decisions = self.settings.topic_decisions
        deliveries: list[Awaitable[Any]] = []
        for partition, state, sightings in folded:
            if sightings:
                upto = state.offsets[decisions]
                deliveries.append(await self.seen_topic.send(
                    key=self.seen_key(partition, upto),
                    value=checkpoint.dump_seen(sightings, upto), partition=partition))
        await asyncio.gather(*deliveries)
        deliveries = [await self.state_topic.send(
            key=self.state_key(partition), value=checkpoint.dump(state.pipeline, state.offsets),
            partition=partition) for partition, state, _ in folded]
        await asyncio.gather(*deliveries)
        for partition, state, sightings in folded:
            if sightings:
                state.segments.append(checkpoint.Segment(
                    state.offsets[decisions], max(ts for _, ts, _ in sightings),
                    len(sightings)))
            self.health["checkpoints"] += 1
            self.applied_here[partition] = state.offsets.get(decisions, -1)

    async def expire_seen(self, partition: int, state: PartitionState) -> None:
        """Tombstones for segments past the horizon (compaction then drops them)."""
        settings = self.settings
        state.segments, gone = checkpoint.expired(
            state.segments, state.pipeline.windows.watermark, settings.trace_retention_seconds,
            settings.trace_retention_max)
        for segment in gone:
            await self.seen_topic.send(key=self.seen_key(partition, segment.upto), value=None,
                                       partition=partition)

    async def recover(self, partition: int) -> PartitionState:
        """The partition's state: held here, or restored from its checkpoint and segments."""
        async with self._recovering:
            state = self.states.get(partition)
            if state is None:
                state = self.states[partition] = await self._restore(partition)
                self.restored_at = time.monotonic()
            return state

    async def _restore(self, partition: int) -> PartitionState:
        settings = self.settings
        key = self.state_key(partition)
        heads, segments_read = await asyncio.gather(
            topics.read_topic(settings, settings.topic_state, partition, lambda k: k == key),
            topics.read_topic(settings, settings.topic_seen, partition,
                              lambda k: k.startswith(key + b":seen:")))
        blob = heads.get(key)
        pipeline, offsets = checkpoint.load(settings, blob, self.slicer, self.admit_missing)
        pipeline.journal = []
        segments = checkpoint.restore_seen(pipeline, list(segments_read.values()),
                                           offsets.get(settings.topic_decisions, -1))
        log.info("partition %d: state %s, offsets %s, %d trace ids restored", partition,
                 "restored" if blob else "new", offsets, len(pipeline.seen))
        applied = self.applied_here.get(partition, -1)
        if offsets.get(settings.topic_decisions, -1) < applied:
            # The checkpoint is gone or behind what this process wrote: the broker lost
            # its log (an in-memory broker restarted). Its offsets start again too, so
            # counting starts again rather than skipping new traces.
            self.health["state_lost"] += 1
            log.warning("partition %d: checkpoint offsets %s are behind offset %d applied "
                        "here: the broker lost its log; counting restarts", partition,
                        offsets, applied)
        return PartitionState(pipeline, offsets, segments)

    def forget(self, partitions: set[int]) -> None:
        """Drop states of partitions this worker no longer owns (the new owner restores)."""
        for partition in partitions:
            self.states.pop(partition, None)
