"""Producing to Kafka with kafka-python: topic set-up, `ragmon produce` (backfills, tests)
and `DecisionEmitter`, the client SDK applications emit their decisions with.

Decision traces are keyed by `trace_id`, so a trace, its labels and its feedback land on
the same partition number of their topics (same key, same default partitioner) and
traffic spreads evenly even when one release carries all of it.
"""

from __future__ import annotations

import threading
import time
import uuid
import warnings
from collections import deque
from collections.abc import Iterable
from contextlib import suppress
from datetime import UTC, datetime
from typing import Any

import msgspec
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from opentelemetry import trace as otel_trace

from monitor.ingest.assemble import span_attributes
from monitor.ingest.contract import CONTENT_FIELDS
from monitor.ingest.parse import Rejection, parse, strip_content
from monitor.settings import Settings
from monitor.worker.connection import kafka_python_options as connection
from monitor.worker.provision import ensure_topics

__all__ = [
    "DecisionEmitter", "Sender", "annotate_span", "ensure_topics", "key_of", "produce",
    "publish", "read_latest",
]


class _Keyed(msgspec.Struct):
    trace_id: str


_KEY = msgspec.json.Decoder(_Keyed)


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
    producer = KafkaProducer(**connection(settings), acks="all",
                             max_request_size=settings.state_max_bytes)
    try:
        producer.send(topic, key=key, value=value, partition=0).get(timeout=30)
    finally:
        producer.close()


def read_latest(settings: Settings, topic: str, idle_ms: int = 1500) -> dict[bytes, bytes]:
    """The newest value per key of partition 0 of `topic` (a compacted table's content).
    Without a consumer group: kafka-python's groups do not work on the embedded broker."""
    consumer = KafkaConsumer(**connection(settings), group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", consumer_timeout_ms=idle_ms,
                             max_partition_fetch_bytes=settings.state_max_bytes)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        return {m.key: m.value for m in consumer if m.key is not None}
    finally:
        consumer.close()


_RECONNECT_AFTER_FAILURES = 20
_CONTENT_KEYS = tuple(f'"{name}":'.encode() for name in CONTENT_FIELDS)


class DecisionEmitter:
    """Sends `rag-decision/1`, `rag-label/1` and `rag-feedback/1` events from an application
    without ever slowing or breaking its request path.

    Each call validates the event against the contract (content fields are dropped
    first, even if the caller passed them), puts the bytes in a bounded buffer and
    returns; a background thread delivers them with kafka-python, reconnecting by
    itself. A full buffer drops the oldest (or, with `drop="newest"`, the new) event;
    broker trouble is counted, never raised. An invalid event is a programming error:
    it is warned about once per reason and counted in `invalid`.

        emitter = DecisionEmitter(bootstrap_servers="kafka:9092")
        emitter.decision(release="2026.11.3", decision="abstain", reason="weak_retrieval",
                         signals={"top_score": 0.31}, slice={"language": "de"})
        emitter.close()  # flushes

    With an active OpenTelemetry span, a decision records its trace and span ids in
    `otel` and puts itself on the span as the attributes the worker's otlp intake reads
    (`rag.decision`, `rag.reason`, `rag.release`, `rag.signals.<name>`, `rag.slice.<dim>`,
    ..., `rag.claim` events; `annotate_span` does only that).
    """

    def __init__(self, settings: Settings | None = None, *, bootstrap_servers: str | None = None,
                 buffer_size: int = 10_000, drop: str = "oldest",
                 delivery_timeout_seconds: float = 30.0) -> None:
        if drop not in ("oldest", "newest"):
            raise ValueError(f"drop must be 'oldest' or 'newest', not {drop!r}")
        base = settings or Settings()
        self.settings = base.model_copy(update={"bootstrap_servers": bootstrap_servers}) \
            if bootstrap_servers else base
        self.buffer_size = buffer_size
        self.drop = drop
        self.delivery_timeout_seconds = delivery_timeout_seconds
        self.counts = {"sent": 0, "dropped": 0, "failed": 0, "invalid": 0, "queued": 0}
        self._buffer: deque[tuple[str, bytes | None, bytes]] = deque()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self._warned: set[str] = set()
        self._in_flight = 0
        self._failures_in_row = 0
        self._abandoned = False
        self._close_by = float("inf")
        self._thread = threading.Thread(target=self._deliver, name="ragmon-emitter",
                                        daemon=True)
        self._thread.start()

    # --- the request path ---------------------------------------------------------

    def decision(self, *, release: str, decision: str, trace_id: str | None = None,
                 reason: str | None = None, **fields: Any) -> bool:
        """Emit one decision; other `rag-decision/1` fields by name (`signals=`, `slice=`,
        `claims=`, `checks=`, `usage=`, `requirements=`, `system=` extras, ...)."""
        system = {"release": release, **fields.pop("system", {})}
        event: dict[str, Any] = {"schema": "rag-decision/1",
                                 "trace_id": trace_id or uuid.uuid4().hex,
                                 "ts": _now(), "system": system, "decision": decision,
                                 **({"reason": reason} if reason else {}), **fields}
        _annotate_span(event)
        return self._put(self.settings.topic_decisions, event)

    def label(self, *, trace_id: str, source: str = "human", **outcomes: bool) -> bool:
        """Emit a label (`answerable=`, `correct=`, `unsupported_critical=`)."""
        return self._put(self.settings.topic_labels, {
            "schema": "rag-label/1", "trace_id": trace_id, "ts": _now(), "source": source,
            **outcomes})

    def feedback(self, *, trace_id: str, score: int) -> bool:
        return self._put(self.settings.topic_feedback, {
            "schema": "rag-feedback/1", "trace_id": trace_id, "ts": _now(), "score": score})

    def _put(self, topic: str, event: dict[str, Any]) -> bool:
        raw = msgspec.json.encode(event)
        cleaned = event
        # A content field can only be there if its quoted name precedes a colon; the
        # generic strip walk (~20 us) runs only then.
        if any(key in raw for key in _CONTENT_KEYS):
            cleaned, _ = strip_content(event)
            raw = msgspec.json.encode(cleaned)
        result = parse(raw, self.settings.max_message_bytes)
        if isinstance(result, Rejection):
            self._count("invalid")
            if result.reason not in self._warned:
                self._warned.add(result.reason)
                warnings.warn(f"ragmon: event not sent, {result.reason}: {result.detail}",
                              stacklevel=3)
            return False
        item = (topic, str(cleaned.get("trace_id", "")).encode() or None, raw)
        with self._lock:
            if len(self._buffer) >= self.buffer_size:
                self.counts["dropped"] += 1
                if self.drop == "newest":
                    return False
                self._buffer.popleft()
            self._buffer.append(item)
            self.counts["queued"] = len(self._buffer)
        self._wake.set()
        return True

    def _count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self.counts[name] += n

    # --- delivery -----------------------------------------------------------------

    def _deliver(self) -> None:
        producer: KafkaProducer | None = None
        backoff = 0.5
        while not (self._closed and not self._buffer):
            self._wake.wait(timeout=0.2)
            self._wake.clear()
            if not self._buffer:
                continue
            if producer is None:
                try:
                    producer = KafkaProducer(
                        **connection(self.settings), acks="all", linger_ms=5,
                        max_block_ms=1000, retries=3,
                        request_timeout_ms=int(self.delivery_timeout_seconds * 1000) // 2,
                        delivery_timeout_ms=int(self.delivery_timeout_seconds * 1000))
                    backoff = 0.5
                except Exception as exc:  # broker away: keep the buffer, try again later
                    self._warn_once("connect", f"ragmon: cannot reach Kafka at "
                                    f"{self.settings.bootstrap_servers}: {exc}; events stay "
                                    "buffered")
                    time.sleep(backoff)
                    backoff = min(2 * backoff, 10.0)
                    continue
            if self._failures_in_row >= _RECONNECT_AFTER_FAILURES:
                # kafka-python can keep stale metadata after a broker restart (a new node
                # id on the same address): start over with a fresh producer.
                with suppress(Exception):
                    producer.close(timeout=0)
                producer = None
                self._failures_in_row = 0
                continue
            self._drain(producer)
        if producer is not None:
            with suppress(Exception):
                producer.flush(timeout=max(self._close_by - time.monotonic(), 0))
                producer.close(timeout=0)

    def _drain(self, producer: KafkaProducer) -> None:
        while True:
            with self._lock:
                if not self._buffer:
                    self.counts["queued"] = 0
                    return
                topic, key, raw = self._buffer.popleft()
                self.counts["queued"] = len(self._buffer)
                self._in_flight += 1
            try:
                future = producer.send(topic, value=raw, key=key)
            except Exception:  # metadata unavailable, local buffer full: counted, dropped
                self._done("failed")
                continue
            future.add_callback(lambda _meta: self._done("sent"))
            future.add_errback(lambda _exc: self._done("failed"))

    def _done(self, outcome: str) -> None:
        with self._lock:
            if self._abandoned:  # close() counted it as failed already
                return
            self.counts[outcome] += 1
            self._in_flight -= 1
            self._failures_in_row = self._failures_in_row + 1 if outcome == "failed" else 0

    def flush(self, timeout_seconds: float = 30.0) -> bool:
        """Wait until everything buffered was delivered or failed; False on timeout."""
        deadline = time.monotonic() + timeout_seconds
        self._wake.set()
        while time.monotonic() < deadline:
            with self._lock:
                if not self._buffer and self._in_flight == 0:
                    return True
            time.sleep(0.01)
        return False

    def close(self, timeout_seconds: float = 30.0) -> None:
        """Flush, then stop the delivery thread; returns within `timeout_seconds`. What
        was not delivered by then (buffered or in flight) is counted in `failed`."""
        self._close_by = time.monotonic() + timeout_seconds
        self.flush(timeout_seconds)
        with self._lock:
            self.counts["failed"] += len(self._buffer)
            self._buffer.clear()
            self.counts["queued"] = 0
        self._closed = True
        self._wake.set()
        self._thread.join(timeout=max(self._close_by - time.monotonic(), 0))
        with self._lock:
            self.counts["failed"] += self._in_flight
            self._in_flight = 0
            self._abandoned = True

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(message, stacklevel=2)


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def annotate_span(*, decision: str, release: str | None = None, reason: str | None = None,
                  span: otel_trace.Span | None = None, **fields: Any) -> bool:
    """Put a decision on an OpenTelemetry span (the current one by default) as the
    attributes and `rag.claim` events the worker's otlp intake reads back
    (docs/otlp.md, "What is read"): for apps that send no Kafka
    message of their own. `fields` are `rag-decision/1` fields by name (`slice=`,
    `signals=`, `claims=`, `requirements=`, `checks=`, `usage=`, `evals=`, `system=`,
    `trace_id=`, `rule=`, ...); without `release`, the intake takes the resource's
    `service.version`. Returns False when there is no recording span to annotate.

        annotate_span(decision="abstain", reason="weak_retrieval",
                      slice={"language": "de"}, signals={"top_score": 0.31})
    """
    target = span or otel_trace.get_current_span()
    if not target.is_recording():
        return False
    system = {**fields.pop("system", {}), **({"release": release} if release else {})}
    event = {"decision": decision, **({"reason": reason} if reason else {}),
             **({"system": system} if system else {}), **fields}
    attributes, claims = span_attributes(strip_content(event)[0])
    target.set_attributes(attributes)
    for claim in claims:
        target.add_event("rag.claim", claim)
    return True


def _annotate_span(event: dict[str, Any]) -> None:
    """Link the decision and the application's active span both ways: `otel` in the
    decision, and on the span the attributes the otlp intake reads (`rag.trace_id` among
    them, so the same decision read from both is folded once)."""
    span = otel_trace.get_current_span()
    context = span.get_span_context()
    if not context.is_valid:
        return
    event.setdefault("otel", {"trace_id": format(context.trace_id, "032x"),
                              "span_id": format(context.span_id, "016x")})
    if span.is_recording():
        attributes, claims = span_attributes(strip_content(event)[0])
        span.set_attributes(attributes)
        for claim in claims:
            span.add_event("rag.claim", claim)
