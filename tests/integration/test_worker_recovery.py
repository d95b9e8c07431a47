"""The streaming worker when things go wrong: kill -9, a second worker taking over, a
stalled consumer, a broker that lost its log, offsets beyond the log, checkpoints over
1 MiB. Counts stay exact on both brokers."""

from __future__ import annotations

import contextlib
import json
import signal
import time
from collections import Counter

import pytest
from kafka import KafkaAdminClient, TopicPartition
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata
from workers import (
    OWNED,
    outcome,
    release_traces,
    scrape,
    start_two_workers,
    start_worker,
    stop,
    topics_in_shape,
    wait_for,
)

from monitor.client import ensure_topics, produce
from monitor.ingest.parse import Accepted, Rejection, parse
from monitor.simulate import Simulator
from monitor.worker.connection import kafka_python_options

pytestmark = pytest.mark.integration


def test_kill_9_mid_stream_and_restart_counts_exactly(broker, tmp_path):
    settings = broker.settings()
    sim = Simulator(seed=7, scenario="bad_input", change_at=0)
    messages = list(sim.traces(6000))
    valid = sum(not isinstance(parse(m), Rejection) for m in messages)
    first, port = start_worker(broker, tmp_path, "first")
    produce(settings, settings.topic_decisions, messages[:3000])
    wait_for(lambda: outcome(scrape(port), "folded") >= 1000, what="first worker folding")
    first.kill()  # kill -9: no goodbye, no final commit
    first.wait()
    # After the crash: the rest, producer retries of traces the first worker had folded
    # (the checkpointed de-duplication horizon catches them), and labels of those traces.
    retries = messages[:500]
    retried_valid = sum(not isinstance(parse(m), Rejection) for m in retries)
    early = {json.loads(m)["trace_id"] for m in retries if not isinstance(parse(m), Rejection)}
    labels = [x for x in sim.labels if json.loads(x)["trace_id"] in early]
    assert labels
    produce(settings, settings.topic_decisions, messages[3000:] + retries)
    produce(settings, settings.topic_labels, labels)
    second, port = start_worker(broker, tmp_path, "second")
    try:
        total = len(messages) + len(retries)
        got = wait_for(lambda: (m := scrape(port)) and outcome(m, "read") >= total and m,
                       timeout=90, what="all messages read after the restart")
        time.sleep(2)  # nothing more may arrive: a double count would show now
        got = scrape(port)
        assert outcome(got, "read") == total
        assert outcome(got, "folded") == valid
        assert outcome(got, "duplicates") == retried_valid
        assert release_traces(got) == valid
        joined = ("ragmon_label_events_total", (("kind", "labels"), ("outcome", "joined")))
        assert got[joined] == len(labels)
    finally:
        stop(second)


def test_two_workers_one_killed_the_other_takes_over_exactly(broker, tmp_path):
    settings = broker.settings()
    messages = list(Simulator(seed=7, scenario="bad_input", change_at=0).traces(6000))
    valid = sum(not isinstance(parse(m), Rejection) for m in messages)
    # A survivor whose agent stalls after the takeover restarts itself (monitor/worker/stall.py).
    env = {"RAGMON_STALL_SECONDS": "15"}
    first, port_a, second, port_b = start_two_workers(broker, tmp_path, env)
    try:
        produce(settings, settings.topic_decisions, messages[:3000])
        wait_for(lambda: outcome(scrape(port_a), "read") + outcome(scrape(port_b), "read")
                 >= 1500, what="both workers reading")
        first.kill()  # kill -9 mid-stream: its partitions move to the survivor
        first.wait()
        produce(settings, settings.topic_decisions, messages[3000:])
        wait_for(lambda: scrape(port_b).get(OWNED) == 4, what="the survivor owning all")
        wait_for(lambda: release_traces(scrape(port_b)) >= valid, timeout=150,
                 what="every valid trace counted by the survivor")
        time.sleep(2)  # nothing more may arrive: a double count would show now
        got = scrape(port_b)
        assert release_traces(got) == valid
        assert outcome(got, "folded") == valid
    finally:
        for process in (first, second):
            if process.poll() is None:
                stop(process)


def test_two_workers_merge_every_partition_and_each_release_has_one_owner(broker, tmp_path):
    settings = broker.settings()
    messages = list(Simulator(seed=11, scenario="bad_input", change_at=0).traces(4000))
    traces = [r.event for m in messages if isinstance(r := parse(m), Accepted)]
    expected = Counter(t.system.release for t in traces)
    a, port_a, b, port_b = start_two_workers(broker, tmp_path)
    try:
        produce(settings, settings.topic_decisions, messages)
        wait_for(lambda: sum(release_traces(scrape(p)) for p in (port_a, port_b))
                 >= len(traces), what="every valid trace in the merged cells")
        time.sleep(2)
        got = [scrape(port_a), scrape(port_b)]
        # Partition-level counters: each worker its own partitions; they add up.
        assert sum(outcome(g, "read") for g in got) == len(messages)
        assert sum(outcome(g, "folded") for g in got) == len(traces)
        # Release-level cells: all partitions merged, exported by the release's one owner.
        for release, n in expected.items():
            per_worker = [sum(v for (name, labels), v in g.items()
                              if name == "ragmon_traces_total" and ("dimension", "all") in labels
                              and ("release", release) in labels) for g in got]
            assert sorted(per_worker) == [0, n], release
        assert sum(g[("ragmon_releases_owned", ())] for g in got) == len(expected)
    finally:
        stop(a)
        stop(b)


def test_stall_watchdog_restarts_in_place_and_counts_exactly(broker, tmp_path):
    settings = broker.settings()
    messages = list(Simulator(seed=3).traces(4000))
    # Frozen for longer than the session, so that the group rebalances meanwhile on either
    # broker (Apache Kafka's shortest session is 6 s).
    env = {"RAGMON_STALL_SECONDS": "3", "RAGMON_SESSION_TIMEOUT_SECONDS": "6",
           "RAGMON_HEARTBEAT_INTERVAL_SECONDS": "1"}
    process, port = start_worker(broker, tmp_path, "w", env=env)
    try:
        produce(settings, settings.topic_decisions, messages[:2000])
        wait_for(lambda: release_traces(scrape(port)) == 2000, what="the first half")
        time.sleep(2)  # the last checkpoint's count in the page
        batches = scrape(port)[("ragmon_batches_total", ())]
        # Frozen while decisions arrive: on waking, no batch for longer than the stall
        # limit and unread decisions in its partitions -> it restarts itself in place.
        process.send_signal(signal.SIGSTOP)
        produce(settings, settings.topic_decisions, messages[2000:])
        time.sleep(9)
        process.send_signal(signal.SIGCONT)
        wait_for(lambda: release_traces(scrape(port)) >= 4000, timeout=90,
                 what="every trace after the restart")
        time.sleep(2)
        assert release_traces(scrape(port)) == 4000
        assert process.poll() is None  # the same process (PID), a fresh worker inside
        assert b"restarting in place" in (tmp_path / "w.log").read_bytes()
        # Its own counters carried on, not back to zero.
        assert scrape(port)[("ragmon_batches_total", ())] > batches >= 1
    finally:
        stop(process)


def test_broker_restart_with_an_empty_log_is_detected_and_new_traces_count(broker, tmp_path):
    settings = broker.settings()
    sim = Simulator(seed=3)
    process, port = start_worker(broker, tmp_path)
    try:
        produce(settings, settings.topic_decisions, list(sim.traces(2000)))
        wait_for(lambda: release_traces(scrape(port)) == 2000, what="traces before the restart")
        # The embedded broker keeps its log in memory: a restart empties it; Apache Kafka
        # is formatted afresh (a broker that lost its disk).
        broker.restart(keep_log=False)
        # Clients auto-create topics on such a broker (one partition, not compacted): the
        # worker puts its topics back in shape before traffic comes back (traffic into an
        # auto-created one-partition topic is refused: it would move trace ids).
        wait_for(lambda: topics_in_shape(settings), timeout=60, what="topics repaired")
        produce(settings, settings.topic_decisions, list(sim.traces(1000)))
        # Offsets start again at 0: every new trace counts once. Records read twice (a
        # commit of the old log's offsets that lands late makes the topic check rewind a
        # partition again) are skipped by the new checkpoints, not counted twice.
        got = wait_for(lambda: (m := scrape(port)).get(("ragmon_state_lost_total", ())) and
                       release_traces(m) == 1000 and m, timeout=90,
                       what="new traces counted after the restart")
        time.sleep(3)
        assert release_traces(scrape(port)) == 1000
        assert got[("ragmon_state_lost_total", ())] >= 1
    finally:
        stop(process)


def test_offsets_committed_beyond_the_log_are_reset_when_a_worker_starts(broker, tmp_path):
    """A group whose committed offsets lie beyond the log's end (committed against a log
    the broker has since lost) would make Faust skip every trace of the new log."""
    settings = broker.settings(app_id="ragmon-test")
    ensure_topics(settings)
    messages = list(Simulator(seed=5).traces(1000))
    valid = sum(isinstance(parse(m), Accepted) for m in messages)
    produce(settings, settings.topic_decisions, messages)
    admin = KafkaAdminClient(**kafka_python_options(settings))
    try:
        stale = {TopicPartition(settings.topic_decisions, p): OffsetAndMetadata(5000, "", -1)
                 for p in range(settings.partitions)}

        def committed() -> dict:
            with contextlib.suppress(KafkaError):  # a new cluster's coordinator comes up first
                admin.alter_group_offsets(settings.app_id, stale)
                return {tp: m.offset for tp, m in admin.list_group_offsets(
                    {settings.app_id: list(stale)})[settings.app_id].items()}
            return {}

        wait_for(lambda: committed() == dict.fromkeys(stale, 5000), what="stale offsets")
    finally:
        admin.close()
    process, port = start_worker(broker, tmp_path)
    try:
        wait_for(lambda: release_traces(scrape(port)) == valid, timeout=90,
                 what="every trace of the log read from its start")
        assert b"beyond the log's end" in (tmp_path / "worker.log").read_bytes()
    finally:
        stop(process)


def test_checkpoints_over_one_mebibyte_are_written_and_restored(broker, tmp_path):
    """Labels waiting for their traces live in the checkpoint: 30,000 of them make each
    partition's checkpoint ~1.5 MB, over Kafka's 1 MB default record size. The worker
    writes them (its topics and producer allow `state_max_bytes`) and a restart after
    kill -9 restores every waiting label."""
    settings = broker.settings()
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    labels = [json.dumps({"schema": "rag-label/1", "trace_id": f"waiting-{'x' * 80}-{i:06d}",
                          "ts": now, "source": "judge", "answerable": True}).encode()
              for i in range(30_000)]
    waiting = ("ragmon_label_events_waiting", (("kind", "labels"),))
    big = {"RAGMON_BATCH_SIZE": "4000"}
    first, port = start_worker(broker, tmp_path, "first", env=big)
    produce(settings, settings.topic_labels, labels)
    got = wait_for(lambda: (m := scrape(port)).get(waiting) == len(labels) and m,
                   timeout=120, what="every label waiting")
    assert got[("ragmon_state_record_bytes", ())] > 1024 * 1024
    first.kill()
    first.wait()
    second, port = start_worker(broker, tmp_path, "second", env=big)
    try:
        got = wait_for(lambda: (m := scrape(port)).get(waiting) == len(labels) and m,
                       timeout=90, what="waiting labels restored after kill -9")
        assert outcome(got, "read") == 0
    finally:
        stop(second)
