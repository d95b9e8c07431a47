"""The `otlp` intake in the worker: OTLP messages from the Collector's topic in, one
decision message per OTel trace out to the decisions topic, where the same fold as for
any producer's decision takes it (validation, de-duplication, windows, detection).

Two steps, each a topic kind of `Worker.take`:

1. `forward` (records of `otlp_topic`): decode each message, content left behind
   (`monitor/ingest/otlp.py`); a message that is not OTLP is dead-lettered with its
   reason and source offset, and no bytes of it. Every trace's spans become a fragment,
   sent to partition `crc32(trace id) % partitions` of `topic_spans` (fragments of one
   batch and partition in one record): the spans of a trace meet in one partition
   whatever partitioner the exporter used (its default does not key by trace). With
   them, every spans partition gets the forwarder's `Marks` (how far each otlp partition
   read here is forwarded, and whether to its end): the buffers' watermark, so that a
   partition read ahead of another in a backlog does not take traces whose other spans
   wait in the slower one (monitor/ingest/spanbuffer.py). A
   message keyed by its one trace's id (the exporter's `partition_traces_by_id: true`)
   is already where all of its trace's spans come: its fragment is merged into the
   buffer of its otlp partition at once, which step 2 then does for it here.
2. `assemble` (records of `topic_spans`): each partition's span buffer
   (`monitor/ingest/spanbuffer.py`) merges its fragments; each trace that is ready is
   assembled, validated, and produced to `topic_decisions` keyed by its trace id (so
   labels keyed the same meet it), or dead-lettered (contract violations, with the
   source of the message that brought its decision span). Then the buffer is
   checkpointed to `topic_state` (key `<app>:<topic>:<partition>`, the buffer's topic:
   `topic_spans`, or `otlp_topic` for keyed messages) with the last offset merged, and
   only then is the batch acknowledged.

Exact under at-least-once: a crash before the checkpoint merges the fragments again
from the checkpoint (offsets at or before it are skipped); a decision produced twice
(produced, then a crash before the checkpoint) carries the same trace id and is folded
once by the decisions topic's de-duplication. A fragment forwarded twice (a crash
after forwarding, before the commit) is merged once: the buffer knows its source.
While a buffer's partition is quiet, `tick` moves its buffer's clock on, from the newest
span end it has seen, with the wall clock, so that the last traces before a pause are
assembled.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NamedTuple, cast

import msgspec

from monitor.export.snapshot import Health
from monitor.ingest.parse import Rejection
from monitor.ingest.spanbuffer import Marks
from monitor.ingest.spans import Assembled, SpanIntake, forward, records_of, spans_record
from monitor.settings import Settings
from monitor.worker import topics
from monitor.worker.batches import BatchConsumer
from monitor.worker.produce import send_keyed
from monitor.worker.wiring import raw_topic

__all__ = ["SpanStage", "Where"]

log = logging.getLogger("ragmon.worker")


class _Checkpoint(msgspec.Struct):
    applied: int        # the last spans offset merged
    buffer: bytes       # `SpanBuffer.to_bytes`


_read_checkpoint = msgspec.msgpack.Decoder(_Checkpoint)
DeadLetter = Callable[[tuple[str, int, int], bytes, Rejection], Awaitable[None]]


class _Held:
    def __init__(self, intake: SpanIntake, applied: int) -> None:
        self.intake = intake
        self.applied = applied
        self.quiet_since = time.monotonic()  # the last spans merged (or the restore)


Where = tuple[str, int]  # a buffer's (topic, partition): of topic_spans, or of otlp_topic


class _Source:
    """An otlp partition as forwarded by this process: the offset after the last record
    forwarded, and the newest span end forwarded (unix ns, 0 before any)."""

    def __init__(self) -> None:
        self.next: int | None = None
        self.newest = 0


class _Step(NamedTuple):
    """One buffer's part of a batch (or of a quiet tick): what to deliver, and the
    offset its checkpoint holds."""

    where: Where
    held: _Held
    assembled: list[Assembled]
    applied: int


class SpanStage:
    def __init__(self, settings: Settings, app: Any, health: Health,
                 dead_letter: DeadLetter) -> None:
        self.settings = settings
        self.spans_topic = raw_topic(app, settings.topic_spans)
        self.decisions_topic = raw_topic(app, settings.topic_decisions)
        self.state_topic = raw_topic(app, settings.topic_state)
        self.consumer: Callable[[], BatchConsumer] = lambda: cast(BatchConsumer, app.consumer)
        self.health = health
        self.dead_letter = dead_letter
        self.held: dict[Where, _Held] = {}
        # Messages read from otlp_topic, by outcome (read, rejected); this process's.
        self.messages: Counter[str] = Counter(read=0, rejected=0)
        self.sources: dict[int, _Source] = {}  # otlp partitions forwarded from, by number
        # A buffer's checkpoint, its wrapper and a record batch's framing in one request.
        self.checkpoint_limit = settings.state_max_bytes - 64 * 1024

    def state_key(self, where: Where) -> bytes:
        return f"{self.settings.app_id}:{where[0]}:{where[1]}".encode()

    def state_partition(self, where: Where) -> int:
        """The state topic's partition of a buffer's checkpoint (otlp_topic may have
        more partitions than ragmon's own topics: it is read as the Collector made it)."""
        return where[1] % self.settings.partitions

    async def marks(self) -> Marks:
        """What the spans buffers may assume of the otlp partitions read here: the newest
        span end forwarded from each, and whether it is read to its end (its high
        watermark reached by what was forwarded or, before any record here, by where
        reading it starts: the group's committed offset, else the log's first)."""
        topic, consumer = self.settings.otlp_topic or "", self.consumer()
        partitions, assigned = consumer.reading(topic)
        for partition in assigned:
            self.sources.setdefault(partition, _Source())
        unknown = [p for p, (_, committed) in assigned.items()
                   if committed is None and self.sources[p].next is None]
        starts = await consumer.log_starts(topic, unknown) if unknown else {}
        read = []
        for partition, (highwater, committed) in sorted(assigned.items()):
            source = self.sources[partition]
            if source.next is None:
                source.next = committed if committed is not None else starts.get(partition)
            at_end = highwater is not None and source.next is not None and source.next >= highwater
            read.append((partition, source.newest, at_end))
        return Marks(partitions, read, time.time())

    async def forward(self, records: Sequence[Any]) -> None:
        """Step 1: OTLP messages -> fragments, re-keyed by trace id into `topic_spans`;
        those of a message keyed by its one trace's id (`partition_traces_by_id: true`)
        are merged here, into the buffer of their otlp partition, and checkpointed as in
        step 2 (no second hop: ~25-30 us a decision less; RESULTS.md). Decoded here:
        handing the messages to the states process and the fragments back cost more than
        the compiled decoding itself (~25 us a request)."""
        sources = [(str(r.topic), int(r.partition), int(r.offset)) for r in records]
        done = forward([r.value if isinstance(r.value, bytes) else b"" for r in records],
                       sources, self.settings.partitions, self.settings.otlp_max_message_bytes,
                       [r.key if isinstance(r.key, bytes) else None for r in records])
        for index, reason, detail in done.rejected:
            await self.dead_letter(sources[index], b"", Rejection(reason, detail, b"", 0))
        for record in records:
            source = self.sources.setdefault(int(record.partition), _Source())
            source.next = max(source.next or 0, int(record.offset) + 1)
        for partition, newest in done.newest.items():
            self.sources[partition].newest = max(self.sources[partition].newest, newest)
        marks = await self.marks()
        await self._send(records_of(done.fragments, self.settings.partitions, marks))
        self.messages.update(read=len(records), rejected=len(done.rejected))
        if done.local:
            await self._restore_all(set(done.local))
            work: list[_Step] = []
            for where, fragments in sorted(done.local.items()):
                held = self.held[where]
                fresh = [fragment for fragment in fragments if fragment.source[2] > held.applied]
                self.health.redelivered_skipped += len(fragments) - len(fresh)
                if fresh:
                    held.intake.merge(fresh)
                    held.quiet_since = time.monotonic()
                    work.append(_Step(where, held, held.intake.take(), fresh[-1].source[2]))
            await self._deliver(work)

    async def remark(self) -> None:
        """Send the marks again, alone (every second, from `tick_spans`): a partition
        read to its end since the last batch, newly assigned here, or still at its end
        (a word that is not repeated stops holding: `SpanBuffer.heard`)."""
        await self._send(records_of({}, self.settings.partitions, await self.marks()))

    async def _send(self, chunks: dict[int, list[bytes]]) -> None:
        deliveries = [await self.spans_topic.send(key=None, value=chunk, partition=partition)
                      for partition, found in sorted(chunks.items()) for chunk in found]
        await asyncio.gather(*deliveries)

    async def assemble(self, records: dict[int, Sequence[Any]]) -> None:
        """Step 2: fragments -> span buffers -> decisions; checkpoints after delivery
        (every partition's decisions sent at once, then every checkpoint)."""
        topic = self.settings.topic_spans
        await self._restore_all({(topic, partition) for partition in records})
        work: list[_Step] = []
        for partition, found in sorted(records.items()):
            held = self.held[(topic, partition)]
            fresh = [record for record in found if record.offset > held.applied]
            self.health.redelivered_skipped += len(found) - len(fresh)
            if not fresh:
                continue
            waiting = len(held.intake.buffer)
            merged = self._merge(partition, held, fresh)
            taken = held.intake.take()
            # Marks alone (every second from every worker) that took no trace are not
            # checkpointed: read again after a crash, or lost to a commit past them,
            # they only ever hold the buffer back until the next marks.
            if merged or len(held.intake.buffer) != waiting:
                work.append(_Step((topic, partition), held, taken, fresh[-1].offset))
        await self._deliver(work)

    def _merge(self, partition: int, held: _Held, fresh: list[Any]) -> bool:
        """Merge the records' fragments and marks; whether any record had fragments."""
        merged = False
        for record in fresh:
            try:
                found = spans_record(record.value)
            except (msgspec.DecodeError, msgspec.ValidationError, TypeError):
                self.health.worker_errors += 1
                log.error("%s/%d offset %d: not a spans record; skipped",
                          self.settings.topic_spans, partition, record.offset)
                continue
            held.intake.merge(found.fragments)
            merged = merged or bool(found.fragments)
            if found.marks is not None:
                held.intake.mark(found.marks)
        if merged:  # marks alone come every second: not what quiet means
            held.quiet_since = time.monotonic()
        return merged

    async def tick(self, assigned: set[Where]) -> None:
        """Assemble what is due in quiet buffers: a buffer without records for
        `otlp_grace_seconds` moves its clock on by the wall time since, from the newest
        span end it has seen (`SpanBuffer.quiet`). A partition
        assigned here whose buffer is not held (a rebalance moved it, or gave it back)
        is restored first: its waiting traces are due whether or not records follow."""
        await self._restore_all(assigned - set(self.held))
        now = time.monotonic()
        work: list[_Step] = []
        for where in sorted(assigned & set(self.held)):
            held = self.held[where]
            quiet = now - held.quiet_since
            buffer = held.intake.buffer
            if len(buffer) == 0 or quiet < self.settings.otlp_grace_seconds:
                continue
            held.quiet_since = now
            waiting = len(buffer)
            due = held.intake.take(quiet=quiet)
            if len(buffer) < waiting:  # traces taken (counted): checkpointed with the rest
                work.append(_Step(where, held, due, held.applied))
        await self._deliver(work)

    def forget(self, revoked: set[Where]) -> None:
        """Drop the buffers of partitions no longer assigned (their new owner restores)."""
        for where in revoked:
            self.held.pop(where, None)

    def counts(self) -> dict[str, int]:
        """The buffers' counters (traces_*, spans_*, content_fields_dropped) and the
        traces waiting, summed over the buffers held; with the messages read here."""
        total: Counter[str] = Counter()
        for held in self.held.values():
            total.update(held.intake.buffer.counts)
            total["pending"] += len(held.intake.buffer)
        total.update({f"messages_{key}": n for key, n in self.messages.items()})
        return dict(total)

    async def _deliver(self, work: list[_Step]) -> None:
        """Dead-letter and produce the decisions of every step, then write every step's
        checkpoint, each once all are delivered. If anything fails, the buffers of the
        steps are dropped (traces they took may not have been delivered): the retry
        restores them from their last checkpoints."""
        try:
            keyed = []
            for step in work:
                for item in step.assembled:
                    if item.rejection is not None:
                        await self.dead_letter(item.source or ("", -1, -1),
                                               item.trace_id.encode(), item.rejection)
                    elif item.raw is not None:
                        keyed.append((item.key.encode(), item.raw))
            await send_keyed(self.decisions_topic, keyed)
            await asyncio.gather(*[await self.state_topic.send(
                key=self.state_key(step.where), partition=self.state_partition(step.where),
                value=msgspec.msgpack.encode(_Checkpoint(
                    step.applied, step.held.intake.buffer.to_bytes(self.checkpoint_limit))))
                for step in work])
        except BaseException:
            for step in work:
                self.held.pop(step.where, None)
            raise
        for step in work:
            step.held.applied = step.applied
            self.health.checkpoints += 1

    async def _restore_all(self, wheres: set[Where]) -> None:
        missing = sorted(wheres - set(self.held))
        if missing:
            restored = await asyncio.gather(*(self._restore(where) for where in missing))
            self.held.update(zip(missing, restored, strict=True))

    async def _restore(self, where: Where) -> _Held:
        key = self.state_key(where)
        found = await topics.read_topic(self.settings, self.settings.topic_state,
                                        self.state_partition(where), lambda k: k == key)
        intake = SpanIntake(self.settings, marked=where[0] == self.settings.topic_spans)
        blob = found.get(key)
        if blob is None:
            log.info("span buffer %s/%d: new", *where)
            return _Held(intake, -1)
        checkpoint = _read_checkpoint.decode(blob)
        intake.buffer.restore(checkpoint.buffer)
        log.info("span buffer %s/%d: restored at offset %d, %d traces waiting", *where,
                 checkpoint.applied, len(intake.buffer))
        return _Held(intake, checkpoint.applied)
