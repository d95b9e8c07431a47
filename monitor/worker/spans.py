"""The `otlp` intake in the worker: OTLP messages from the Collector's topic in, one
decision message per OTel trace out to the decisions topic, where the same fold as for
any producer's decision takes it (validation, de-duplication, windows, detection).

Two steps, each a topic kind of `Worker.take`:

1. `forward` (records of `otlp_topic`): decode each message, content left behind
   (`monitor/ingest/otlp.py`); a message that is not OTLP is dead-lettered with its
   reason and source offset, and no bytes of it. Every trace's spans become a fragment,
   sent to partition `crc32(trace id) % partitions` of `topic_spans` (fragments of one
   batch and partition in one record): the spans of a trace meet in one partition
   whatever partitioner the exporter used (its default does not key by trace).
2. `assemble` (records of `topic_spans`): each partition's span buffer
   (`monitor/ingest/spanbuffer.py`) merges its fragments; each trace that is ready is
   assembled, validated, and produced to `topic_decisions` keyed by its trace id (so
   labels keyed the same meet it), or dead-lettered (contract violations, with the
   source of the message that brought its decision span). Then the buffer is
   checkpointed to `topic_state` (key `<app>:<topic_spans>:<partition>`) with the last
   offset merged, and only then is the batch acknowledged.

Exact under at-least-once: a crash before the checkpoint merges the fragments again
from the checkpoint (offsets at or before it are skipped); a decision produced twice
(produced, then a crash before the checkpoint) carries the same trace id and is folded
once by the decisions topic's de-duplication. A fragment forwarded twice (a crash
after forwarding, before the commit) is merged once: the buffer knows its source.
While a spans partition is quiet, `tick` moves its buffer's clock on with the wall
clock, so that the last traces before a pause are assembled.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NamedTuple

import msgspec

from monitor.export.snapshot import Health
from monitor.ingest.parse import Rejection
from monitor.ingest.spans import Assembled, SpanIntake, forward, fragments_of
from monitor.settings import Settings
from monitor.worker import topics
from monitor.worker.produce import send_keyed

__all__ = ["SpanStage"]

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
        self.quiet_since = time.monotonic()  # the last record merged (or the restore)


class _Step(NamedTuple):
    """One partition's part of a batch (or of a quiet tick): what to deliver, and the
    spans offset its checkpoint holds."""

    partition: int
    held: _Held
    assembled: list[Assembled]
    applied: int


class SpanStage:
    def __init__(self, settings: Settings, spans_topic: Any, decisions_topic: Any,
                 state_topic: Any, health: Health, dead_letter: DeadLetter) -> None:
        self.settings = settings
        self.spans_topic = spans_topic
        self.decisions_topic = decisions_topic
        self.state_topic = state_topic
        self.health = health
        self.dead_letter = dead_letter
        self.held: dict[int, _Held] = {}
        # Messages read from otlp_topic, by outcome (read, rejected); this process's.
        self.messages: Counter[str] = Counter(read=0, rejected=0)

    def state_key(self, partition: int) -> bytes:
        return f"{self.settings.app_id}:{self.settings.topic_spans}:{partition}".encode()

    async def forward(self, records: Sequence[Any]) -> None:
        """Step 1: OTLP messages -> fragments, re-keyed by trace id into `topic_spans`.
        Decoded here: handing the messages to the states process and the fragments back
        cost more than the compiled decoding itself (~25 us a request; RESULTS.md)."""
        sources = [(str(r.topic), int(r.partition), int(r.offset)) for r in records]
        done = forward([r.value if isinstance(r.value, bytes) else b"" for r in records],
                       sources, self.settings.partitions, self.settings.otlp_max_message_bytes)
        for index, reason, detail in done.rejected:
            await self.dead_letter(sources[index], b"", Rejection(reason, detail, b"", 0))
        deliveries = [await self.spans_topic.send(key=None, value=chunk, partition=partition)
                      for partition, chunks in sorted(done.chunks.items()) for chunk in chunks]
        await asyncio.gather(*deliveries)
        self.messages.update(read=len(records), rejected=len(done.rejected))

    async def assemble(self, records: dict[int, Sequence[Any]]) -> None:
        """Step 2: fragments -> span buffers -> decisions; checkpoints after delivery
        (every partition's decisions sent at once, then every checkpoint)."""
        await self._restore_all(set(records))
        work: list[_Step] = []
        for partition, found in sorted(records.items()):
            held = self.held[partition]
            fresh = [record for record in found if record.offset > held.applied]
            self.health.redelivered_skipped += len(found) - len(fresh)
            if fresh:
                self._merge(partition, held, fresh)
                work.append(_Step(partition, held, held.intake.take(), fresh[-1].offset))
        await self._deliver(work)

    def _merge(self, partition: int, held: _Held, fresh: list[Any]) -> None:
        for record in fresh:
            try:
                fragments = fragments_of(record.value)
            except (msgspec.DecodeError, msgspec.ValidationError, TypeError):
                self.health.worker_errors += 1
                log.error("%s/%d offset %d: not a spans record; skipped",
                          self.settings.topic_spans, partition, record.offset)
                continue
            held.intake.merge(fragments)
        held.quiet_since = time.monotonic()

    async def tick(self, assigned: set[int]) -> None:
        """Assemble what is due in quiet partitions: a partition without records for
        `otlp_grace_seconds` moves its buffer's clock on by the wall time since."""
        now = time.monotonic()
        work: list[_Step] = []
        for partition in sorted(assigned & set(self.held)):
            held = self.held[partition]
            quiet = now - held.quiet_since
            buffer = held.intake.buffer
            if len(buffer) == 0 or quiet < self.settings.otlp_grace_seconds:
                continue
            held.quiet_since = now
            waiting = len(buffer)
            due = held.intake.take(buffer.clock + quiet)
            if len(buffer) < waiting:  # traces taken (counted): checkpointed with the rest
                work.append(_Step(partition, held, due, held.applied))
        await self._deliver(work)

    def forget(self, partitions: set[int]) -> None:
        """Drop the buffers of partitions no longer assigned (their new owner restores)."""
        for partition in partitions:
            self.held.pop(partition, None)

    def counts(self) -> dict[str, int]:
        """The buffers' counters (traces_*, spans_*, content_fields_dropped) and the
        traces waiting, summed over the partitions held; with the messages read here."""
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
                key=self.state_key(step.partition), partition=step.partition,
                value=msgspec.msgpack.encode(_Checkpoint(
                    step.applied, step.held.intake.buffer.to_bytes())))
                for step in work])
        except BaseException:
            for step in work:
                self.held.pop(step.partition, None)
            raise
        for step in work:
            step.held.applied = step.applied
            self.health.checkpoints += 1

    async def _restore_all(self, partitions: set[int]) -> None:
        missing = sorted(partitions - set(self.held))
        if missing:
            restored = await asyncio.gather(*(self._restore(p) for p in missing))
            self.held.update(zip(missing, restored, strict=True))

    async def _restore(self, partition: int) -> _Held:
        key = self.state_key(partition)
        found = await topics.read_topic(self.settings, self.settings.topic_state, partition,
                                        lambda k: k == key)
        intake = SpanIntake(self.settings)
        blob = found.get(key)
        if blob is None:
            log.info("spans partition %d: new", partition)
            return _Held(intake, -1)
        checkpoint = _read_checkpoint.decode(blob)
        intake.buffer.restore(checkpoint.buffer)
        log.info("spans partition %d: restored at offset %d, %d traces waiting", partition,
                 checkpoint.applied, len(intake.buffer))
        return _Held(intake, checkpoint.applied)
