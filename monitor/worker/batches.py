"""Whole fetches from Faust's consumer handed to the worker as batches, below Faust's
per-event stream.

Faust stays the engine: group membership, partition assignment and the rebalance
callbacks, offset commits (its commit timer and `broker_commit_every`), the fetcher
service and the app's lifecycle. What is cut is its per-message path: the drain loop
(`faust.transport.consumer.Consumer._drain_messages`) turns every record into a
`Message`, dispatches it through the conductor into a channel queue, wraps it in an
`Event` and yields it to an agent's stream, ~200 us of the Faust process per message
(a bare counting agent reads ~4.6k messages/s where aiokafka's `getmany` reads ~140k/s:
`benchmarks/RESULTS.md`). `BatchConsumer` replaces only that loop: it takes what
`_wait_next_records` returns (aiokafka's `getmany`, the records of every active
partition) and hands the records, untouched, to one handler per fetch. The seam is the
drain because everything above it (flow control, which partitions are active, the
commit bookkeeping) is what Faust's own drain uses too.

Guarantees, as with the per-event stream:

- Acknowledged only after the handler says so (`acknowledge`): the handler folds and
  checkpoints first, so a committed offset never passes a checkpoint.
- Back-pressure: the drain gathers the next batch while the handler folds the last
  one, and waits when one batch is ready and not yet taken; aiokafka's prefetch is
  bounded by its fetch sizes, so a slow fold slows reading, not memory.
- Rebalances: `epoch` moves whenever Faust stops the flow (a rebalance begins) or a
  partition is sought (a rewind). A batch fetched in an earlier epoch is not folded
  (`current`): its records are read again, since after a rebalance Faust seeks every
  assigned partition to its committed offset, and a gather that saw the epoch move
  seeks again (its last fetch may hold records from after that seek); a partition
  without a committed offset, which that seek leaves where it is, is sought back to the
  first record dropped (`_seek_uncommitted`). A batch
  folding when a rebalance begins finishes first: the worker's revoke handler waits
  for it. Records read again are skipped by offset where a checkpoint holds them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, NamedTuple

import faust
from aiokafka.errors import IllegalStateError
from faust.transport.drivers.aiokafka import Consumer
from faust.types import TP

__all__ = ["Batch", "BatchApp", "BatchConsumer"]

log = logging.getLogger("ragmon.worker")

# How often a seek to committed offsets is tried when a rebalance changes the assignment
# under it, and the pause between tries (a rebalance settles within a session timeout).
SEEK_ATTEMPTS = 50
SEEK_PAUSE_SECONDS = 0.2


class Batch(NamedTuple):
    """One fetch: aiokafka `ConsumerRecord`s by partition, and the epoch it was read in."""

    records: Mapping[TP, Sequence[Any]]
    epoch: int

    def __len__(self) -> int:
        return sum(len(records) for records in self.records.values())


class BatchConsumer(Consumer):
    """Faust's aiokafka consumer, draining whole fetches into `handler`."""

    handler: Callable[[Batch], Awaitable[None]]  # set by whoever makes the consumer
    epoch = 0
    # Records to gather before a batch is handed over, and the longest the first of them
    # waits for more (the worker's `batch_size`, `batch_seconds`): few checkpoints at a
    # low rate, big batches in a backlog. Set with `handler`.
    gather_records: int
    gather_seconds: float

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._sought: dict[TP, tuple[int, int]] = {}  # by partition: (epoch, offset)
        self._committed_seen: Mapping[Any, int | None] = {}  # the last seek_to_committed's

    def stop_flow(self) -> None:
        self.epoch += 1  # a rebalance begins: what was fetched before is read again
        super().stop_flow()

    async def seek(self, partition: TP, offset: int) -> None:
        self.epoch += 1
        self._sought[partition] = (self.epoch, offset)
        await super().seek(partition, offset)

    async def _seek(self, partition: TP, offset: int) -> None:
        """Every seek in the consumer's own thread. Faust's calls aiokafka from the app's
        thread, while the consumer's thread may be inside a fetch, and aiokafka's fetcher
        is not thread-safe: a fetch crashed the fetcher service (KeyError on a partition
        sought meanwhile, after a broker lost its log), and with it the worker. A
        partition a rebalance took away meanwhile is not sought (aiokafka raises
        IllegalStateError): its new owner seeks it to its committed offset."""
        thread = self._thread

        async def seek() -> None:  # in the consumer's own thread and loop
            try:
                thread.seek(partition, offset)
            except IllegalStateError:
                log.info("%s is no longer assigned here: not sought", partition)

        await thread.call_thread(seek)

    async def _seek_again(self, since: int) -> None:
        """Seek once more every partition sought after epoch `since` (a rewind; its
        offset 0 may not be committed yet)."""
        for tp, (epoch, offset) in list(self._sought.items()):
            if epoch > since:
                await super().seek(tp, offset)

    async def seek_to_committed(self) -> Any:
        """Faust's seek of every assigned partition to its committed offset, tried again
        when the assignment changed under it: aiokafka takes the assignment, awaits each
        partition's committed offset, then seeks, and a rebalance meanwhile made that
        seek raise IllegalStateError on a partition no longer assigned. Escaping, it
        crashed Faust's fetcher service and stopped the worker (a second worker joining,
        on the embedded broker). The new assignment is sought on the next try."""
        for _ in range(SEEK_ATTEMPTS - 1):
            try:
                return await self._seek_to_committed_once()
            except IllegalStateError as exc:
                log.info("seeking to committed offsets: %s (the assignment changed "
                         "meanwhile); seeking again", exc)
                await asyncio.sleep(SEEK_PAUSE_SECONDS)
        return await self._seek_to_committed_once()

    async def _seek_to_committed_once(self) -> Any:
        self._committed_seen = await super().seek_to_committed()
        return self._committed_seen

    async def _seek_uncommitted(self, *dropped: Mapping[TP, Sequence[Any]], since: int) -> None:
        """Seek back to the first dropped record every assigned partition that Faust's
        seek left where it was: aiokafka's `seek_to_committed` does not move a partition
        whose committed offset is none or 0 (a new partition, a fresh group, a rewind),
        and its position was past the dropped records: they were never read again (200
        traces uncounted after a broker lost its log, on Apache Kafka)."""
        first: dict[TP, int] = {}
        for records in dropped:
            for tp, found in records.items():
                if found:
                    first[tp] = min(found[0].offset, first.get(tp, found[0].offset))
        assigned = self.assignment()
        for tp, offset in first.items():
            committed = self._committed_seen.get(tp)
            if tp in assigned and not committed and self._sought.get(tp, (0,))[0] <= since:
                await super().seek(tp, 0 if committed == 0 else offset)

    async def refresh_metadata(self) -> None:
        """Ask the broker for its metadata now. aiokafka asks on its own only every
        `consumer_metadata_max_age_ms` (5 minutes), or after an error: partitions the
        topic check has just added (a topic a client auto-created with one partition)
        stayed unassigned until then, their traces unread (seen on Apache Kafka)."""
        thread = self._thread

        async def force() -> None:  # in the consumer's own thread and loop
            await thread._ensure_consumer()._client.force_metadata_update()

        await thread.call_thread(force)

    def reading(self, topic: str) -> tuple[int, dict[int, tuple[int | None, int | None]]]:
        """`topic`'s partition count (0 if unknown), and for each of its partitions
        assigned here: its high watermark as last fetched (None before a fetch) and the
        offset the last seek to committed put it at (None: nothing committed)."""
        found: dict[int, tuple[int | None, int | None]] = {}
        for tp in self.assignment():
            if tp.topic == topic:
                try:
                    highwater: int | None = self.highwater(tp)
                except AssertionError:  # aiokafka's: no longer assigned (a rebalance)
                    continue
                found[tp.partition] = (highwater, self._committed_seen.get(tp))
        return self.topic_partitions(topic) or 0, found

    async def log_starts(self, topic: str, partitions: list[int]) -> dict[int, int]:
        """The first offset still in the log of each of `topic`'s `partitions` (where a
        group without a committed offset starts reading)."""
        found = await self.earliest_offsets(*(TP(topic, p) for p in partitions))
        return {tp.partition: offset for tp, offset in found.items()}

    def current(self, batch: Batch) -> bool:
        """Whether `batch` was read since the last rebalance or seek."""
        return batch.epoch == self.epoch

    def acknowledge(self, tp: TP, offsets: Sequence[int]) -> None:
        """Mark a partition's folded offsets (ascending) as acknowledged, for Faust's next
        commit. Offsets between them that hold no record (compaction, transaction
        markers) are acknowledged with them, and so is a gap right after the committed
        offset, as Faust's own drain does with `_add_gap`: a gap would hold commits back
        for good."""
        if not offsets or not self.app.topics.acks_enabled_for(tp.topic):
            return
        first, last = offsets[0], offsets[-1]
        committed = self._committed_offset[tp]
        acked = self._acked[tp]
        if committed is not None and committed < first and not acked:
            first = committed
        index = self._acked_index[tp]
        fresh = [offset for offset in range(first, last + 1) if offset not in index]
        index.update(fresh)
        acked.extend(fresh)
        self._n_acked += len(fresh)

    async def _drain_messages(self, fetcher: Any) -> None:
        """Faust's fetcher loop: gather the next batch while the last one folds (one
        batch waits at most: back-pressure), commit every `commit_every`."""
        consumer_stopped = self._stopped.is_set
        fetcher_stopped = fetcher._stopped.is_set
        ready: asyncio.Queue[Batch] = asyncio.Queue(maxsize=1)
        taker = asyncio.ensure_future(self._take(ready))
        try:
            while not (consumer_stopped() or fetcher_stopped()):
                batch = await self._gather()
                if batch is not None:
                    await _put(ready, batch, taker)
        except self.consumer_stopped_errors:
            if self.transport.app.should_stop:
                log.info("broker stopped the consumer; shutting down")
                return
            raise
        except asyncio.CancelledError:
            if self.transport.app.should_stop:
                return
            raise
        finally:
            taker.cancel()

    async def _take(self, ready: asyncio.Queue[Batch]) -> None:
        while True:
            await self.handler(await ready.get())
            commit_every = self._commit_every
            if commit_every is not None and self._n_acked >= commit_every:
                self._n_acked = 0
                await self.commit()

    async def _gather(self) -> Batch | None:
        """Fetches of one epoch, until `gather_records` or `gather_seconds` after the
        first record; `None` if nothing came or a rebalance began meanwhile."""
        loop = asyncio.get_running_loop()
        records: dict[TP, list[Any]] = {}
        epoch, count, deadline = self.epoch, 0, 0.0
        while count < self.gather_records:
            wait = 1.0 if not count else deadline - loop.time()
            if wait <= 0:
                break
            fetched = await self._fetch(min(wait, 1.0))
            if self.epoch != epoch:
                # This fetch may hold records from after the rebalance's or the rewind's
                # seek (Faust resumes the flow after seeking): read them again.
                await self.perform_seek()
                await self._seek_again(since=epoch)
                await self._seek_uncommitted(records, fetched, since=epoch)
                return None
            if self.should_stop:
                return None
            if not fetched:
                if not count:
                    return None
                continue
            if not count:
                deadline = loop.time() + self.gather_seconds
            for tp, found in fetched.items():
                records.setdefault(tp, []).extend(found)
                count += len(found)
        return Batch(records, epoch)

    async def _fetch(self, timeout: float) -> dict[TP, list[Any]]:
        """One fetch of the active partitions (as Faust's `getmany`, without a `Message`
        per record)."""
        fetched, active = await self._wait_next_records(timeout)
        await asyncio.sleep(0)  # Faust's drain does too: a busy fetch loop must yield
        if not fetched:
            return {}
        if not self.flow_active:
            await self.perform_seek()  # as Faust's getmany: flow stopped mid-fetch
            await self._seek_uncommitted(fetched, since=self.epoch)
            return {}
        kept: dict[TP, list[Any]] = {}
        for tp, found in fetched.items():
            if found and (active is None or tp in active or tp in self._buffered_partitions):
                self.app.monitor.track_tp_end_offset(tp, self.highwater(tp))
                self._read_offset[tp] = found[-1].offset
                kept[tp] = found
        return kept


class BatchApp(faust.App):
    """Faust's app with a consumer that hands whole fetches to `take` (set before the
    consumer is first used)."""

    take: Callable[[Batch], Awaitable[None]]
    gather: tuple[int, float]  # records, seconds

    def _new_consumer(self) -> BatchConsumer:
        consumer = BatchConsumer(self.transport, callback=self.topics.on_message,
                                 on_partitions_revoked=self._on_partitions_revoked,
                                 on_partitions_assigned=self._on_partitions_assigned,
                                 beacon=self.beacon, loop=self.loop)
        consumer.handler = self.take
        consumer.gather_records, consumer.gather_seconds = self.gather
        return consumer


async def _put(ready: asyncio.Queue[Batch], batch: Batch, taker: asyncio.Future[None]) -> None:
    """Queue `batch` for `taker`, or raise what ended it (it folds until cancelled)."""
    put = asyncio.ensure_future(ready.put(batch))
    await asyncio.wait((put, taker), return_when=asyncio.FIRST_COMPLETED)
    if not put.done():
        put.cancel()
        taker.result()  # raises
        raise RuntimeError("the batch taker ended")
