"""`ragmon demo`: the whole product on one machine, with nothing to set up.

Starts the embedded broker, a worker (a child process, as in production), and the
simulator producing traces in real time: a steady phase, then the chosen scenario. A
live terminal view is built from real scrapes of the worker's /metrics. Ctrl-C (or the
end of `--duration`) stops everything the demo started.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import suppress
from datetime import UTC, datetime
from pathlib import Path

from monitor.broker import EmbeddedBroker, free_port
from monitor.client import Sender, ensure_topics
from monitor.export.collector import parse_exposition
from monitor.offline import terminal as render
from monitor.settings import Settings
from monitor.simulate import Simulator

__all__ = ["DEMO_LATENESS_SECONDS", "DEMO_WINDOW_SECONDS", "run"]

DEMO_WINDOW_SECONDS = 10
DEMO_LATENESS_SECONDS = 5


def run(scenario: str, duration_seconds: float, rate: float, metrics_port: int | None,
        config: str | None = None) -> int:
    # `--duration` is the demo's wall time: start-up (broker, worker) counts, and the
    # screen's clock starts with the command.
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="ragmon-demo-"))
    port = metrics_port or free_port()
    with EmbeddedBroker(log=workdir / "broker.log") as broker:
        # Short windows and lateness so that drift shows within seconds of the change.
        settings = broker.settings(config, metrics_port=port, app_id="ragmon-demo",
                                   window_seconds=DEMO_WINDOW_SECONDS,
                                   allowed_lateness_seconds=DEMO_LATENESS_SECONDS)
        ensure_topics(settings)
        worker = _start_worker(settings, broker.env(), workdir)
        try:
            render.demo_banner(broker.bootstrap, port, scenario, workdir)
            _wait_for_metrics(port, worker)
            _drive(settings, scenario, started, started + duration_seconds, rate, port)
        except KeyboardInterrupt:
            pass
        finally:
            worker.terminate()  # the worker's own grace is `shutdown_seconds`
            try:
                worker.wait(timeout=settings.shutdown_seconds + 2)
            except subprocess.TimeoutExpired:
                worker.kill()
    render.demo_done(workdir)
    return 0


def _start_worker(settings: Settings, broker_env: dict[str, str],
                  workdir: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, **broker_env,
           "RAGMON_METRICS_PORT": str(settings.metrics_port), "RAGMON_APP_ID": settings.app_id,
           "RAGMON_WINDOW_SECONDS": str(settings.window_seconds),
           "RAGMON_ALLOWED_LATENESS_SECONDS": str(settings.allowed_lateness_seconds)}
    log = open(workdir / "worker.log", "wb")  # noqa: SIM115 - the child owns it
    return subprocess.Popen([sys.executable, "-m", "monitor.cli", "worker"], env=env,
                            stdout=log, stderr=subprocess.STDOUT, cwd=workdir)


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return parse_exposition(response.read().decode())


def _wait_for_metrics(port: int, worker: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if worker.poll() is not None:
            raise RuntimeError("the worker exited on start; see worker.log in the demo folder")
        try:
            _scrape(port)
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError("the worker's /metrics did not come up within 60 s")


def _drive(settings: Settings, scenario: str, started: float, until: float, rate: float,
           port: int) -> None:
    """Produce at `rate` traces/s in real event time until `until` (the scenario from the
    middle of that), refreshing the view once a second; times are since `started`."""
    begun = time.monotonic()
    change_at = int(rate * max(until - begun, 0.0) / 2)
    # Event time starts on a window boundary: every run then folds the same traces into
    # the same windows and freezes the same references, so the calibrations shipped for
    # the demo (`python -m monitor.detect.ship ship`) arm all its streams at once.
    now = datetime.now(UTC).timestamp()
    start = datetime.fromtimestamp(now - now % DEMO_WINDOW_SECONDS, UTC)
    sim = Simulator(seed=0, scenario=scenario, change_at=change_at, rate=rate,
                    start=start, label_share=0.05)
    producer = Sender(settings)
    sent = 0
    with render.DemoView(scenario, begun - started + change_at / rate,
                         until - started) as view:
        while (now := time.monotonic()) < until:
            due = int((now - begun) * rate) - sent
            for line in sim.traces(max(due, 0)):
                producer.send(settings.topic_decisions, line)
            sent += max(due, 0)
            for line in sim.labels:
                producer.send(settings.topic_labels, line)
            for line in sim.feedback:
                producer.send(settings.topic_feedback, line)
            sim.labels.clear()
            sim.feedback.clear()
            producer.flush()
            # The worker may be busy or restarting: the next refresh will tell.
            with suppress(OSError):
                view.update(time.monotonic() - started, sent, _scrape(port))
            time.sleep(max(0.0, min(1.0 - (time.monotonic() - now), until - time.monotonic())))
    producer.close()
