"""What on-call receives from `ragmon demo` under the shipped rules and Alertmanager config.

Runs `ragmon demo` (embedded broker, worker, simulator at 200 traces/s, labels at 5%),
a real Prometheus scraping it every 2 s with `alerts/ragmon-rules.yml`, and a real
Alertmanager with `alerts/alertmanager.yml` whose receivers post to a webhook here
(group waits shortened to 1 s: more notifications, not fewer). The demo's scenario
changes at half time; before it the traffic is steady. Prints every notification with
its time since the change, then per phase the alerts that reached each receiver and the
pager's groups per release.

    python benchmarks/demo_pages.py --scenario embedding_shift --duration 1260

Issue #44's target: the steady half (10 minutes) delivers nothing but the watchdog; the
incident delivers one page (one pager group) per release.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import ClassVar

from monitor.broker import free_port

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "integration")]  # as pytest's
# pythonpath has them: the test module imports the tests' own helpers
from test_e2e_alerting import example_alertmanager  # noqa: E402  (the shipped config, rewired)


class Hook(BaseHTTPRequestHandler):
    notifications: ClassVar[list[tuple[float, str, dict]]] = []  # (monotonic, path, body)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).notifications.append((time.monotonic(), self.path, body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2):
            return True
    except OSError:
        return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", default="embedding_shift")
    parser.add_argument("--duration", type=float, default=1260.0)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ragmon-demo-pages-"))
    hook = HTTPServer(("127.0.0.1", free_port()), Hook)
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    metrics, am_port, prom_port = free_port(), free_port(), free_port()
    (work / "am.yml").write_text(json.dumps(example_alertmanager(hook.server_port)))
    shutil.copy(ROOT / "alerts" / "ragmon-rules.yml", work / "rules.yml")
    (work / "prom.yml").write_text(json.dumps({
        "global": {"scrape_interval": "2s", "evaluation_interval": "2s"},
        "rule_files": ["rules.yml"],
        "alerting": {"alertmanagers": [{"static_configs": [
            {"targets": [f"127.0.0.1:{am_port}"]}]}]},
        "scrape_configs": [{"job_name": "ragmon", "static_configs": [
            {"targets": [f"127.0.0.1:{metrics}"]}]}]}))
    started = time.monotonic()
    processes = [
        subprocess.Popen(["prometheus-alertmanager", f"--config.file={work / 'am.yml'}",
                          f"--storage.path={work / 'am'}", "--cluster.listen-address=",
                          f"--web.listen-address=127.0.0.1:{am_port}"],
                         stdout=(work / "am.log").open("wb"), stderr=subprocess.STDOUT),
        subprocess.Popen(["prometheus", f"--config.file={work / 'prom.yml'}",
                          f"--storage.tsdb.path={work / 'tsdb'}",
                          f"--web.listen-address=127.0.0.1:{prom_port}"],
                         stdout=(work / "prom.log").open("wb"), stderr=subprocess.STDOUT)]
    demo = subprocess.Popen([sys.executable, "-m", "monitor.cli", "demo", "--scenario",
                             args.scenario, "--duration", str(args.duration),
                             "--metrics-port", str(metrics)],
                            stdout=(work / "demo.log").open("wb"), stderr=subprocess.STDOUT)
    try:
        while not answers(metrics) and demo.poll() is None:
            time.sleep(0.2)
        begun = time.monotonic()  # the demo drives traffic from (about) here
        change = begun + (started + args.duration - begun) / 2
        demo.wait()
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=15)
        hook.shutdown()
    print(f"# ragmon demo --scenario {args.scenario} --duration {args.duration:g}; "
          f"steady for {change - begun:.0f} s, then the change for "
          f"{started + args.duration - change:.0f} s; work folder {work}")
    phases: dict[str, dict[str, set[str]]] = {"steady": {}, "change": {}}
    groups: dict[str, set[str]] = {}
    for at, path, body in Hook.notifications:
        firing = sorted({(a["labels"]["alertname"], a["labels"].get("release", "-"))
                         for a in body["alerts"] if a["status"] == "firing"})
        phase = "steady" if at < change else "change"
        print(f"{at - change:+8.1f} s {path:10s} {firing}")
        for name, release in firing:
            phases[phase].setdefault(path, set()).add(f"{name}[{release}]")
        if path == "/pager" and phase == "change":
            for release in {r for _, r in firing}:
                groups.setdefault(release, set()).add(body["groupKey"])
    for phase, by_path in phases.items():
        print(f"{phase}: " + ("; ".join(f"{path}: {sorted(names)}"
                                        for path, names in sorted(by_path.items())) or "none"))
    print("pager groups per release after the change: "
          + str({release: len(keys) for release, keys in sorted(groups.items())}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
