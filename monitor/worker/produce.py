"""Producing keyed records under Faust's producer in aiokafka's record batches: the
decisions the otlp intake assembles (`monitor/worker/spans.py`), many per batch."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aiokafka.partitioner import DefaultPartitioner
from aiokafka.partitioner import murmur2 as murmur2_python

from monitor.ingest.native import load

if TYPE_CHECKING:  # mypy reads its stub (`_murmur2.pyi`) ...
    from monitor.worker import _murmur2 as MURMUR2
else:  # ... and at run time it is None where it was not built
    MURMUR2 = load("monitor.worker._murmur2")

__all__ = ["murmur2", "send_keyed"]

# Kafka's key hash: compiled, else aiokafka's pure Python (~6 us a key).
murmur2: Callable[[bytes], int] = MURMUR2.murmur2 if MURMUR2 is not None else murmur2_python


async def send_keyed(topic: Any, keyed: list[tuple[bytes, bytes]]) -> None:
    """Produce (key, value) records to a Faust `topic`, each to the partition its key
    gives (the producer's own partitioner, as a keyed send and every other client's
    default), and wait until all are delivered. Records go in aiokafka's record batches,
    one `send_batch` per batch: a Faust `send` per record cost ~115 us each, most of the
    time it took to assemble decisions from spans (benchmarks/RESULTS.md)."""
    if not keyed:
        return
    producer = topic.app.producer._ensure_producer()  # aiokafka's, under Faust's
    name = topic.get_topic_name()
    await producer.client._wait_on_metadata(name)
    by_partition: dict[int, list[tuple[bytes, bytes]]] = {}
    if type(producer._partitioner) is DefaultPartitioner:
        # Its choice, with the hash compiled: all_partitions[murmur2(key) & 0x7fffffff % n]
        # (aiokafka's `_partition`; tests/worker/test_murmur2.py checks the two agree).
        partitions = list(producer._metadata.partitions_for_topic(name))

        def choose(key: bytes) -> int:
            return int(partitions[(murmur2(key) & 0x7FFFFFFF) % len(partitions)])
    else:
        def choose(key: bytes) -> int:
            return int(producer._partition(name, None, None, None, key, None))
    for key, value in keyed:
        by_partition.setdefault(choose(key), []).append((key, value))
    deliveries = []
    for partition, records in sorted(by_partition.items()):
        batch = producer.create_batch()
        for key, value in records:
            if batch.append(key=key, value=value, timestamp=None) is None:  # full
                deliveries.append(await producer.send_batch(batch, name, partition=partition))
                batch = producer.create_batch()
                batch.append(key=key, value=value, timestamp=None)  # the first always fits
        deliveries.append(await producer.send_batch(batch, name, partition=partition))
    await asyncio.gather(*deliveries)
