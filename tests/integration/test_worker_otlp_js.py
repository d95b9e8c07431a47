"""The `otlp` intake on spans nobody at ragmon encoded or sent: a RAG app traced with the
OpenTelemetry JS SDK (tests/js/otel_app.mjs), its spans encoded by the JS SDK's own OTLP
serializers (protobufjs-based protobuf, and its JSON, which writes 64-bit integers as
numbers and times as strings) and produced by kafkajs (gzip-compressed record batches,
and keyed by trace id; some messages sent twice, as an exporter's retry does; some
requests served for a traced caller whose spans never come), on both brokers. The
worker's counts per release, decision and reason equal what the app decided, every
decision is the one the whole trace gives (a span sent twice is merged once), and
`ragmon replay --otlp` on the same spans as JSON lines counts the same."""

from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from workers import read_dlq, scrape, start_worker, stop, wait_for

from tests.integration.test_worker_otlp import (
    OTLP,
    by_decision,
    by_reason,
    expected,
    otlp,
    read_all,
)
from tests.otel_apps import CONTENT_MARKER
from tests.otlp_checks import replay_otlp, replayed_decisions, whole_decisions

pytestmark = pytest.mark.integration

APP = Path(__file__).resolve().parents[1] / "js"


@pytest.fixture(scope="module")
def node() -> str:
    """Node.js with the app's packages (`npm ci` in tests/js once, from its lock file).
    CI sets JS_TESTS_REQUIRED=1: there a missing Node.js fails instead of skipping (not a
    RAGMON_* name: ragmon warns about those it does not know)."""
    found, npm = shutil.which("node"), shutil.which("npm")
    if found is None or npm is None:
        why = "the JS SDK test needs Node.js and npm (apt-get install nodejs npm)"
        (pytest.fail if os.environ.get("JS_TESTS_REQUIRED") == "1" else pytest.skip)(why)
    with open(APP / "package-lock.json") as lock:  # one install for all test processes
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (APP / "node_modules" / ".package-lock.json").exists():
            subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel", "error"],
                           cwd=APP, check=True, timeout=600)
    return found


def js_app(node: str, out: Path, requests: int, seed: int, encoding: str,
           keyed: bool = False, send: tuple[str, str] | None = None,
           compression: str = "none", resend: int = 0, called: int = 0) -> dict:
    """Run the JS app; what it wrote to `out` (decisions, messages in both encodings).
    `resend`: every so many messages sent twice (an exporter's retry); `called`: every
    so many requests served for a traced caller (a remote parent, never here)."""
    command = [node, str(APP / "otel_app.mjs"), "--requests", str(requests), "--seed",
               str(seed), "--encoding", encoding, "--out", str(out),
               "--compression", compression, "--resend", str(resend), "--called", str(called)]
    if keyed:
        command.append("--keyed")
    if send is not None:
        command += ["--broker", send[0], "--topic", send[1]]
    subprocess.run(command, check=True, timeout=120)
    return json.loads(out.read_text())


def decided(run: dict) -> Counter[tuple[str, str, str]]:
    return Counter({(release, decision, reason): n
                    for release, decision, reason, n in run["decided"]})


def test_spans_of_the_otel_js_sdk_sent_by_kafkajs_are_counted_as_decided(node, broker,
                                                                          tmp_path):
    settings = broker.settings()
    # Traces of requests served for a traced caller wait for its root until the timeout.
    process, port = start_worker(broker, tmp_path, env={**OTLP, "RAGMON_OTLP_TIMEOUT_SECONDS": "6"})
    try:
        batches = js_app(node, tmp_path / "batches.json", 80, 1, "proto",
                         send=(broker.bootstrap, "otlp_spans"), compression="gzip", resend=2,
                         called=4)
        keyed = js_app(node, tmp_path / "keyed.json", 40, 2, "json", keyed=True,
                       send=(broker.bootstrap, "otlp_spans"), resend=3)
        runs = (batches, keyed)
        traces = sum(sum(decided(run).values()) for run in runs)
        rejected = sum(run["rejected"] for run in runs)
        assert traces > 100 and rejected > 0
        got = wait_for(lambda: (m := scrape(port)) and otlp(m, "traces", "assembled") >= traces
                       and otlp(m, "traces", "rejected") >= rejected
                       and sum(by_decision(m).values()) >= traces and m,
                       timeout=120, what="every decision assembled and folded")
        time.sleep(3)  # nothing more may arrive: a double count would show now
        got = scrape(port)
        decisions, reasons = expected(decided(batches) + decided(keyed))
        assert by_decision(got) == decisions
        for code in ("critical_claim_unsupported", "weak_retrieval"):
            assert by_reason(got, code) == reasons[code]
        assert otlp(got, "traces", "assembled") == traces
        assert otlp(got, "traces", "incomplete") == 0  # those of a traced caller too
        assert otlp(got, "traces", "rejected") == rejected
        # Messages sent twice: their spans merged once (`duplicate`), or counted `late`
        # had their trace been taken before the second copy came; never merged again.
        resent = sum(run["resent_spans"] for run in runs)
        assert resent > 0
        assert otlp(got, "spans", "read") == sum(run["spans"] for run in runs) + resent
        assert otlp(got, "spans", "duplicate") + otlp(got, "spans", "late") == resent
        assert otlp(got, "messages", "rejected") == 0
        raws = [base64.b64decode(m["proto"]) for run in runs for m in run["messages"]]
        assert set(read_all(settings, settings.topic_decisions)) == whole_decisions(raws)
        assert got[("ragmon_content_fields_dropped_total", ())] > traces * 4
        letters = read_dlq(broker.bootstrap, settings.topic_dlq, rejected)
        assert Counter(dict(r.headers)["ragmon.reason"].decode() for r in letters) == {
            "invalid_value": rejected}
        for record in letters:
            assert CONTENT_MARKER.encode() not in (record.value or b"") + b"".join(
                dict(record.headers).values())
        # The same spans as the JS SDK's OTLP/JSON, one request a line, replayed offline.
        replayed = replay_otlp(tmp_path, [m["json"].encode() for run in runs
                                          for m in run["messages"]])
        assert replayed_decisions(replayed) == by_decision(got)
        assert replayed["otlp"]["traces"]["rejected"] == rejected
    finally:
        stop(process)
    assert CONTENT_MARKER.encode() not in (tmp_path / "worker.log").read_bytes()
    for topic in (settings.topic_state, settings.topic_spans, settings.topic_decisions):
        assert CONTENT_MARKER.encode() not in b"".join(read_all(settings, topic))
