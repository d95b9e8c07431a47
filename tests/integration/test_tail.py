"""Stage two's reader of the state topic (`monitor.worker.topics.Tail`) on a real broker:
its first poll reads every partition to its end; after a failed poll it goes on from
where it was; only `restart` (a new log) reads a topic again from its beginning. (Read
again after a failure, a partition's older checkpoints came back first and were merged
as the newest: the exported counters went down.)"""

from __future__ import annotations

import asyncio
import time

import pytest
from kafka import KafkaProducer

from monitor.client import ensure_topics
from monitor.worker.connection import kafka_python_options
from monitor.worker.topics import Tail

pytestmark = pytest.mark.integration


def test_a_tail_goes_on_after_a_failure_and_reads_again_only_when_restarted(broker):
    settings = broker.settings()
    ensure_topics(settings)
    topic = settings.topic_state

    def send(*values: bytes, partition: int = 0) -> None:
        producer = KafkaProducer(**kafka_python_options(settings))
        for value in values:
            producer.send(topic, key=b"ragmon:p%d" % partition, value=value,
                          partition=partition)
        producer.flush()
        producer.close()

    async def read(tail: Tail, expected: int) -> list[bytes]:
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(values) < expected and time.monotonic() < deadline:
            values += [value for _, value in await tail.poll()]
            await asyncio.sleep(0.1)
        for _ in range(5):  # and nothing more comes
            values += [value for _, value in await tail.poll()]
        return values

    async def scenario() -> tuple[list[bytes], ...]:
        tail = Tail(settings, topic, settings.partitions)
        try:
            send(b"1", b"2")
            first = await read(tail, 2)
            await tail._drop()  # what a poll that raised does (a broker away)
            send(b"3")
            after_failure = await read(tail, 1)
            tail.restart()  # a new log: read from the beginning
            after_stop = await read(tail, 3)
            return first, after_failure, after_stop
        finally:
            await tail.stop()

    first, after_failure, after_stop = asyncio.run(scenario())
    assert first == [b"1", b"2"]
    assert after_failure == [b"3"]
    assert after_stop == [b"1", b"2", b"3"]

    async def first_poll() -> list[bytes]:
        tail = Tail(settings, topic, settings.partitions)
        try:
            return sorted(value for _, value in await tail.poll())
        finally:
            await tail.stop()

    # A new reader's first poll reads every partition up to its end (stage two merges
    # it into a fresh table: a part of the partitions would export lower counters).
    written = []
    for partition in range(settings.partitions):
        values = [b"p%d-%d" % (partition, i) for i in range(50)]
        send(*values, partition=partition)
        written += values
    assert asyncio.run(first_poll()) == sorted([b"1", b"2", b"3", *written])
