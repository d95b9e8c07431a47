"""The worker's upkeep timers: the stall watchdog and the topic check.

Both run beside the agents (monitor/worker/app.py schedules them) and act on the worker
only through what `Tended` names: its partitions, its Faust consumer, its topic ids and
the lock its folds hold.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Protocol, TypeVar

from monitor.settings import Settings
from monitor.worker import stall, topics
from monitor.worker.batches import Batch
from monitor.worker.partitions import Partitions
from monitor.worker.provision import ensure_topics, input_topics, topic_ids
from monitor.worker.rewind import lost_offsets, rewind
from monitor.worker.spans import SpanStage

__all__ = ["Tended", "check_stall", "check_topics", "log_replaced"]

T = TypeVar("T")

log = logging.getLogger("ragmon.worker")


class Tended(Protocol):
    """What the upkeep timers read and change of a worker (`app.Worker` is one)."""

    settings: Settings
    app: Any  # the Faust app: its consumer's assignment, and rewinds
    partitions: Partitions
    state_tail: topics.Tail  # stage two's reader of the state topic
    spans: SpanStage | None
    topics: frozenset[str]  # the input topics whose partition p is one state
    topic_ids: dict[str, str]  # of the input topics, as last seen
    folding: asyncio.Lock  # held by whatever folds until its checkpoint is delivered
    last_progress: float  # monotonic time of the last batch (or restore, or check)

    def restart_in_place(self) -> None: ...

    async def retrying(self, attempt: Callable[[], Awaitable[T]], what: str) -> T: ...


async def check_stall(worker: Tended) -> None:
    """Restart in place when owned partitions hold unread decisions and no batch has
    completed for `stall_seconds` (see monitor/worker/stall.py)."""
    # A restore is progress too.
    idle = time.monotonic() - max(worker.last_progress, worker.partitions.restored_at)
    if not worker.settings.stall_seconds or idle < worker.settings.stall_seconds:
        return
    if worker.partitions.recovering:  # restoring a partition (a large horizon takes long)
        return
    topic = worker.settings.topic_decisions
    owned = sorted(tp.partition for tp in worker.app.consumer.assignment()
                   if tp.topic == topic)
    if not owned:
        return
    ends = await topics.end_offsets(worker.settings, topic, owned)
    applied = {}
    for partition in owned:
        offsets = await worker.partitions.recover(partition)
        applied[partition] = offsets.get(topic, -1)
    waiting = stall.lagging(ends, applied)
    if waiting:
        log.error("stalled: partitions %s hold unread decisions (end offsets %s, applied "
                  "%s) and no batch for %.0f s; restarting in place", waiting, ends,
                  applied, idle)
        worker.restart_in_place()
    worker.last_progress = time.monotonic()  # caught up: look again after another period


async def check_topics(worker: Tended) -> None:
    """Put ragmon's topics back in shape (monitor/worker/provision.py), and read again from
    the beginning every owned input partition whose topic id changed or whose
    committed offset lies beyond the log's end (monitor/worker/rewind.py).

    A broker that lost its log (or a topic deleted and recreated) starts offsets at 0
    under a new topic id, and Faust silently drops every message below the offset it
    last read or committed. The partitions' states are dropped too: their next batch
    restores the checkpoint, finds it gone or behind what this process applied
    (`state_lost`) and counts from the new log, skipping nothing as a redelivery."""
    settings = worker.settings
    changes = await asyncio.to_thread(ensure_topics, settings)
    for change in changes:
        log.warning("topic check: %s", change)
    if changes and worker.app.consumer is not None:  # its new partitions assigned now
        await worker.app.consumer.refresh_metadata()
    names = input_topics(settings)
    ids = await asyncio.to_thread(topic_ids, settings, names)
    changed = {name for name, old in worker.topic_ids.items() if ids.get(name, old) != old}
    worker.topic_ids.update(ids)
    lost = await asyncio.to_thread(lost_offsets, settings, names)
    assigned = [tp for tp in worker.app.consumer.assignment()
                if tp.topic in changed or tp in lost]
    if not assigned:
        return
    if changed:
        log.warning("topics %s have new ids (the broker lost its log, or they were "
                    "recreated)", sorted(changed))
        # The state topic's log is new too: stage two reads it again from its start. Its
        # own check (an end behind the position read) misses a new log that has already
        # grown past the old position, and stage two then kept old checkpoints.
        worker.state_tail.restart()
    for line in (lost[tp] for tp in assigned if tp in lost):
        log.warning("%s", line)
    log.warning("reading partitions %s again from the beginning",
                sorted({tp.partition for tp in assigned}))
    async with worker.folding:
        await worker.partitions.forget({tp.partition for tp in assigned
                                        if tp.topic in worker.topics})
        if worker.spans is not None:  # the span buffers restore from the new log too
            worker.spans.forget({(tp.topic, tp.partition) for tp in assigned
                                 if tp.topic in (settings.topic_spans, settings.otlp_topic)})
        await rewind(worker.app.consumer, assigned)
    # The fold gets a whole stall period from here: the outage before it was no stall, and
    # a restart in place now would start counting again and lose the `state_lost` count.
    worker.last_progress = time.monotonic()


async def log_replaced(worker: Tended, batch: Batch) -> bool:
    """Whether `batch` starts a partition held here at or behind an offset it already
    applied, in a topic that now has a new id. A broker that lost its log starts
    offsets again at 0 and the consumer, its position out of range, reads from there,
    often before `check_topics` (every `TOPIC_CHECK_SECONDS`) has seen the new id:
    folded, the new log's records would be skipped as redeliveries of the old one's.
    Records behind a checkpoint are otherwise a plain redelivery (after a rebalance or
    a restart), so the broker is asked only then."""
    held = worker.partitions.offsets
    behind = sorted({tp.topic for tp, found in batch.records.items()
                     if found and tp.topic in worker.topic_ids
                     and found[0].offset <= held.get(tp.partition, {}).get(tp.topic, -1)})
    if not behind:
        return False
    ids = await worker.retrying(partial(asyncio.to_thread, topic_ids, worker.settings,
                                        tuple(behind)), "reading topic ids")
    changed = [name for name in behind
               if ids.get(name, worker.topic_ids[name]) != worker.topic_ids[name]]
    if changed:
        log.warning("a batch of %s starts behind offsets applied here and the topic has a "
                    "new id (the broker lost its log): not folded; the topic check reads "
                    "it again", changed)
    return bool(changed)
