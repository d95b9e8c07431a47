"""End to end on loopback with real processes: broker, `ragmon worker`, Prometheus (1 s
scrapes, ragmon's rules) and Alertmanager with the shipped example configuration, its
receivers posting to a webhook in this test.

A steady phase raises nothing but the watchdog; an embedding shift then pages once per
release (one pager group each, RagmonRetrievalScoreDrift among it, per release and
family: no slice labels), tickets hold one alert each and the retrieval drift's symptoms
are inhibited; every panel query of every dashboard returns data from that Prometheus.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
from workers import scrape, start_worker, stop, wait_for

from monitor.broker import free_port
from monitor.client import produce
from monitor.simulate import Simulator

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("prometheus") is None
                       or shutil.which("prometheus-alertmanager") is None,
                       reason="Debian prometheus and prometheus-alertmanager are needed"),
]
ROOT = Path(__file__).resolve().parents[2]


class _Webhook(BaseHTTPRequestHandler):
    """Every receiver of alerts/alertmanager.yml posts here, at /<receiver name>."""

    received: ClassVar[list[dict]] = []
    notifications: ClassVar[list[dict]] = []  # whole payloads, with `path`

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).received.extend(body["alerts"])
        type(self).notifications.append({**body, "path": self.path})
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


class _Control(BaseHTTPRequestHandler):
    """A second scrape target that does no work: its failed scrapes are the machine's
    (a stalled Prometheus, a loaded CPU), not ragmon's."""

    def do_GET(self) -> None:
        body = b"control_up 1\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _scrapes(port: int, job: str) -> tuple[int, int]:
    """(scrapes, failed) of `job` over the test."""
    [up] = _query(port, f'avg_over_time(up{{job="{job}"}}[30m])')
    [count] = _query(port, f'count_over_time(up{{job="{job}"}}[30m])')
    total = int(count["value"][1])
    return total, round((1.0 - float(up["value"][1])) * total)


def _rules_every_second() -> dict:
    """alerts/ragmon-rules.yml as shipped, its SLO group evaluated every second instead of
    every minute: an error ratio needs `min_events` counted within its window, which
    the minute's evaluations of a three-minute test may never see."""
    import yaml

    rules = yaml.safe_load((ROOT / "alerts" / "ragmon-rules.yml").read_text())
    for group in rules["groups"]:
        if group["name"] == "ragmon.slo":
            group["interval"] = "1s"
    return rules


def _start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(args, stdout=open(log, "wb"), stderr=subprocess.STDOUT)


def _query(port: int, expr: str) -> list[dict]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())["data"]["result"]


def _names(alerts: list[dict]) -> set[str]:
    return {a["labels"]["alertname"] for a in alerts if a.get("status") == "firing"}


def _drift_alerts() -> list[dict[str, str]]:
    return [a["labels"] for a in _Webhook.received
            if a["labels"]["alertname"] == "RagmonRetrievalScoreDrift"]


def example_alertmanager(port: int) -> dict:
    """alerts/alertmanager.yml as shipped, its receivers posting to this test's webhook
    and its waits shortened to a second."""
    import yaml

    config = yaml.safe_load((ROOT / "alerts" / "alertmanager.yml").read_text())
    for receiver in config["receivers"]:
        receiver["webhook_configs"] = [{"url": f"http://127.0.0.1:{port}/{receiver['name']}",
                                        "send_resolved": False}]
    routes = [config["route"], *config["route"].get("routes", [])]
    for route in routes:
        for key in ("group_wait", "group_interval"):
            if key in route:
                route[key] = "1s"
    return config


def test_drift_alert_reaches_the_webhook_and_every_panel_has_data(broker, tmp_path):
    hook = HTTPServer(("127.0.0.1", free_port()), _Webhook)
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    control = HTTPServer(("127.0.0.1", free_port()), _Control)
    threading.Thread(target=control.serve_forever, daemon=True).start()
    _Webhook.received, _Webhook.notifications = [], []
    worker, metrics = start_worker(broker, tmp_path, env={
        "RAGMON_WINDOW_SECONDS": "10", "RAGMON_ALLOWED_LATENESS_SECONDS": "5",
        "RAGMON_SLICE_DIMENSIONS": "language",
        "RAGMON_OTLP_TOPIC": "otlp_spans"})  # on, for the health board's spans panels
    am_port, prom_port = free_port(), free_port()
    (tmp_path / "am.yml").write_text(json.dumps(example_alertmanager(hook.server_port)))
    (tmp_path / "rules.yml").write_text(json.dumps(_rules_every_second()))
    (tmp_path / "prom.yml").write_text(json.dumps({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": ["rules.yml"],
        "alerting": {"alertmanagers": [{"static_configs": [
            {"targets": [f"127.0.0.1:{am_port}"]}]}]},
        "scrape_configs": [{"job_name": "ragmon", "static_configs": [
            {"targets": [f"127.0.0.1:{metrics}"]}]},
                           {"job_name": "control", "static_configs": [
            {"targets": [f"127.0.0.1:{control.server_port}"]}]}]}))
    alertmanager = _start(["prometheus-alertmanager", f"--config.file={tmp_path / 'am.yml'}",
                           f"--storage.path={tmp_path / 'am'}", "--cluster.listen-address=",
                           f"--web.listen-address=127.0.0.1:{am_port}"], tmp_path / "am.log")
    prometheus = _start(["prometheus", f"--config.file={tmp_path / 'prom.yml'}",
                         f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                         f"--web.listen-address=127.0.0.1:{prom_port}"], tmp_path / "prom.log")
    try:
        settings = broker.settings()
        # Event time ends about now, so the windows close as the traces arrive.
        start = datetime.now(UTC) - timedelta(seconds=150)
        sim = Simulator(seed=9, scenario="embedding_shift", change_at=10_000, rate=100.0,
                        start=start)
        produce(settings, settings.topic_decisions, list(sim.traces(10_000)))
        produce(settings, settings.topic_labels, sim.labels)  # label panels need data too
        early_labels = len(sim.labels)
        top = (("dimension", "all"), ("direction", "down"), ("release", "2026.11.3"),
               ("signal", "top_score"), ("value", "all"))
        wait_for(lambda: math.isfinite(scrape(metrics).get(("ragmon_drift_threshold", top),
                                                          math.inf)),
                 timeout=240, what="calibrated thresholds")
        wait_for(lambda: "RagmonWatchdog" in _names(_Webhook.received), timeout=60,
                 what="the watchdog at the webhook")
        time.sleep(5)  # steady: nothing else may fire
        assert _names(_Webhook.received) == {"RagmonWatchdog"}, [
            a["labels"] for a in _Webhook.received if a["labels"]["alertname"] != "RagmonWatchdog"]

        # The same simulator goes on past its change point (event time continues).
        produce(settings, settings.topic_decisions, list(sim.traces(6_000)))
        # Labels that arrive while Prometheus watches: an SLO's error ratio needs
        # `min_events` valid events counted within its window (alerts/slo.yml), and a
        # counter's first sample (the early labels, folded in one batch) is no increase.
        produce(settings, settings.topic_labels, sim.labels[early_labels:])
        releases = {"2026.11.3", "2026.12.1"}  # the shift hits both
        wait_for(lambda: {a["release"] for a in _drift_alerts()} == releases,
                 timeout=120, what="RagmonRetrievalScoreDrift of both releases")
        time.sleep(20)  # what else the incident raises arrives meanwhile (1 s groups)
        # One page per release: the pager's notifications form one group per release
        # (later ones update that group), the root cause among them.
        pages = [n for n in _Webhook.notifications if n["path"] == "/pager"]
        paged = {}
        for page in pages:
            [release] = {a["labels"]["release"] for a in page["alerts"]}
            paged.setdefault(release, set()).add(page["groupKey"])
        assert {r: len(keys) for r, keys in paged.items()} == {r: 1 for r in releases}, pages
        assert all("RagmonRetrievalScoreDrift" in _names(p["alerts"]) for p in pages[:1])
        # Tickets: one alert per release and family (no per-slice instances), and the
        # symptoms of the retrieval drift are inhibited, not ticketed.
        tickets = [n for n in _Webhook.notifications if n["path"] == "/tickets"]
        for ticket in tickets:
            firing = [a["labels"] for a in ticket["alerts"] if a["status"] == "firing"]
            assert len(firing) <= 1, firing
        ticketed = {a["labels"]["alertname"] for t in tickets for a in t["alerts"]}
        assert not ticketed & {"RagmonAnswerCoverageChange", "RagmonReasonMixChange"}, ticketed
        drift = _drift_alerts()
        assert {"release", "family", "severity"} <= set(drift[0]) and "dimension" not in drift[0]
        ticket_alerts = sorted((a["labels"]["release"], a["labels"]["alertname"])
                               for t in tickets for a in t["alerts"])
        print(f"pages: {len(pages)} notifications in {len(paged)} groups; tickets: "
              f"{ticket_alerts}")

        empty = []
        for board in sorted((ROOT / "dashboards").glob("ragmon-*.json")):
            for panel in json.loads(board.read_text())["panels"]:
                for target in panel["targets"]:
                    expr = (target["expr"].replace("$__rate_interval", "1m")
                            .replace('"$release"', '".*"').replace('"$dimension"', '".*"')
                            .replace('"$value"', '".*"').replace('"$signal"', '".*"'))
                    if not _query(prom_port, expr):
                        empty.append(f"{board.stem}: {panel['title']}: {expr}")
        assert not empty, "\n".join(empty)
        # Scrapes kept succeeding all along (1 s scrapes, 1 s timeout; issue #24). A /metrics
        # that blocks (a lock held by calibration, a slow render) fails scrape after scrape;
        # a loaded machine fails some scrapes of any target (7 of 113 once, on 2 busy
        # cores). The control target, which does no work, tells the two apart: ragmon may
        # fail only as often as it does, give or take two.
        total, failed = _scrapes(prom_port, "ragmon")
        _, control_failed = _scrapes(prom_port, "control")
        [slowest] = _query(prom_port, 'max_over_time(scrape_duration_seconds{job="ragmon"}[30m])')
        [typical] = _query(prom_port, 'quantile_over_time(0.5, '
                           'scrape_duration_seconds{job="ragmon"}[30m])')
        print(f"{total} scrapes, {failed} failed ({control_failed} of the control target), "
              f"scrape duration median {float(typical['value'][1]) * 1e3:.1f} ms, "
              f"max {float(slowest['value'][1]) * 1e3:.1f} ms")
        assert total >= 30 and failed <= control_failed + 2, (total, failed, control_failed)
    finally:
        for process in (prometheus, alertmanager):
            process.terminate()
            process.wait(timeout=15)
        stop(worker)
        hook.shutdown()
        control.shutdown()
