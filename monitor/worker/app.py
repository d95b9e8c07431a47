"""Faust wiring only: topics, batches, timers, the metrics endpoint. The fold is `Pipeline`.

Topics carry raw bytes (typed Faust records crash agents on undecodable input and let NaN
through); validation is ours. Faust's consumer hands over whole fetches, below its per-event
stream (monitor/worker/batches.py: Faust's per-message path cost ~200 us a message);
`Worker.take` groups a batch by topic and partition, folds each group into that partition's
pipeline, dead-letters what was rejected (reason and source topic/partition/offset in
headers) and never lets an exception escape: a message whose fold fails is set apart and
dead-lettered with reason `worker_error`; any other failure of a batch restarts the worker
in place (its checkpoints make that exact).

Exact counts under at-least-once delivery: each partition's pipeline is checkpointed to the
state topic with the last offset applied per source topic after every batch, and a batch is
acknowledged only after its fold and checkpoints, so the committed offset never passes a
checkpoint. A worker that gains a partition (restart, rebalance) loads its checkpoint and
skips offsets it already holds: Kafka's redelivery and Faust's replay after a rebalance
(faust-streaming #502) count once. Traces, labels and feedback are keyed by trace_id, so
partition p of each topic belongs to the same state. Each batch's first sightings of trace
ids go to the seen topic before the checkpoint, so the de-duplication horizon survives too.
Checkpoints and restores live in monitor/worker/partitions.py, the partition states and the
fold in the states process (monitor/worker/states.py), the checkpoint format in
monitor/aggregate/checkpoint.py.

Stage two (monitor/worker/merge.py): once a second every worker merges the newest checkpoint
of every partition and exports, and detects on, the releases it owns.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any, Literal, TypeVar, cast

import faust

from monitor import memory
from monitor.aggregate.layout import from_settings
from monitor.aggregate.pipeline import EventKind
from monitor.detect.drift import Drift, DriftConfig, DriftView
from monitor.detect.watch import Watch, to_record
from monitor.export.http import Limits
from monitor.export.pages import Pages
from monitor.export.snapshot import Health, Local, snapshot_from
from monitor.settings import Settings
from monitor.worker import assignor, stall, telemetry, topics, upkeep
from monitor.worker.batches import Batch, BatchApp, BatchConsumer
from monitor.worker.dead import DeadLetters
from monitor.worker.merge import Merger, owner
from monitor.worker.partitions import Group, Partitions
from monitor.worker.reference_sync import ReferenceSync
from monitor.worker.spans import SpanStage, Where
from monitor.worker.threads import in_daemon_thread
from monitor.worker.wiring import credentials, every, raw_topic, retrying

__all__ = ["Worker", "build", "credentials"]

log = logging.getLogger("ragmon.worker")
TOPIC_CHECK_SECONDS = 10.0
FETCH_BYTES = 16 * 1024 * 1024  # per partition and fetch
T = TypeVar("T")
TopicKind = EventKind | Literal["otlp", "spans"]  # a topic's batch: events, or otlp spans
# The worker's own counters, carried through a restart in place (inputs: the checkpoints').
CARRIED_HEALTH = ("dlq_produced", "batch_seconds", "batches", "batches_dropped",
                  "worker_errors", "redelivered_skipped", "checkpoints", "state_lost")
class Worker:
    """The Faust app and the per-partition state it folds into; `build()` makes one."""

    def __init__(self, settings: Settings, app: faust.App) -> None:
        self.settings = settings
        self.app = app
        self.folding = asyncio.Lock()
        self.pages = Pages(settings.metrics_host, settings.metrics_port, settings.series_budget,
                           settings.metrics_detail == "full", settings.metrics_refresh_seconds,
                           settings.web_config_file,
                           Limits(max_connections=settings.metrics_max_connections,
                                  header_seconds=settings.metrics_header_timeout_seconds))
        self.health = Health(state_max_bytes=settings.state_max_bytes)
        for name, value in stall.carried().items():  # after a restart in place
            if name in CARRIED_HEALTH:
                setattr(self.health, name, type(getattr(self.health, name))(value))
        self.dead = DeadLetters(raw_topic(app, settings.topic_dlq), self.health)
        self.partitions = Partitions(settings, raw_topic(app, settings.topic_state),
                                     raw_topic(app, settings.topic_seen), self.health)
        self.references_topic = raw_topic(app, settings.topic_references)
        # Stage two: every partition's checkpoint merged; this worker detects on and
        # exports the releases it owns (monitor/worker/merge.py).
        self.drift = Drift(from_settings(settings), DriftConfig.from_settings(settings),
                           arm_inline=False)
        self.arming: asyncio.Task[None] | None = None
        self.references = ReferenceSync(settings, self.drift)
        self.watch = Watch(self.drift, settings.window_seconds, settings.allowed_lateness_seconds)
        self.merger = Merger(self.drift.layout, self.watch)
        self.state_tail = topics.Tail(settings, settings.topic_state, settings.partitions)
        self.owned: frozenset[int] = frozenset()  # decisions partitions assigned here
        self.drift_view: DriftView = self.drift.view()
        self.tracer = telemetry.tracer(settings)
        self.last_progress = time.monotonic()
        self.topic_ids: dict[str, str] = {}  # of the input topics, as last seen
        self.kinds: tuple[tuple[TopicKind, str], ...] = (
            ("decisions", settings.topic_decisions), ("labels", settings.topic_labels),
            ("feedback", settings.topic_feedback))
        self.topics = frozenset(topic for _, topic in self.kinds)  # partition p: one state
        # The otlp intake (monitor/worker/spans.py): its two topics are read in each batch
        # before the decisions it produces come back through the decisions topic.
        self.spans: SpanStage | None = None
        if settings.otlp_topic:
            self.spans = SpanStage(settings, app, self.health, self.dead.send)
            self.kinds = (("otlp", settings.otlp_topic), ("spans", settings.topic_spans),
                          *self.kinds)

    async def take(self, batch: Batch) -> None:
        """Fold a fetch (decisions, labels, feedback: one topic at a time), checkpoint the
        partitions it touched, then acknowledge it. A fetch from before a rebalance or a
        rewind is left to be read again (monitor/worker/batches.py). If folding fails,
        later batches must not fold past this one (their offsets would make a restore
        skip it): the worker starts again from its checkpoints, as after kill -9."""
        consumer = cast(BatchConsumer, self.app.consumer)
        # One batch at a time, and never during a revoke or a rewind (they take the lock
        # too): a checkpoint never holds a batch's counts without its offsets, nor a
        # de-duplication segment of a batch it does not hold.
        async with self.folding:
            if not consumer.current(batch):
                self.health.batches_dropped += 1
                return
            replaced = await upkeep.log_replaced(self, batch)
            if not replaced:
                await self._fold_whole(batch)
        if replaced:  # left unacknowledged: the topic check reads it again from 0
            self.health.batches_dropped += 1
            await upkeep.check_topics(self)

    async def _fold_whole(self, batch: Batch) -> None:
        consumer = cast(BatchConsumer, self.app.consumer)
        try:
            for kind, topic in self.kinds:
                records = {tp.partition: found for tp, found in batch.records.items()
                           if tp.topic == topic}
                if records:
                    events = sum(map(len, records.values()))
                    attributes: dict[str, str | int] = {"ragmon.kind": kind,
                                                        "ragmon.events": events}
                    with self.tracer.start_as_current_span("ragmon.batch",
                                                           attributes=attributes):
                        await self._take_kind(kind, topic, records)
        except Exception:
            log.exception("folding a batch of %d records failed: restarting in place",
                          len(batch))
            self.restart_in_place()
        for tp, found in batch.records.items():
            consumer.acknowledge(tp, [record.offset for record in found])

    async def _take_kind(self, kind: TopicKind, topic: str,
                         records: dict[int, Sequence[Any]]) -> None:
        if kind == "otlp" or kind == "spans":
            assert self.spans is not None  # their topics are read only with the intake on
            if kind == "otlp":
                await self.retrying(partial(self.spans.forward, [
                    record for _, found in sorted(records.items()) for record in found]),
                    "otlp: forwarding spans")
            else:
                await self.retrying(partial(self.spans.assemble, records),
                                    "spans: assembling decisions")
        else:
            await self._fold_batch(kind, topic, records)

    async def tick_spans(self) -> None:
        """Assemble the traces due in quiet span partitions (monitor/worker/spans.py). The
        assignment is read under the lock `forget` takes: no revoked buffer is restored."""
        if self.spans is None:
            return
        async with self.folding:
            assigned = {(tp.topic, tp.partition) for tp in self.app.consumer.assignment()
                        if tp.topic in (self.settings.topic_spans, self.settings.otlp_topic)}
            await self.retrying(partial(self.spans.tick, assigned), "spans: quiet partitions")
            await self.retrying(self.spans.remark, "otlp: marks")

    async def _fold_batch(self, kind: EventKind, topic: str,
                          records: dict[int, Sequence[Any]]) -> None:
        started = time.perf_counter()
        if not self.references.loaded:
            await self.retrying(self._load_references, "loading references")
        # Every partition assigned here at once (restores wait on the broker, in parallel).
        assigned = {tp.partition for tp in self.app.consumer.assignment()
                    if tp.topic in self.topics} | set(records)
        await self.retrying(partial(self.partitions.recover_all, assigned),
                             f"partitions {sorted(assigned)}: recovery")
        groups = [Group(partition, topic, [r.offset for r in found],
                        [r.value if isinstance(r.value, bytes) else b"" for r in found])
                  for partition, found in sorted(records.items())]
        with self.tracer.start_as_current_span("ragmon.fold"):
            folded = await self.partitions.fold(kind, groups)
        for done in folded:
            of_partition = records[done.partition]
            if any(rejection.reason == "worker_error" for _, rejection in done.dead):
                self.health.worker_errors += 1  # the states process printed the traceback
            for index, rejection in done.dead:
                await self.dead.of_message(of_partition[index], rejection)
        if folded:
            await self.retrying(partial(self.partitions.checkpoint, folded), "checkpoints")
        self.health.batch_seconds += time.perf_counter() - started
        self.health.batches += 1
        self.last_progress = time.monotonic()

    async def forget(self, partitions: set[int], spans: set[Where] | None = None) -> None:
        """Drop the states of `partitions` (and the span buffers of `spans`) once the
        batch folding now is checkpointed (a revoke waits for it: its new owner restores
        that checkpoint)."""
        async with self.folding:
            await self.partitions.forget(partitions)
            if self.spans is not None:
                self.spans.forget(spans or set())

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
        releases this worker owns, and swap in a new snapshot for the scrapes.

        Every checkpoint read is taken in turn, not only the newest of each partition:
        each carries the windows its partition closed last (`RECENT_CLOSED`), and a worker
        reading a backlog writes several a second; taking only the newest skipped the
        windows between (a reference frozen on a window whose successors were never
        judged had no verdict, and so no threshold, until traffic came again)."""
        assignment = self.app.consumer.assignment() if self.app.consumer else set()
        self.owned = frozenset(tp.partition for tp in assignment
                               if tp.topic == self.settings.topic_decisions)
        prefix = f"{self.settings.app_id}:{self.settings.topic_decisions}:".encode()
        for key, blob in await self.state_tail.poll():
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
            self.health.worker_errors += 1
            return
        self._arm_soon()
        for item in raised:
            log.warning("ragmon alarm %s", json.dumps(to_record(item)))
        for release, reference in self.drift.references.items():
            if frozen_before.get(release) is not reference:
                log.info("reference for release %s %s (%d traces)", release,
                         "grew" if reference.growths else "frozen", reference.traces)
                await self.retrying(partial(self._publish_reference, release,
                                             reference.to_bytes()),
                                     f"reference {release}: publish")

    def _arm_soon(self) -> None:
        """Thresholds of new references are simulated in a thread (seconds of CPU): the
        fold and the consumer's heartbeats go on; those streams say insufficient data."""
        if self.drift.armed or (self.arming and not self.arming.done()):
            return

        async def arm() -> None:
            started = time.perf_counter()
            try:
                await in_daemon_thread(self.drift.arm)
            except Exception:
                log.exception("threshold calibration failed")
                self.health.worker_errors += 1
                return
            self.drift_view = self.drift.view(self.owns)
            log.info("thresholds calibrated for %d streams in %.1f s",
                     len(self.drift.detectors), time.perf_counter() - started)

        self.arming = asyncio.get_running_loop().create_task(arm())

    async def _publish_reference(self, release: str, blob: bytes) -> None:
        sent = await self.references_topic.send(key=release.encode(), value=blob, partition=0)
        await sent
        self.references.published[release.encode()] = blob

    async def poll_references(self) -> None:
        """Load the references (an idle worker too: /readyz waits for them), then install
        those (and apply freeze requests) new on the references topic."""
        if not self.references.loaded:
            await self._load_references()
            return
        await self.references.poll()
        self.drift_view = self.drift.view(self.owns)
        self._arm_soon()

    async def _load_references(self) -> None:
        await self.references.load()
        self.drift_view = self.drift.view(self.owns)
        self._arm_soon()

    async def retrying(self, attempt: Callable[[], Awaitable[T]], what: str) -> T:
        return await retrying(attempt, what, self.health)

    def refresh(self) -> None:
        """Swap in a new snapshot for the scrapes: the owned releases' merged cells, and
        this worker's own input counters and health."""
        self.health.partitions_owned = len(self.owned)
        self.health.detection_windows_skipped = self.merger.skipped
        cells = self.merger.table().only(self.owns)
        self.health.releases_owned = len({key[0] for key in cells})
        local = self.partitions.local or Local(0.0, 0, {})
        lag = time.time() - local.watermark if local.watermark > 0 else 0.0
        self.health.watermark_lag_seconds = max(lag, 0.0)
        with self.tracer.start_as_current_span("ragmon.export"):
            counters = self.merger.counters(self.partitions.state_key(p) for p in self.owned)
            snapshot = snapshot_from(self.drift.layout, local, self.health,
                                     self.drift_view, cells, counters,
                                     self.spans.counts() if self.spans else None)
            self.pages.offer(snapshot, self.readiness())  # the snapshot if asked for

    def readiness(self) -> tuple[bool, str]:
        """Whether this worker is ready (/readyz), and if not, why, in one line. A stalled
        fold restarts itself (monitor/worker/stall.py) and is not ready until it has its
        partitions again; a blocked loop sends nothing, which the page process reports."""
        if not self.references.loaded:
            return False, "references not loaded yet"
        if not self.owned:
            return False, ("no partitions of " + self.settings.topic_decisions +
                           " assigned (joining the group, or more workers than partitions)")
        if self.partitions.recovering:
            return False, "restoring partition checkpoints"
        return True, "ready"


def build(settings: Settings) -> Worker:
    """The Faust app: one consumer group (`app_id`), raw topics read in whole fetches, timers."""
    app = BatchApp(
        settings.app_id,
        broker=[f"kafka://{server}" for server in settings.bootstrap_servers.split(",")],
        broker_credentials=credentials(settings),
        value_serializer="raw",
        key_serializer="raw",
        topic_partitions=settings.partitions,
        web_enabled=False,
        PartitionAssignor=assignor.SizedAssignor,  # topics that came back smaller
        # Apache Kafka refuses sessions under 6 s; the embedded broker admits a member
        # after ~half the session timeout (ARCHITECTURE.md): both are settings.
        broker_session_timeout=settings.session_timeout_seconds,
        broker_heartbeat_interval=settings.heartbeat_interval_seconds,
        broker_max_poll_records=settings.batch_size,
        # aiokafka fetches a partition again only once its last fetch is taken, and a
        # fetch of the embedded broker took ~0.5 s: Faust's default of 1 MiB a partition
        # (~1,300 traces) held the worker to ~9k traces/s (benchmarks/RESULTS.md).
        consumer_max_fetch_size=FETCH_BYTES,
        consumer_auto_offset_reset="earliest",
        producer_acks=-1,
        producer_max_request_size=settings.state_max_bytes,
        # A round trip a batch: 16 KiB cost 22 us an assembled decision (RESULTS.md, s. 48)
        producer_max_batch_size=256 * 1024,
    )
    worker = Worker(settings, app)
    app.take, app.gather = worker.take, (settings.batch_size, settings.batch_seconds)
    for _, name in worker.kinds:  # subscribed; their records go to `Worker.take` whole
        app.topics.add(raw_topic(app, name))

    # Each timer's failure is logged and the next round retries (the broker may be away).
    every(app, 1.0, worker.stage_two, "merging partitions", worker.health)
    every(app, 5.0, partial(upkeep.check_stall, worker), "stall check")
    # A broker that lost its log lets clients auto-create ragmon's topics with one
    # partition and no compaction: put back what is missing, re-read what is new.
    every(app, TOPIC_CHECK_SECONDS, partial(upkeep.check_topics, worker), "topic check",
          worker.health, traceback=False)  # a layout that cannot be repaired: one line
    every(app, memory.TRIM_SECONDS, memory.trim, "trimming memory")
    every(app, 5.0, worker.poll_references, "polling references")
    if worker.spans is not None:
        every(app, 1.0, worker.tick_spans, "assembling quiet span partitions")

    @app.on_partitions_revoked.connect  # type: ignore[arg-type]
    async def on_revoked(app: faust.App, revoked: set[Any], **_: Any) -> None:
        await worker.forget({tp.partition for tp in revoked if tp.topic in worker.topics},
                            {(tp.topic, tp.partition) for tp in revoked
                             if tp.topic in (settings.topic_spans, settings.otlp_topic)})

    @app.task  # type: ignore[untyped-decorator]
    async def first_snapshot() -> None:
        worker.refresh()

    return worker
