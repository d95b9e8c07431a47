"""Reading topics without a consumer group (aiokafka): checkpoints, references, end
offsets. The worker's own consumption goes through Faust; these reads are one-off."""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.conn import create_conn
from aiokafka.errors import KafkaError

from monitor.settings import Settings
from monitor.worker.connection import ConnectionProblem, aiokafka_options

__all__ = ["Tail", "aiokafka_options", "check_connection", "end_offsets", "read_topic"]

log = logging.getLogger(__name__)
END_SECONDS = 8.0  # the longest a tail waits for its end offsets (Tail._rewind_if_behind)


async def check_connection(settings: Settings) -> None:
    """Connect to a bootstrap server (TLS handshake and SASL authentication included) or
    raise ConnectionProblem naming the servers and the cause, in one line.

    A broker that refuses or does not answer may be starting: tried again until
    `connect_timeout_seconds`. A certificate or a password that is refused will not get
    better: said at once. Clients otherwise hide the cause ("Unable to bootstrap")."""
    options = aiokafka_options(settings)
    del options["bootstrap_servers"]
    servers = settings.bootstrap_servers.split(",")
    deadline = time.monotonic() + settings.connect_timeout_seconds
    cause = "no answer"
    while True:
        for server in servers:
            host, _, port = server.strip().rpartition(":")
            left = max(deadline - time.monotonic(), 0.1)
            try:
                conn = await asyncio.wait_for(create_conn(
                    host or server, int(port or 9092), request_timeout_ms=int(left * 1000),
                    **options), timeout=left)
            except (TimeoutError, OSError, KafkaError) as exc:
                cause = _cause(exc)
                if _permanent(exc):
                    raise ConnectionProblem(
                        f"cannot connect to Kafka at {settings.bootstrap_servers} "
                        f"({settings.security_protocol}): {cause}") from None
                continue
            conn.close()
            return
        if time.monotonic() >= deadline:
            raise ConnectionProblem(
                f"cannot connect to Kafka at {settings.bootstrap_servers} within "
                f"{settings.connect_timeout_seconds:g} s (connect_timeout_seconds): {cause}")
        await asyncio.sleep(min(0.5, max(deadline - time.monotonic(), 0)))


def _permanent(exc: BaseException) -> bool:
    """TLS and authentication failures; not a refused or silent socket."""
    return isinstance(exc, ssl.SSLError) or "Authentication" in type(exc).__name__ \
        or "authentication" in str(exc).lower()


def _cause(exc: BaseException) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return "timed out"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"TLS certificate not trusted ({exc.verify_message})"
    text = str(exc) or type(exc).__name__
    return " ".join(text.split())


async def read_topic(settings: Settings, topic: str, partition: int,
                     keep: Callable[[bytes], bool] | None = None) -> dict[bytes, bytes]:
    """The newest value per key (of the keys `keep` accepts) in one partition of a topic;
    a key whose newest value is a tombstone (None) is left out."""
    consumer = AIOKafkaConsumer(**aiokafka_options(settings), group_id=None,
                                enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    tp = TopicPartition(topic, partition)
    newest: dict[bytes, bytes] = {}
    try:
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        read = 0
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            records = (await consumer.getmany(tp, timeout_ms=300)).get(tp, [])
            read += len(records)
            for record in records:
                if record.key is not None and (keep is None or keep(record.key)):
                    newest[record.key] = record.value
            # Stop on an empty poll at or past the end: the embedded broker reports the
            # end as the start of the last batch, so "position >= end" alone is early.
            position = await consumer.position(tp)
            if not records and position >= end:
                log.info("%s/%d: read %d records up to %d", topic, partition, read,
                         position)
                return {k: v for k, v in newest.items() if v is not None}
        raise RuntimeError(f"{topic}/{partition} not read within 120 s")
    finally:
        await consumer.stop()


async def end_offsets(settings: Settings, topic: str, partitions: list[int]) -> dict[int, int]:
    consumer = AIOKafkaConsumer(**aiokafka_options(settings), group_id=None,
                                enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        ends = await consumer.end_offsets(tps)
        return {tp.partition: offset for tp, offset in ends.items()}
    finally:
        await consumer.stop()


class Tail:
    """Follows every partition of a topic without a consumer group, from the beginning:
    each `poll` returns the records read since the last, (key, value) in the order read
    (per partition: the order written), those without a key or a value left out.

    A partition whose end falls behind the position read (an in-memory broker restarted
    with an empty log; Tansu then returns no records rather than an out-of-range error)
    is read again from its beginning."""

    def __init__(self, settings: Settings, topic: str, partitions: int,
                 check_seconds: float = 5.0) -> None:
        self.settings = settings
        self.topic = topic
        self.partitions = partitions
        self.check_seconds = check_seconds
        self._consumer: AIOKafkaConsumer | None = None
        self._checked = 0.0
        # Where each partition was read up to. A consumer that failed (a broker away)
        # goes on from there: read again from the beginning, a partition's older
        # records came back first, and its reader took them as the newest for a while
        # (a checkpoint merged back to an older one: the exported counters went down).
        self._positions: dict[int, int] = {}
        self._until: dict[int, int] = {}  # the ends to read up to before a poll returns
        self._renew = False  # `restart` asked: the next poll reads from the beginning

    async def poll(self, max_polls: int = 50) -> list[tuple[bytes, bytes]]:
        read: list[tuple[bytes, bytes]] = []
        if self._renew:
            self._renew = False
            self._positions.clear()
            await self._drop()
        try:
            if self._consumer is None:
                await self._start()
            assert self._consumer is not None
            deadline = time.monotonic() + END_SECONDS
            polls = 0
            while True:
                batches = await self._consumer.getmany(timeout_ms=10, max_records=2_000)
                for tp, records in batches.items():
                    read += [(record.key, record.value) for record in records
                             if record.key is not None and record.value is not None]
                    if records:
                        self._positions[tp.partition] = records[-1].offset + 1
                polls += 1
                if self._behind() and time.monotonic() < deadline:
                    continue  # catching up with the ends taken at the start
                if any(batches.values()):
                    if polls < max_polls:
                        continue
                    break
                self._until = {}
                await self._rewind_if_behind()
                break
        except Exception:
            await self._drop()  # the next poll goes on from the positions read
            raise
        return read

    async def _start(self) -> None:
        consumer = AIOKafkaConsumer(**aiokafka_options(self.settings), group_id=None,
                                    enable_auto_commit=False, auto_offset_reset="earliest")
        await consumer.start()
        self._consumer = consumer
        tps = [TopicPartition(self.topic, p) for p in range(self.partitions)]
        consumer.assign(tps)
        for partition, offset in self._positions.items():
            consumer.seek(TopicPartition(self.topic, partition), offset)
        # The first poll reads up to the ends as they are now: a reader that returned
        # at its first empty fetch had merged only some partitions' newest checkpoints
        # (after a restart in place: counters exported lower than before it).
        ends = await asyncio.wait_for(consumer.end_offsets(tps), timeout=END_SECONDS)
        self._until = {tp.partition: end for tp, end in ends.items()}

    def _behind(self) -> bool:
        """Whether a partition has not been read up to its end taken at the start."""
        return any(self._positions.get(partition, 0) < end
                   for partition, end in self._until.items())

    async def _rewind_if_behind(self) -> None:
        consumer = self._consumer
        if consumer is None or time.monotonic() - self._checked < self.check_seconds:
            return
        self._checked = time.monotonic()
        tps = sorted(consumer.assignment())
        # Bounded well below aiokafka's 40 s request timeout: after a broker restart the
        # topics may be missing for a while, and stage two (every second) waits on this.
        ends = await asyncio.wait_for(consumer.end_offsets(tps), timeout=END_SECONDS)
        for tp in tps:
            # Tansu reports the end as the last batch's start: one record behind is normal.
            # The position is the one read here: aiokafka's `position` waits (40 s at a
            # time, for ever on a stopped consumer) for a partition without a leader.
            if ends[tp] < self._positions.get(tp.partition, 0) - 1:
                log.warning("%s/%d: end offset %d is behind the position read: reading it "
                            "again from the beginning", tp.topic, tp.partition, ends[tp])
                self._positions.pop(tp.partition, None)
                await consumer.seek_to_beginning(tp)

    def restart(self) -> None:
        """Make the next poll read every partition again from its beginning (a new log:
        the broker lost the old one). Only a flag: a poll under way (stage two, every
        second) keeps its consumer; stopped beneath it, a wait for a position never
        ended and stage two with it (no snapshot again, scrapes timed out)."""
        self._renew = True

    async def stop(self) -> None:
        """Stop reading; a later poll reads every partition again from its beginning."""
        self._positions.clear()
        await self._drop()

    async def _drop(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await consumer.stop()
