"""Reading an input log again from its start after the broker lost it.

A broker that lost its log (or a topic deleted and recreated) starts offsets at 0 under
a new topic id, while the consumer group may still hold offsets committed against the
old log, and Faust drops every message below the offset it last read or the group last
committed. Left alone, every new trace is silently skipped until the new log grows past
the old offsets. Two places put it right:

- before a worker joins its group: committed offsets beyond a partition's end are reset
  to its start (`rewind_lost_offsets`);
- while running, every topic check, for owned partitions whose topic id changed or whose
  committed offset lies beyond the log's end: Faust's bookkeeping for the partition is
  cleared, offset 0 is committed (a rebalance right after must not seek back to the old
  offset), and the partition is read from 0 (`rewind`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import suppress
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import OffsetSpec
from kafka.errors import KafkaError

from monitor.settings import Settings
from monitor.worker.connection import kafka_python_options
from monitor.worker.provision import admin_client, bounded

__all__ = ["lost_offsets", "rewind", "rewind_lost_offsets"]

log = logging.getLogger(__name__)


def lost_offsets(settings: Settings, names: tuple[str, ...]) -> dict[TopicPartition, str]:
    """The group's committed offsets on `names` that lie beyond their partition's end
    (committed against a log the broker has since lost), each with a line saying so."""
    admin = admin_client(settings)
    try:
        return _lost(admin, settings, names)
    finally:
        admin.close()


def _lost(admin: KafkaAdminClient, settings: Settings,
          names: tuple[str, ...]) -> dict[TopicPartition, str]:
    ours = {tp: meta.offset for tp, meta in _committed(admin, settings.app_id).items()
            if tp.topic in names and meta.offset > 0}
    if not ours:
        return {}
    consumer = KafkaConsumer(**kafka_python_options(settings), **bounded(settings),
                             group_id=None, enable_auto_commit=False,
                             auto_offset_reset="latest")
    try:
        ends = consumer.end_offsets(list(ours))
        return {tp: f"{tp.topic}/{tp.partition}: committed offset {offset} is beyond the "
                    f"log's end {ends[tp]} (the broker lost its log?): reading it from the start"
                for tp, offset in sorted(ours.items())
                if offset > ends.get(tp, offset) and not _holds(consumer, tp, offset - 1)}
    finally:
        consumer.close()


def _holds(consumer: KafkaConsumer, tp: TopicPartition, offset: int) -> bool:
    """Whether the log still holds `offset`. Asked only when the reported end is below a
    committed offset, which on Apache Kafka means a lost log; the embedded broker (Tansu)
    reports a partition's end as the start of its last batch, so there it is often so
    with nothing lost, and reading is the only way to know."""
    consumer.assign([tp])
    consumer.seek(tp, offset)
    deadline = time.monotonic() + _PROBE_SECONDS
    while time.monotonic() < deadline:  # out of range: reset to the end, nothing comes
        for records in consumer.poll(timeout_ms=250, max_records=1).values():
            return any(record.offset >= offset for record in records)
    return False


def rewind_lost_offsets(settings: Settings, names: tuple[str, ...]) -> list[str]:
    """Before a worker joins: reset committed offsets beyond their partition's end to its
    start; returns one line per partition. A group with running members refuses (they
    rewind themselves in their topic check), and says so in the line."""
    try:
        admin = admin_client(settings)
        try:
            lost = _lost(admin, settings, names)
            errors = (admin.reset_group_offsets(settings.app_id,
                                                dict.fromkeys(lost, OffsetSpec.EARLIEST))
                      if lost else {})
        finally:
            admin.close()
    except KafkaError as exc:  # a broker without the group APIs: the running check remains
        log.warning("committed offsets not checked against the log: %s", exc)
        return []
    return [line + ("" if _ok(errors.get(tp)) else f" (refused: {errors[tp]['error'].__name__})")
            for tp, line in lost.items()]


def _committed(admin: KafkaAdminClient, group: str) -> dict[TopicPartition, Any]:
    for attempt in range(_TRIES):  # a coordinator still loading answers "not yet"
        try:
            return dict(admin.list_group_offsets({group: None}).get(group, {}))
        except KafkaError as exc:
            if not exc.retriable or attempt == _TRIES - 1:
                raise
            time.sleep(0.5)
    return {}


_TRIES = 10
_COMMIT_WAIT_SECONDS = 10.0
_PROBE_SECONDS = 3.0


def _ok(result: dict[str, Any] | None) -> bool:
    error = (result or {}).get("error")  # a KafkaError class; NoError has errno 0
    return error is None or getattr(error, "errno", 0) == 0


async def rewind(consumer: Any, partitions: list[Any]) -> None:
    """Read `partitions` (Faust TPs) of a running Faust consumer again from offset 0.

    Faust keeps per partition what it acknowledged, committed and read; each would make
    it skip or refuse to commit the new log's offsets, so they are cleared (private
    attributes of faust.transport.consumer.Consumer, faust-streaming 0.11 to 0.15)."""
    # A commit of the old log's offsets may still be retrying: let it land first, so that
    # offset 0 below is the last word (a later one is caught by the next topic check).
    with suppress(asyncio.TimeoutError):
        await asyncio.wait_for(asyncio.shield(consumer.maybe_wait_for_commit_to_finish()),
                               timeout=_COMMIT_WAIT_SECONDS)
    for tp in partitions:
        for table in (consumer._acked, consumer._acked_index, consumer._gap):
            table.pop(tp, None)
        consumer._committed_offset[tp] = None
    # Bounded: aiokafka retries a commit for as long as a partition is unknown, and the
    # topic check that would create it is the caller.
    try:
        await asyncio.wait_for(asyncio.shield(consumer._commit({tp: 0 for tp in partitions})),
                               timeout=_COMMIT_WAIT_SECONDS)
    except (TimeoutError, KafkaError) as exc:  # the seek below still applies
        log.warning("offset 0 not committed for %s: %r", partitions, exc)
    for tp in partitions:
        await consumer.seek(tp, 0)
