"""Reading topics without a consumer group (aiokafka): checkpoints, references, end
offsets. The worker's own consumption goes through Faust; these reads are one-off."""

from __future__ import annotations

import logging
import time
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.helpers import create_ssl_context

from monitor.client import connection
from monitor.settings import Settings

__all__ = ["aiokafka_options", "end_offsets", "read_topic"]

log = logging.getLogger(__name__)


def aiokafka_options(settings: Settings) -> dict[str, Any]:
    """kafka-python's connection options, which aiokafka shares but for the CA file."""
    options = connection(settings)
    cafile = options.pop("ssl_cafile", None)
    if settings.security_protocol in ("SSL", "SASL_SSL"):
        options["ssl_context"] = create_ssl_context(cafile=cafile)
    return options


async def read_topic(settings: Settings, topic: str, partition: int,
                     only: bytes | None) -> dict[bytes, bytes]:
    """The newest value per key (or of key `only`) in one partition of a topic."""
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
                if record.key is not None and (only is None or record.key == only):
                    newest[record.key] = record.value
            # Stop on an empty poll at or past the end: the embedded broker reports the
            # end as the start of the last batch, so "position >= end" alone is early.
            position = await consumer.position(tp)
            if not records and position >= end:
                log.info("%s/%d: read %d records up to %d", topic, partition, read,
                         position)
                return newest
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
