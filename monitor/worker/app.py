"""Faust wiring only: topics, agents, timers, the metrics endpoint. The fold is `Pipeline`.

Topics carry raw bytes (typed Faust records crash agents on undecodable input and let
NaN through); validation is ours. Each agent gathers batches of events
(monitor/worker/batches.py), groups them by partition and folds each group into that
partition's pipeline, dead-letters what was rejected (reason and source
topic/partition/offset in headers) and never lets an exception escape: a batch whose
fold fails is logged, counted and dead-lettered whole with reason `worker_error`; any
other failure of a batch restarts the worker in place (its checkpoints make that exact).

Exact counts under at-least-once delivery: each partition's pipeline is checkpointed to
the state topic with the last offset applied per source topic after every batch, and
a batch is acknowledged only after its fold and checkpoints, so the committed
offset never passes a checkpoint. A worker that gains a partition (restart, rebalance)
loads its checkpoint and skips offsets it already holds: Kafka's redelivery and Faust's
replay after a rebalance (faust-streaming #502) count once. Traces, labels and feedback
are keyed by trace_id, so partition p of each topic belongs to the same state. Each
batch's first sightings of trace ids go to the seen topic before the checkpoint, so the
de-duplication horizon survives too. Checkpoints and restores live in
monitor/worker/partitions.py, the partition states and the fold in a child process
(monitor/worker/child.py), the checkpoint format in monitor/aggregate/checkpoint.py.

Stage two (monitor/worker/merge.py): once a second every worker merges the newest checkpoint
of every partition and exports, and detects on, the releases it owns.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import suppress
from functools import partial
from typing import Any, TypeVar

import faust

from monitor import memory
from monitor.aggregate.layout import from_settings
from monitor.detect.drift import Drift, DriftConfig, DriftView
from monitor.detect.watch import Watch, to_record
from monitor.export.pages import Pages
from monitor.export.snapshot import Health, Local, snapshot_from
from monitor.ingest.parse import Rejection, payload_form
from monitor.settings import Settings
from monitor.worker import stall, telemetry, topics, upkeep
from monitor.worker.batches import Batches
from monitor.worker.connection import ssl_context
from monitor.worker.merge import Merger, owner
from monitor.worker.partitions import Group, Partitions
from monitor.worker.reference_sync import ReferenceSync

__all__ = ["Worker", "build", "credentials"]

log = logging.getLogger("ragmon.worker")
TOPIC_CHECK_SECONDS = 10.0
T = TypeVar("T")
# The worker's own counters, carried on through a restart in place (the rest of its
# health is read afresh; input counters come from the checkpoints).
CARRIED_HEALTH = ("dlq_produced", "batch_seconds", "batches", "errors", "replayed_skipped",
                  "checkpoints", "state_lost")
class Worker:
    """The Faust app and the per-partition state it folds into; `build()` makes one."""

    def __init__(self, settings: Settings, app: faust.App) -> None:
        self.settings = settings
        self.app = app
        self._folding = asyncio.Lock()
        self.pages = Pages(settings.metrics_host, settings.metrics_port, settings.series_budget,
                           settings.metrics_detail == "full", settings.metrics_refresh_seconds)
        self.health = Health(state_max_bytes=settings.state_max_bytes)
        for name, value in stall.carried().items():  # after a restart in place
            if name in CARRIED_HEALTH:
                setattr(self.health, name, type(getattr(self.health, name))(value))
        self.dlq = app.topic(settings.topic_dlq, value_serializer="raw", key_serializer="raw")
        self.partitions = Partitions(
            settings, app.topic(settings.topic_state, value_serializer="raw", key_serializer="raw"),
            app.topic(settings.topic_seen, value_serializer="raw", key_serializer="raw"),
            self.health)
        self.references_topic = app.topic(settings.topic_references, value_serializer="raw",
                                          key_serializer="raw")
        # Stage two: every partition's checkpoint merged; this worker detects on and
        # exports the releases it owns (monitor/worker/merge.py).
        self.drift = Drift(from_settings(settings), DriftConfig.from_settings(settings),
                           calibrate_inline=False)
        self.calibrating: asyncio.Task[None] | None = None
        self.references = ReferenceSync(settings, self.drift)
        self.watch = Watch(self.drift, settings.window_seconds, settings.allowed_lateness_seconds)
        self.merger = Merger(self.drift.layout, self.watch)
        self.partials = topics.Tail(settings, settings.topic_state, settings.partitions)
        self.owned: frozenset[int] = frozenset()  # decisions partitions assigned here
        self.drift_view: DriftView = self.drift.view()
        self.tracer = telemetry.tracer(settings)
        self.last_progress = time.monotonic()
        self.topic_ids: dict[str, str] = {}  # of the input topics, as last seen

    async def fold(self, events: Sequence[Any], kind: str) -> None:
        with self.tracer.start_as_current_span(
                "ragmon.batch", attributes={"ragmon.kind": kind, "ragmon.events": len(events)}):
            await self._fold_batch(events, kind)

    async def _fold_batch(self, events: Sequence[Any], kind: str) -> None:
        started = time.perf_counter()
        if not self.references.loaded:
            await self._retrying(self._load_references, "loading references")
        by_partition: dict[int, list[Any]] = {}
        for event in events:
            by_partition.setdefault(event.message.partition, []).append(event)
        # One batch at a time (the decisions, labels and feedback agents share partition
        # states): a checkpoint never holds a batch's counts without its offsets, nor a
        # de-duplication segment of a batch it does not hold.
        async with self._folding:
            groups = []
            for partition, group in sorted(by_partition.items()):
                if partition not in self.partitions.offsets:
                    await self._retrying(partial(self.partitions.recover, partition),
                                         f"partition {partition}: recovery")
                groups.append(Group(partition, group[0].message.topic,
                                    [e.message.offset for e in group],
                                    [e.value if isinstance(e.value, bytes) else b""
                                     for e in group]))
            with self.tracer.start_as_current_span("ragmon.fold"):
                folded = await self.partitions.fold(kind, groups)
            for found in folded:
                events_of = by_partition[found.partition]
                if any(rejection.reason == "worker_error" for _, rejection in found.dead):
                    self.health.errors += 1  # the states process printed the traceback
                for index, rejection in found.dead:
                    await self._dead_letter(events_of[index], rejection)
            if folded:
                await self._retrying(partial(self.partitions.checkpoint, folded), "checkpoints")
        self.health.batch_seconds += time.perf_counter() - started
        self.health.batches += 1
        self.last_progress = time.monotonic()

    def restart_in_place(self) -> None:
        """Restart this worker in place (monitor/worker/stall.py): its page process stopped
        first (so that the port is free for the next one), its own counters carried on."""
        self.pages.stop(wait_seconds=5.0)
        stall.restart_in_place({name: getattr(self.health, name) for name in CARRIED_HEALTH})

    def owns(self, release: str) -> bool:
        """Whether this worker exports and detects on `release` (monitor/worker/merge.py)."""
        return owner(release, self.settings.partitions) in self.owned

    async def stage_two(self) -> None:
        """Merge the newest checkpoint of every partition (whoever wrote it), detect on the
        releases this worker owns, and swap in a new snapshot for the scrapes."""
        assignment = self.app.consumer.assignment() if self.app.consumer else set()
        self.owned = frozenset(tp.partition for tp in assignment
                               if tp.topic == self.settings.topic_decisions)
        prefix = f"{self.settings.app_id}:{self.settings.topic_decisions}:".encode()
        for key, blob in (await self.partials.poll()).items():
            if key.startswith(prefix):
                try:
                    self.merger.update(key, blob)
                except ValueError as exc:  # another version or layout: say so, go on
                    log.warning("checkpoint %r not merged: %s", key, exc)
        await self._detect()
        await self.partitions.refresh_local()
        self.refresh()

    async def _detect(self) -> None:
        """Run the detectors of owned releases on windows every partition has closed;
        publish new references so that a restarted or second worker uses the same ones."""
        frozen_before = dict(self.drift.references)
        try:
            with self.tracer.start_as_current_span("ragmon.detect"):
                raised = self.merger.detect(self.owns)
                self.drift_view = self.drift.view(self.owns)
        except Exception:  # detection must never stop the fold
            log.exception("drift detection failed")
            self.health.errors += 1
            return
        self._calibrate_soon()
        for item in raised:
            log.warning("ragmon alarm %s", json.dumps(to_record(item)))
        for release, reference in self.drift.references.items():
            if frozen_before.get(release) is not reference:
                log.info("reference for release %s %s (%d traces)", release,
                         "grew" if reference.growths else "frozen", reference.traces)
                await self._retrying(partial(self._publish_reference, release,
                                             reference.to_bytes()),
                                     f"reference {release}: publish")

    def _calibrate_soon(self) -> None:
        """Thresholds of new references are simulated in a thread (seconds of CPU): the
        fold and the consumer's heartbeats go on; those streams say insufficient data."""
        if self.drift.calibrated or (self.calibrating and not self.calibrating.done()):
            return

        async def calibrate() -> None:
            started = time.perf_counter()
            try:
                await _in_daemon_thread(self.drift.calibrate)
            except Exception:
                log.exception("threshold calibration failed")
                self.health.errors += 1
                return
            self.drift_view = self.drift.view(self.owns)
            log.info("thresholds calibrated for %d streams in %.1f s",
                     len(self.drift.detectors), time.perf_counter() - started)

        self.calibrating = asyncio.get_running_loop().create_task(calibrate())

    async def _publish_reference(self, release: str, blob: bytes) -> None:
        sent = await self.references_topic.send(key=release.encode(), value=blob, partition=0)
        await sent
        self.references.published[release.encode()] = blob

    async def poll_references(self) -> None:
        """Install references (and apply freeze requests) new on the references topic."""
        await self.references.poll()
        self.drift_view = self.drift.view(self.owns)
        self._calibrate_soon()

    async def _load_references(self) -> None:
        await self.references.load()
        self.drift_view = self.drift.view(self.owns)
        self._calibrate_soon()

    async def _retrying(self, attempt: Callable[[], Awaitable[T]], what: str) -> T:
        """Retry broker I/O with backoff instead of letting it escape the agent: the batch
        stays unacknowledged meanwhile, so nothing is lost and nothing is acked early."""
        delay = 0.5
        while True:
            try:
                return await attempt()
            except Exception:
                self.health.errors += 1
                log.exception("%s failed; retrying in %.1f s", what, delay)
                await asyncio.sleep(delay)
                delay = min(2 * delay, 30.0)

    async def _dead_letter(self, event: Any, rejection: Rejection) -> None:
        message = event.message
        headers = {
            "ragmon.reason": rejection.reason.encode(),
            "ragmon.detail": rejection.detail.encode()[:512],
            "ragmon.payload": payload_form(rejection.payload).encode(),
            "ragmon.source.topic": str(message.topic).encode(),
            "ragmon.source.partition": str(message.partition).encode(),
            "ragmon.source.offset": str(message.offset).encode(),
        }
        await self.dlq.send(key=message.key, value=rejection.payload, headers=headers)
        self.health.dlq_produced += 1

    def refresh(self) -> None:
        """Swap in a new snapshot for the scrapes: the owned releases' merged cells, and
        this worker's own input counters and health."""
        self.health.partitions = len(self.owned)
        self.health.windows_skipped = self.merger.skipped
        cells = self.merger.table().only(self.owns)
        self.health.releases_owned = len({key[0] for key in cells})
        local = self.partitions.local or Local(0.0, 0, {})
        watermark = local.watermark
        self.health.watermark_lag = max(time.time() - watermark, 0.0) if watermark > 0 else 0
        with self.tracer.start_as_current_span("ragmon.export"):
            counters = self.merger.counters(self.partitions.state_key(p) for p in self.owned)
            snapshot = snapshot_from(self.drift.layout, local, self.health,
                                     self.drift_view, cells, counters)
            self.pages.offer(snapshot)  # if the page process asked for one


def build(settings: Settings) -> Worker:
    """The Faust app: one consumer group (`app_id`), raw topics, three agents, a timer."""
    app = faust.App(
        settings.app_id,
        broker=[f"kafka://{server}" for server in settings.bootstrap_servers.split(",")],
        broker_credentials=credentials(settings),
        value_serializer="raw",
        key_serializer="raw",
        topic_partitions=settings.partitions,
        web_enabled=False,
        # Apache Kafka refuses sessions under 6 s; the embedded broker admits a member
        # after ~half the session timeout (ARCHITECTURE.md): both are settings.
        broker_session_timeout=settings.session_timeout_seconds,
        broker_heartbeat_interval=settings.heartbeat_interval_seconds,
        consumer_auto_offset_reset="earliest",
        producer_acks=-1,
        producer_max_request_size=settings.state_max_bytes,
    )
    worker = Worker(settings, app)
    for kind, name in (("decisions", settings.topic_decisions), ("labels", settings.topic_labels),
                       ("feedback", settings.topic_feedback)):
        _agent(worker, kind, app.topic(name, value_serializer="raw", key_serializer="raw"))

    @app.timer(interval=1.0)  # type: ignore[untyped-decorator]
    async def stage_two() -> None:
        try:
            await worker.stage_two()
        except Exception:  # the broker may be away; the next round retries
            worker.health.errors += 1
            log.exception("merging partitions failed")

    @app.timer(interval=5.0)  # type: ignore[untyped-decorator]
    async def watchdog() -> None:
        try:
            await upkeep.check_stall(worker)
        except Exception:  # the broker may be away; the next look retries
            log.exception("stall check failed")

    @app.timer(interval=TOPIC_CHECK_SECONDS)  # type: ignore[untyped-decorator]
    async def topics_in_shape() -> None:
        # A broker that lost its log lets clients auto-create ragmon's topics with one
        # partition and no compaction: put back what is missing, re-read what is new.
        try:
            await upkeep.check_topics(worker)
        except Exception as exc:  # a layout that cannot be repaired, or the broker away
            worker.health.errors += 1
            log.error("topic check: %s", exc)

    @app.timer(interval=memory.TRIM_SECONDS)  # type: ignore[untyped-decorator]
    async def trim_memory() -> None:
        memory.trim()

    @app.timer(interval=5.0)  # type: ignore[untyped-decorator]
    async def references() -> None:
        if worker.references.loaded:
            try:
                await worker.poll_references()
            except Exception:  # the broker may be away; the next poll retries
                log.exception("polling references failed")

    @app.on_partitions_revoked.connect  # type: ignore[arg-type]
    async def on_revoked(app: faust.App, revoked: set[Any], **_: Any) -> None:
        await worker.partitions.forget({tp.partition for tp in revoked})

    @app.task  # type: ignore[untyped-decorator]
    async def first_snapshot() -> None:
        worker.refresh()

    return worker


def _agent(worker: Worker, kind: str, topic: Any) -> None:
    settings = worker.settings

    async def consume(stream: Any) -> None:
        batches = Batches(worker, kind, stream.noack())
        idle = asyncio.get_running_loop().create_task(batches.flush_when_idle())
        try:
            async for event in batches.stream.events():
                if batches.add(event) >= settings.batch_size:
                    await batches.flush()
        finally:
            idle.cancel()

    consume.__name__ = f"fold_{kind}"
    worker.app.agent(topic, name=f"ragmon.fold_{kind}")(consume)


def credentials(settings: Settings) -> faust.auth.Credentials | None:
    """The connection settings as Faust takes them (the same TLS context as every client)."""
    context = ssl_context(settings)
    if settings.security_protocol.startswith("SASL"):
        password = settings.sasl_password.get_secret_value() if settings.sasl_password else None
        return faust.SASLCredentials(username=settings.sasl_username, password=password,
                                     ssl_context=context, mechanism=settings.sasl_mechanism)
    if context is not None:
        return faust.SSLCredentials(context)
    return None


def _in_daemon_thread(work: Callable[[], None]) -> asyncio.Future[None]:
    """Run `work` in a daemon thread: a calibration (minutes of simulation at worst) never
    holds up the worker's exit, as asyncio.to_thread's pool threads would (the
    interpreter joins those); a threshold not yet calibrated is calibrated on restart."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def settle(error: BaseException | None) -> None:
        if done.done():
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(None)

    def run() -> None:
        error: BaseException | None = None
        try:
            work()
        except BaseException as exc:  # handed to the awaiting task
            error = exc
        with suppress(RuntimeError):  # the loop closed meanwhile: the worker is stopping
            loop.call_soon_threadsafe(settle, error)

    threading.Thread(target=run, name="ragmon-calibration", daemon=True).start()
    return done

