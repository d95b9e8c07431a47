"""Producing to Kafka with kafka-python: topic set-up and `ragmon produce` (backfills, tests).

Decision traces are keyed by `trace_id`, so a trace, its labels and its feedback land on
the same partition number of their topics (same key, same default partitioner) and
traffic spreads evenly even when one release carries all of it.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import suppress
from typing import Any

import msgspec
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError

from monitor.settings import Settings

__all__ = ["Sender", "connection", "ensure_topics", "key_of", "produce", "publish", "read_latest"]


class _Keyed(msgspec.Struct):
    trace_id: str


_KEY = msgspec.json.Decoder(_Keyed)


def connection(settings: Settings) -> dict[str, Any]:
    """kafka-python connection options (bootstrap, SASL/SSL) from the settings."""
    options: dict[str, Any] = {
        "bootstrap_servers": settings.bootstrap_servers.split(","),
        "security_protocol": settings.security_protocol,
    }
    if settings.sasl_mechanism:
        options["sasl_mechanism"] = settings.sasl_mechanism
        options["sasl_plain_username"] = settings.sasl_username
        if settings.sasl_password is not None:
            options["sasl_plain_password"] = settings.sasl_password.get_secret_value()
    if settings.ssl_cafile:
        options["ssl_cafile"] = settings.ssl_cafile
    return options


def ensure_topics(settings: Settings) -> None:
    """Create ragmon's topics (decisions, labels, feedback, dead letters, state, references)
    if missing."""
    admin = KafkaAdminClient(**connection(settings))
    try:
        existing = set(admin.list_topics())
        wanted = [settings.topic_decisions, settings.topic_labels, settings.topic_feedback,
                  settings.topic_dlq, settings.topic_state]
        compact = {"cleanup.policy": "compact"}
        new = [NewTopic(name, settings.partitions, 1,
                        topic_configs=compact if name == settings.topic_state else {})
               for name in wanted if name not in existing]
        if settings.topic_references not in existing:  # one partition: every worker reads all
            new.append(NewTopic(settings.topic_references, 1, 1, topic_configs=compact))
        if new:
            with suppress(TopicAlreadyExistsError):  # another worker created it first
                admin.create_topics(new)
    finally:
        admin.close()


def key_of(line: bytes) -> bytes | None:
    """The partition key of a message: its trace_id, or none for a line that has none."""
    try:
        return _KEY.decode(line).trace_id.encode()
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None


class Sender:
    """A producer of raw lines keyed by trace_id (acks from all replicas)."""

    def __init__(self, settings: Settings) -> None:
        self._producer = KafkaProducer(**connection(settings), acks="all", linger_ms=5)

    def send(self, topic: str, line: bytes) -> None:
        self._producer.send(topic, value=line, key=key_of(line))

    def flush(self) -> None:
        self._producer.flush()

    def close(self) -> None:
        self._producer.close()


def produce(settings: Settings, topic: str, lines: Iterable[bytes]) -> int:
    """Send each line as one message keyed by trace_id; returns how many were sent."""
    sender = Sender(settings)
    sent = 0
    try:
        for line in lines:
            sender.send(topic, line)
            sent += 1
        sender.flush()
    finally:
        sender.close()
    return sent


def publish(settings: Settings, topic: str, key: bytes, value: bytes) -> None:
    """Send one record to partition 0 of `topic` and wait until it is stored."""
    producer = KafkaProducer(**connection(settings), acks="all")
    try:
        producer.send(topic, key=key, value=value, partition=0).get(timeout=30)
    finally:
        producer.close()


def read_latest(settings: Settings, topic: str, idle_ms: int = 1500) -> dict[bytes, bytes]:
    """The newest value per key of partition 0 of `topic` (a compacted table's content).
    Without a consumer group: kafka-python's groups do not work on the embedded broker."""
    consumer = KafkaConsumer(**connection(settings), group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", consumer_timeout_ms=idle_ms)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        return {m.key: m.value for m in consumer if m.key is not None}
    finally:
        consumer.close()
