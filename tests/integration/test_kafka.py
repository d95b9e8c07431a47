"""ragmon on the Kafka users run: Apache Kafka 3.8 with its defaults, a SASL_SSL listener
with SCRAM users and a CA made here, real log compaction, and the failures an operator
meets first (wrong password, untrusted certificate, no broker, SIGTERM in every state).

Every process is real: the broker from KAFKA_HOME (tests/brokers.py), `ragmon worker` / `produce` /
`reference` as users run them, the client SDK, HTTP scrapes of /metrics.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from brokers import KAFKA_MISSING, PASSWORD, ApacheKafka, kafka_available, kafka_required
from workers import outcome, release_traces, scrape, start_worker, stop, wait_for

from monitor.broker import free_port
from monitor.client import DecisionEmitter, produce
from monitor.ingest.parse import Rejection, parse
from monitor.settings import load
from monitor.simulate import Simulator

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not kafka_available() and not kafka_required(),
                                 reason=KAFKA_MISSING)]


def ragmon(*args: str, env: dict[str, str], cwd: Path,
           timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "monitor.cli", *args], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=timeout, cwd=cwd, check=False,
                          stdin=subprocess.DEVNULL)


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr[-3000:]
    assert "Traceback" not in stderr
    return lines[0]


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    """One SASL_SSL broker for the module: its tests only connect, or count on their own
    consumer group (a broker start is ~5 s)."""
    with ApacheKafka(tmp_path_factory.mktemp("secure"), secure=True) as running:
        yield running


def test_default_worker_on_default_kafka_counts_a_file_as_replay_does(tmp_path):
    """Nothing set but the bootstrap server: the worker joins, and its release cells equal
    those of `ragmon replay` over the same file (produced with `ragmon produce`)."""
    sim = Simulator(seed=5, scenario="bad_input", change_at=0)
    path = tmp_path / "traces.jsonl"
    path.write_bytes(b"\n".join(sim.traces(3000)) + b"\n")
    with ApacheKafka(tmp_path) as kafka:
        env = {"RAGMON_BOOTSTRAP_SERVERS": kafka.bootstrap}
        process, port = start_worker(kafka, tmp_path, app_id="ragmon")  # default app id
        try:
            sent = ragmon("produce", str(path), env=env, cwd=tmp_path)
            assert sent.returncode == 0, sent.stderr[-2000:]
            replay = json.loads(ragmon("replay", str(path), "--json", env={}, cwd=tmp_path).stdout)
            expected = sum(r["total"]["traces"] for r in replay["releases"].values())
            got = wait_for(lambda: (m := scrape(port)) and release_traces(m) >= expected and m,
                           timeout=90, what="the file counted")
            time.sleep(2)
            got = scrape(port)
            assert outcome(got, "read") == replay["input"]["read"]
            assert outcome(got, "folded") == replay["input"]["folded"]
            for release, cells in replay["releases"].items():
                for decision, n in cells["total"]["decisions"].items():
                    key = ("ragmon_traces_total", (("decision", decision), ("dimension", "all"),
                                                   ("release", release), ("value", "all")))
                    assert got.get(key, 0) == n, (release, decision)
        finally:
            stop(process)


def test_sasl_ssl_with_the_right_credentials_counts_exactly(secure, tmp_path):
    env = secure.secure_env()
    settings = load(**{k.removeprefix("RAGMON_").lower(): v for k, v in env.items()})
    sim = Simulator(seed=9, scenario="bad_input", change_at=0)
    messages = list(sim.traces(2000))
    valid = sum(not isinstance(parse(m), Rejection) for m in messages)
    path = tmp_path / "traces.jsonl"
    path.write_bytes(b"\n".join(messages[:1500]) + b"\n")
    process, port = start_worker(secure, tmp_path, env=env)
    try:
        sent = ragmon("produce", str(path), env=env, cwd=tmp_path)
        assert sent.returncode == 0, sent.stderr[-2000:]
        listing = ragmon("reference", "list", "--json", env=env, cwd=tmp_path)
        assert listing.returncode == 0, listing.stderr[-2000:]
        assert isinstance(json.loads(listing.stdout), list)
        produce(settings, settings.topic_decisions, messages[1500:])  # kafka-python, in process
        emitter = DecisionEmitter(settings)
        for _ in range(100):
            emitter.decision(release="sdk-1", decision="answer", slice={"language": "en"})
        emitter.close(timeout_seconds=30)
        assert emitter.counts["sent"] == 100 and emitter.counts["failed"] == 0
        wait_for(lambda: release_traces(scrape(port)) >= valid + 100, timeout=90,
                 what="every valid trace counted over SASL_SSL")
        time.sleep(2)
        got = scrape(port)
        assert release_traces(got) == valid + 100
        assert outcome(got, "read") == len(messages) + 100
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as page:
            metrics = page.read().decode()
    finally:
        stop(process)
    # The password is a secret: never in a log, a page of metrics or --help.
    text = (tmp_path / "worker.log").read_text(errors="replace") + sent.stdout + sent.stderr
    text += metrics + listing.stdout + listing.stderr
    assert PASSWORD not in text
    assert PASSWORD not in ragmon("worker", "--help", env=env, cwd=tmp_path).stdout


@pytest.mark.parametrize("case", ["wrong password", "untrusted CA", "no broker"])
@pytest.mark.parametrize("command", [["worker"], ["produce", "-"], ["reference", "list"]])
def test_a_broker_that_cannot_be_used_is_one_line_and_an_exit(secure, tmp_path, case, command):
    env = {**secure.secure_env(), "RAGMON_CONNECT_TIMEOUT_SECONDS": "5"}
    # No broker: a port bound here and never listened on refuses every connection, and no
    # other process can take it meanwhile (a fixed free-looking port once answered TLS:
    # another test's broker had it).
    nothing = socket.socket()
    nothing.bind(("127.0.0.1", 0))
    if case == "wrong password":
        env["RAGMON_SASL_PASSWORD"] = "not-the-password"
    elif case == "untrusted CA":
        env["RAGMON_SSL_CAFILE"] = str(secure.other_ca_file)
    else:
        env["RAGMON_BOOTSTRAP_SERVERS"] = f"127.0.0.1:{nothing.getsockname()[1]}"
    started = time.monotonic()
    try:
        result = ragmon(*command, env=env, cwd=tmp_path, timeout=60)
    finally:
        nothing.close()
    elapsed = time.monotonic() - started
    assert result.returncode != 0
    line = one_line(result.stderr)
    assert env["RAGMON_BOOTSTRAP_SERVERS"] in line
    expected = {"wrong password": "Authentication failed", "untrusted CA": "not trusted",
                "no broker": "within 5 s"}[case]
    assert expected in line, line
    assert "not-the-password" not in result.stderr + result.stdout
    # Generous against a loaded machine; a hang or a 30 s client default would exceed it.
    assert elapsed < 5 + 20, elapsed


def test_the_sasl_password_from_a_mounted_file(secure, tmp_path):
    """RAGMON_SASL_PASSWORD_FILE, as a Kubernetes Secret volume mounts it: the right file
    connects, a wrong one is one line in seconds; neither password is ever printed."""
    env = {k: v for k, v in secure.secure_env().items() if k != "RAGMON_SASL_PASSWORD"}
    outputs = ""
    for password, ok in ((PASSWORD, True), ("not-the-password", False)):
        path = tmp_path / f"password-{ok}"
        path.write_text(password + "\n")
        started = time.monotonic()
        result = ragmon("produce", "-", env={**env, "RAGMON_SASL_PASSWORD_FILE": str(path),
                                             "RAGMON_CONNECT_TIMEOUT_SECONDS": "5"},
                        cwd=tmp_path, timeout=60)
        outputs += result.stdout + result.stderr
        if ok:
            assert result.returncode == 0, result.stderr[-2000:]
            assert "produced 0 messages" in result.stdout
        else:
            assert result.returncode != 0
            line = one_line(result.stderr)
            assert secure.secure_bootstrap in line and "Authentication failed" in line, line
            assert time.monotonic() - started < 5 + 20
    assert PASSWORD not in outputs and "not-the-password" not in outputs


def test_the_sdk_with_a_wrong_password_counts_failures_and_closes_in_time(secure):
    env = {**secure.secure_env(), "RAGMON_SASL_PASSWORD": "not-the-password"}
    settings = load(**{k.removeprefix("RAGMON_").lower(): v for k, v in env.items()})
    emitter = DecisionEmitter(settings, delivery_timeout_seconds=4)
    accepted = sum(emitter.decision(release="r1", decision="answer") for _ in range(50))
    assert accepted == 50  # the request path never waits for the broker
    started = time.monotonic()
    emitter.close(timeout_seconds=3)
    assert time.monotonic() - started < 3 + 2
    assert emitter.counts["sent"] == 0
    assert emitter.counts["failed"] + emitter.counts["dropped"] == 50


def test_compacted_state_topics_restore_exact_counts_after_kill_9(tmp_path):
    """The broker compacts aggressively (1 s segments, any dirty ratio): the checkpoints and
    de-duplication segments a restarted worker reads are what compaction left."""
    compacting = {"log.roll.ms": "1000", "log.cleaner.min.cleanable.ratio": "0.01",
                  "log.cleaner.backoff.ms": "300", "log.segment.delete.delay.ms": "100"}
    sim = Simulator(seed=7, scenario="bad_input", change_at=0)
    messages = list(sim.traces(6000))
    valid = sum(not isinstance(parse(m), Rejection) for m in messages)
    with ApacheKafka(tmp_path, properties=compacting) as kafka:
        settings = kafka.settings()
        first, port = start_worker(kafka, tmp_path, "first")
        # Spread over ~12 s: checkpoints in many 1 s segments, which the cleaner compacts
        # (it never touches the active one).
        for start in range(0, 3000, 100):
            produce(settings, settings.topic_decisions, messages[start:start + 100])
            time.sleep(0.4)
        wait_for(lambda: outcome(scrape(port), "folded") >= 2500, what="first worker folding")
        cleaned = wait_for(lambda: _cleaned(kafka.data, settings.topic_state), timeout=60,
                           what="the log cleaner compacting the state topic")
        first.kill()
        first.wait()
        retries = messages[:500]
        retried_valid = sum(not isinstance(parse(m), Rejection) for m in retries)
        produce(settings, settings.topic_decisions, messages[3000:] + retries)
        second, port = start_worker(kafka, tmp_path, "second")
        try:
            total = len(messages) + len(retries)
            wait_for(lambda: outcome(scrape(port), "read") >= total, timeout=90,
                     what="all messages read after the restart")
            time.sleep(2)
            got = scrape(port)
            assert outcome(got, "read") == total
            assert outcome(got, "folded") == valid
            assert outcome(got, "duplicates") == retried_valid
            assert release_traces(got) == valid
        finally:
            stop(second)
    assert cleaned


def _cleaned(data: Path, topic: str) -> bool:
    """The log cleaner has rewritten a segment of `topic` (its log says so)."""
    log = (data / "server.log").read_text(errors="replace")
    return any(f"{topic}-" in line and "LogCleaner" in line and "clean" in line.lower()
               for line in log.splitlines())


def test_metrics_port_in_use_is_one_line(tmp_path):
    import socket

    with ApacheKafka(tmp_path) as kafka, socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = ragmon("worker", env={"RAGMON_BOOTSTRAP_SERVERS": kafka.bootstrap,
                                       "RAGMON_METRICS_PORT": str(port)}, cwd=tmp_path)
    assert result.returncode == 1
    assert f"127.0.0.1:{port}" in one_line(result.stderr)


def _sigterm_seconds(process: subprocess.Popen[bytes]) -> float:
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    return time.monotonic() - started


def test_sigterm_stops_the_worker_within_ten_seconds_in_every_state(broker, tmp_path):
    """Idle with traffic folded, while thresholds are being simulated, with the broker
    gone: each time the worker exits within 10 s of SIGTERM."""
    settings = broker.settings()
    times: dict[str, float] = {}
    process, port = start_worker(broker, tmp_path, "running")
    produce(settings, settings.topic_decisions, list(Simulator(seed=1).traces(1000)))
    wait_for(lambda: release_traces(scrape(port)) >= 1000, what="traces counted")
    times["running"] = _sigterm_seconds(process)

    # Short windows and lateness (as in the demo), so windows close and a reference freezes
    # within the simulated minute; its thresholds then take tens of seconds to simulate
    # (not read from the calibration cache: this state is the one under test).
    calibrating = {"RAGMON_REFERENCE_TRACES": "500", "RAGMON_APP_ID": "ragmon-calibrating",
                   "RAGMON_CALIBRATION_CACHE": "off",
                   "RAGMON_WINDOW_SECONDS": "5", "RAGMON_ALLOWED_LATENESS_SECONDS": "2"}
    process, port = start_worker(broker, tmp_path, "calibrating", env=calibrating)
    produce(settings, settings.topic_decisions, list(Simulator(seed=2).traces(3000)))
    log = tmp_path / "calibrating.log"
    wait_for(lambda: b"frozen (" in log.read_bytes(), timeout=90, what="a reference frozen")
    assert b"thresholds calibrated" not in log.read_bytes()  # still simulating
    times["calibrating"] = _sigterm_seconds(process)

    process, port = start_worker(broker, tmp_path, "orphaned")
    broker.stop()
    time.sleep(1)
    times["broker gone"] = _sigterm_seconds(process)
    print("seconds from SIGTERM to exit:", times)
    assert all(seconds <= 10 for seconds in times.values()), times


def test_topics_that_break_guarantees_are_repaired_or_refused(tmp_path):
    """A state topic created by hand without compaction and with Kafka's 1 MB record limit
    is repaired; a decisions topic with one partition that already holds traces is
    refused in one line that names it and the fix."""
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

    from monitor.worker.connection import kafka_python_options

    with ApacheKafka(tmp_path) as kafka:
        settings = kafka.settings()
        admin = KafkaAdminClient(**kafka_python_options(settings))
        try:
            admin.create_topics([NewTopic(settings.topic_state, 4, 1),
                                 NewTopic(settings.topic_decisions, 1, 1)])
            produce(settings, settings.topic_decisions, list(Simulator(seed=1).traces(10)))
            env = {"RAGMON_BOOTSTRAP_SERVERS": kafka.bootstrap}
            refused = ragmon("worker", env=env, cwd=tmp_path)
            assert refused.returncode == 1
            line = one_line(refused.stderr)
            assert "rag.decisions has 1 partition(s) and holds data" in line
            assert "RAGMON_PARTITIONS=1" in line
            # Following the topic (as the message says) starts, and the worker repairs the
            # state topic (`ragmon produce` provisions nothing but its own topic).
            log = tmp_path / "fixed.log"
            fixed = subprocess.Popen(
                [sys.executable, "-m", "monitor.cli", "worker"], cwd=tmp_path,
                env={**os.environ, **env, "RAGMON_PARTITIONS": "1",
                     "RAGMON_METRICS_PORT": str(free_port())},
                stdout=open(log, "wb"), stderr=subprocess.STDOUT)  # noqa: SIM115
            try:
                wait_for(lambda: "ragmon.state: set cleanup.policy=compact (was delete)"
                         in log.read_text(errors="replace"), timeout=90,
                         what="the worker repairing the state topic")
            finally:
                stop(fixed)
            found = admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, settings.topic_state,
                                {"cleanup.policy": None, "max.message.bytes": None})],
                config_filter="all")["topic"][settings.topic_state]
            assert found["cleanup.policy"]["value"] == "compact"
            assert int(found["max.message.bytes"]["value"]) == settings.state_max_bytes
        finally:
            admin.close()
