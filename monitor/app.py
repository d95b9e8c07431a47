"""Faust wiring only: topics, agents, timers, the metrics endpoint. The fold is `Pipeline`.

Topics carry raw bytes (typed Faust records crash agents on undecodable input and let
NaN through); validation is ours. Each agent takes batches (`take_events`), folds them
with the pipeline, dead-letters what was rejected (reason and source topic/partition/
offset in headers) and never lets an exception escape: a failed batch is logged,
counted and dead-lettered whole, with reason `worker_error`.

Known limits of this version (see README): state is in memory, so a restart starts the
counters again from the committed offsets; exact counts across crashes and the
two-stage (partial -> owner) merge across workers are the next step.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import faust
from prometheus_client import CollectorRegistry, start_http_server

from monitor.export import Collector, snapshot_of
from monitor.ingest import Rejection
from monitor.pipeline import Pipeline
from monitor.settings import Settings

__all__ = ["Worker", "build"]

log = logging.getLogger("ragmon.worker")


class Worker:
    """The Faust app and the state it folds into; `build()` makes one from settings."""

    def __init__(self, settings: Settings, app: faust.App) -> None:
        self.settings = settings
        self.app = app
        self.pipeline = Pipeline(settings)
        self.collector = Collector(settings.series_budget)
        self.registry = CollectorRegistry()
        self.registry.register(self.collector)
        self.health: dict[str, float] = {"dlq_produced": 0, "batch_seconds": 0.0, "batches": 0,
                                         "errors": 0}
        self.dlq = app.topic(settings.topic_dlq, value_serializer="raw", key_serializer="raw")

    async def fold(self, events: Sequence[Any], kind: str) -> None:
        started = time.perf_counter()
        raws = [event.value if isinstance(event.value, bytes) else b"" for event in events]
        try:
            if kind == "decisions":
                dead = self.pipeline.feed(raws)
                self.pipeline.close_ready()
            else:
                dead = self.pipeline.feed_events(raws, kind)
        except Exception as exc:  # the one broad except: a bad batch must not stop the stream
            log.exception("batch of %d %s failed", len(raws), kind)
            self.health["errors"] += 1
            dead = [(i, Rejection("worker_error", repr(exc)[:200], raw, 0))
                    for i, raw in enumerate(raws)]
        for index, rejection in dead:
            await self._dead_letter(events[index], rejection)
        self.health["batch_seconds"] += time.perf_counter() - started
        self.health["batches"] += 1

    async def _dead_letter(self, event: Any, rejection: Rejection) -> None:
        message = event.message
        headers = {
            "ragmon.reason": rejection.reason.encode(),
            "ragmon.detail": rejection.detail.encode()[:512],
            "ragmon.source.topic": str(message.topic).encode(),
            "ragmon.source.partition": str(message.partition).encode(),
            "ragmon.source.offset": str(message.offset).encode(),
        }
        await self.dlq.send(key=message.key, value=rejection.payload, headers=headers)
        self.health["dlq_produced"] += 1

    def refresh(self) -> None:
        """Swap in a new snapshot for the scrapes (cheap: one merge of open windows)."""
        assignment = self.app.consumer.assignment() if self.app.consumer else set()
        self.health["partitions"] = sum(
            1 for tp in assignment if tp.topic == self.settings.topic_decisions)
        watermark = self.pipeline.windows.watermark
        self.health["watermark_lag"] = max(time.time() - watermark, 0.0) if watermark > 0 else 0
        self.collector.current = snapshot_of(self.pipeline, self.health)


def build(settings: Settings, *, broker_session_timeout: float = 4.0,
          broker_heartbeat_interval: float = 1.0) -> Worker:
    """The Faust app: one consumer group (`app_id`), raw topics, three agents, a timer."""
    app = faust.App(
        settings.app_id,
        broker=[f"kafka://{server}" for server in settings.bootstrap_servers.split(",")],
        value_serializer="raw",
        key_serializer="raw",
        topic_partitions=settings.partitions,
        web_enabled=False,
        # Tansu admits a group member after ~half the session timeout (ARCHITECTURE.md).
        broker_session_timeout=broker_session_timeout,
        broker_heartbeat_interval=broker_heartbeat_interval,
        consumer_auto_offset_reset="earliest",
        producer_acks=-1,
    )
    worker = Worker(settings, app)
    for kind, name in (("decisions", settings.topic_decisions), ("labels", settings.topic_labels),
                       ("feedback", settings.topic_feedback)):
        _agent(worker, kind, app.topic(name, value_serializer="raw", key_serializer="raw"))

    @app.timer(interval=1.0)  # type: ignore[untyped-decorator]
    async def refresh() -> None:
        worker.refresh()

    @app.task  # type: ignore[untyped-decorator]
    async def serve_metrics() -> None:
        start_http_server(settings.metrics_port, addr=settings.metrics_host,
                          registry=worker.registry)
        worker.refresh()
        log.info("metrics on http://%s:%d/metrics", settings.metrics_host,
                 settings.metrics_port)

    return worker


def _agent(worker: Worker, kind: str, topic: Any) -> None:
    settings = worker.settings

    async def consume(stream: Any) -> None:
        async for events in stream.take_events(settings.batch_size, within=settings.batch_seconds):
            await worker.fold(events, kind)

    consume.__name__ = f"fold_{kind}"
    worker.app.agent(topic, name=f"ragmon.fold_{kind}")(consume)
