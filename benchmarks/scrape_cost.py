"""What the metrics endpoint costs, in one run on the embedded broker (issue #24).

For 2, 10 and 20 releases of demo-like traffic (the simulator's traces, labels and
feedback, six slice dimensions, the releases named r00, r01, ...): series per page and
per release, page size plain and gzipped, scrape latency p50/p99 with 1 scraper and with
20 concurrent ones, and the worker's traces/s without scrapers and with 20 scrapers.

Each release count has its own topic of N pre-produced traces; every worker run is a new
consumer group reading it from the start, timed from its checkpoints (as
worker_throughput.py: nothing polls the worker in the run without scrapers). Each round
runs the worker without and with scrapers, in alternating order, `--repeat` rounds.
The scrapers are 20 threads of this process, each scraping once a second over a kept
connection (20 scrapes/s: a Prometheus HA pair at the recommended 15 s interval scrapes
0.13 times a second), asking for gzip as Prometheus does, not decompressing. Besides
traces/s (wall clock, which on 2 cores also pays for the scrapers' own CPU and the page
process), the CPU the worker (Faust and states processes) and its page process spent
per 1,000 traces is read from /proc: what scraping takes from the worker itself. After
the last round the idle worker is scraped by 1 scraper (50 scrapes in a row) and by 20
at once (10 bursts), and `promtool check metrics` reads a page.

    python benchmarks/scrape_cost.py --traces 60000 --repeat 3

With `--secure` (issue #45) each round instead runs the worker with 20 scrapers twice,
plain HTTP and TLS + basic auth (a web configuration file, a bcrypt hash of cost 10,
certificates made with openssl; each scraper's connection kept, as Prometheus keeps
its own), in alternating order, and compares their scrape latencies during the fold
(p99 TLS + auth / plain, on kept connections; each connection's first scrape, which
pays the TLS handshake and the first bcrypt, apart) and idle:

    python benchmarks/scrape_cost.py --traces 60000 --releases 2,20 --repeat 3 --secure
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import gzip
import http.client
import json
import os
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from worker_throughput import checkpointed, cpu_seconds

from monitor.broker import EmbeddedBroker, free_port
from monitor.client import ensure_topics, produce
from monitor.export.collector import parse_exposition
from monitor.simulate import Simulator

RELEASES = (b'"release":"2026.11.3"', b'"release":"2026.12.1"')  # the simulator's


def traffic(n: int, releases: int) -> tuple[list[bytes], list[bytes], list[bytes]]:
    """n traces, with their labels and feedback, over `releases` releases."""
    sim = Simulator(seed=2, scenario="steady", rate=500.0, label_share=0.05)
    traces = []
    for i, raw in enumerate(sim.traces(n)):
        name = b'"release":"r%02d"' % (i % releases)
        renamed = raw.replace(RELEASES[0], name).replace(RELEASES[1], name)
        assert renamed != raw, "the simulator's releases are not where they were"
        traces.append(renamed)
    return traces, list(sim.labels), list(sim.feedback)


# How scrapes reach the worker: None (plain HTTP), or (TLS context, Authorization value).
SECURE: dict[int, tuple[ssl.SSLContext, str]] = {}


def connect(port: int) -> http.client.HTTPConnection:
    if port in SECURE:
        return http.client.HTTPSConnection("127.0.0.1", port, timeout=30,
                                           context=SECURE[port][0])
    return http.client.HTTPConnection("127.0.0.1", port, timeout=30)


def scrape(port: int, encoding: str = "gzip",
           connection: http.client.HTTPConnection | None = None) -> tuple[float, bytes]:
    """One scrape (on `connection`, kept alive as Prometheus keeps its own, or a new one);
    its latency and body. The first scrape of a connection includes connecting (and the
    TLS handshake): the benchmark counts those apart (Prometheus keeps its connections)."""
    conn = connection or connect(port)
    started = time.perf_counter()
    headers = {"Accept-Encoding": encoding}
    if port in SECURE:
        headers["Authorization"] = SECURE[port][1]
    try:
        conn.request("GET", "/metrics", headers=headers)
        response = conn.getresponse()
        body = response.read()
        if response.status != 200:
            raise OSError(f"HTTP {response.status}")
    finally:
        if connection is None:
            conn.close()
    return time.perf_counter() - started, body


class Scrapers:
    """`count` threads scraping `port` once a second each, from start to stop."""

    def __init__(self, port: int, count: int) -> None:
        self.port, self.count = port, count
        self.latencies: list[float] = []  # scrapes on a connection already open
        self.first: list[float] = []      # each connection's first (connect, TLS, auth)
        self.failures = 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True)
                         for i in range(count)]

    def _run(self, i: int) -> None:
        time.sleep(i / self.count)  # spread over the second
        connection = connect(self.port)
        fresh = True
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                took = scrape(self.port, connection=connection)[0]
                (self.first if fresh else self.latencies).append(took)
                fresh = False
            except (OSError, http.client.HTTPException):
                self.failures += 1
                connection.close()
                connection = connect(self.port)
                fresh = True
            self._stop.wait(max(0.0, 1.0 - (time.monotonic() - started)))
        connection.close()

    def __enter__(self) -> Scrapers:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)


def quantiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return (statistics.median(ordered) * 1e3,
            ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1e3)


def secure_config(workdir: Path) -> tuple[Path, ssl.SSLContext, str]:
    """A web configuration with TLS and one basic-auth user; the client's context and
    Authorization header."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from tls import hashed, make_pki

    pki = make_pki(workdir / "pki")
    config = workdir / "web.yml"
    config.write_text(f"tls_server_config:\n  cert_file: {pki / 'server.crt'}\n"
                      f"  key_file: {pki / 'server.key'}\n"
                      f"basic_auth_users:\n  prometheus: '{hashed('bench-password')}'\n")
    header = "Basic " + base64.b64encode(b"prometheus:bench-password").decode()
    return config, ssl.create_default_context(cafile=str(pki / "ca.pem")), header


def run_worker(broker: EmbeddedBroker, topic: str, n: int, workdir: Path, scrapers: int,
               idle: bool, secure: tuple[Path, ssl.SSLContext, str] | None = None
               ) -> dict[str, Any]:
    port = free_port()
    if secure is not None:
        SECURE[port] = secure[1:]
    app_id = f"bench-{time.time_ns()}"
    # Its own state, seen, references and dead-letter topics: a run must not read the
    # checkpoints or references earlier runs wrote (stage two would merge them all).
    own = {name: f"{app_id}.{name}" for name in ("state", "seen", "references", "dlq")}
    env = {**os.environ, **broker.env(), "RAGMON_METRICS_PORT": str(port),
           "RAGMON_APP_ID": app_id, "RAGMON_TOPIC_DECISIONS": topic,
           "RAGMON_TOPIC_LABELS": f"{topic}.labels", "RAGMON_TOPIC_FEEDBACK": f"{topic}.fb",
           **{f"RAGMON_TOPIC_{name.upper()}": value for name, value in own.items()}}
    if secure is not None:
        env["RAGMON_WEB_CONFIG_FILE"] = str(secure[0])
    ensure_topics(broker.settings().model_copy(update={
        "topic_decisions": topic, "topic_labels": f"{topic}.labels",
        "topic_feedback": f"{topic}.fb", **{f"topic_{k}": v for k, v in own.items()}}))
    log = open(workdir / f"worker-{port}.log", "wb")  # noqa: SIM115
    process = subprocess.Popen([sys.executable, "-m", "monitor.cli", "worker",
                                "--loglevel", "warning"],
                               env=env, stdout=log, stderr=subprocess.STDOUT, cwd=workdir)
    found: dict[str, Any] = {}
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                scrape(port)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        state_topic = own["state"]
        before = cpu_seconds(process.pid)
        if scrapers:
            with Scrapers(port, scrapers) as busy:
                found["rate"] = asyncio.run(checkpointed(
                    broker.bootstrap, state_topic, app_id, topic, n, process.pid))[0]
            found["busy"] = quantiles(busy.latencies)
            found["first"] = quantiles(busy.first)
            found["busy_scrapes"], found["failures"] = len(busy.latencies), busy.failures
        else:
            found["rate"] = asyncio.run(checkpointed(
                broker.bootstrap, state_topic, app_id, topic, n, process.pid))[0]
        after = cpu_seconds(process.pid)
        # CPU per 1,000 traces (from the first scrape that answered to the n-th trace).
        found["worker_cpu_ms"] = (after[0] - before[0]) / n * 1e6
        found["pages_cpu_ms"] = (after[1] - before[1]) / n * 1e6
        if idle:
            time.sleep(3)  # the last snapshot in
            found.update(idle_figures(port))
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()
    return found


def idle_figures(port: int) -> dict[str, Any]:
    _, plain = scrape(port, encoding="identity")
    samples = parse_exposition(plain.decode())
    per_release: dict[str, int] = {}
    for _, labels in samples:
        release = dict(labels).get("release")
        if release:
            per_release[release] = per_release.get(release, 0) + 1
    one = [scrape(port)[0] for _ in range(50)]
    with ThreadPoolExecutor(20) as pool:
        burst = [t for _ in range(10) for t, _ in pool.map(lambda _: scrape(port), range(20))]
    promtool = "not installed"
    if shutil.which("promtool"):
        check = subprocess.run(["promtool", "check", "metrics"], input=plain,
                               capture_output=True, check=False)
        promtool = "clean" if check.returncode == 0 else (check.stdout + check.stderr).decode()
    return {"series": len(samples), "per_release_max": max(per_release.values(), default=0),
            "releases": len(per_release), "bytes": len(plain),
            "gzip_bytes": len(gzip.compress(plain)),
            "dropped": samples.get(("ragmon_series_dropped", ()), 0),
            "one": quantiles(one), "twenty": quantiles(burst), "promtool": promtool}


def produced(broker: EmbeddedBroker, releases: int, n: int) -> str:
    """A topic of its own holding n traces over `releases` releases, with their labels
    and feedback in two more; its name."""
    topic = f"bench.scrape.r{releases}"
    settings = broker.settings().model_copy(update={
        "topic_decisions": topic, "topic_labels": f"{topic}.labels",
        "topic_feedback": f"{topic}.fb"})
    ensure_topics(settings)
    traces, labels, feedback = traffic(n, releases)
    produce(settings, topic, traces)
    produce(settings, f"{topic}.labels", labels)
    produce(settings, f"{topic}.fb", feedback)
    return topic


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", type=int, default=40_000)
    ap.add_argument("--releases", default="2,10,20")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--json", type=Path, help="write every figure here")
    ap.add_argument("--secure", action="store_true",
                    help="compare scrapes over TLS + basic auth with plain ones")
    args = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="ragmon-bench-"))
    if args.secure:
        secure_rounds(args, workdir)
        return
    results: dict[int, dict[str, Any]] = {}
    with EmbeddedBroker(log=workdir / "broker.log") as broker:
        for releases in (int(r) for r in args.releases.split(",")):
            topic = produced(broker, releases, args.traces)
            rounds = []
            for r in range(args.repeat):
                last = r == args.repeat - 1
                # The order alternates: a second run of a round tends to be faster.
                if r % 2 == 0:
                    none = run_worker(broker, topic, args.traces, workdir, 0, idle=False)
                    busy = run_worker(broker, topic, args.traces, workdir, 20, idle=last)
                else:
                    busy = run_worker(broker, topic, args.traces, workdir, 20, idle=last)
                    none = run_worker(broker, topic, args.traces, workdir, 0, idle=False)
                rounds.append((none, busy))
                print(f"{releases} releases, round {r + 1}: {none['rate']:,.0f} traces/s "
                      f"without scrapers, {busy['rate']:,.0f} with 20 "
                      f"({busy['rate'] / none['rate']:.2f}x); worker CPU per 1,000 traces "
                      f"{none['worker_cpu_ms']:.0f} / {busy['worker_cpu_ms']:.0f} ms, page "
                      f"process {none['pages_cpu_ms']:.0f} / {busy['pages_cpu_ms']:.0f} ms; "
                      f"scrapes during the fold "
                      f"p50/p99 {busy['busy'][0]:.1f}/{busy['busy'][1]:.1f} ms "
                      f"({busy['busy_scrapes']} scrapes, {busy['failures']} failed)",
                      flush=True)
            idle = rounds[-1][1]
            ratios = [b["rate"] / n["rate"] for n, b in rounds]
            results[releases] = {"rounds": rounds, "ratio_median": statistics.median(ratios)}
            print(f"{releases} releases: {idle['series']} series ({idle['per_release_max']} "
                  f"per release at most, {idle['releases']} releases, dropped "
                  f"{idle['dropped']:.0f}), page {idle['bytes'] / 1e3:.0f} kB "
                  f"({idle['gzip_bytes'] / 1e3:.0f} kB gzip); idle scrapes p50/p99: 1 scraper "
                  f"{idle['one'][0]:.1f}/{idle['one'][1]:.1f} ms, 20 at once "
                  f"{idle['twenty'][0]:.1f}/{idle['twenty'][1]:.1f} ms; with 20 scrapers "
                  f"{results[releases]['ratio_median']:.2f}x the rate without; promtool "
                  f"{idle['promtool']}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


def secure_rounds(args: argparse.Namespace, workdir: Path) -> None:
    """Per release count and round: 20 scrapers on a plain worker and on one with TLS +
    basic auth, in alternating order; p99 ratios during the fold and idle."""
    secure = secure_config(workdir)
    results: dict[int, Any] = {}
    with EmbeddedBroker(log=workdir / "broker.log") as broker:
        for releases in (int(r) for r in args.releases.split(",")):
            topic = produced(broker, releases, args.traces)
            rounds = []
            for r in range(args.repeat):
                last = r == args.repeat - 1
                runs = [("plain", None), ("secure", secure)]
                found = {name: run_worker(broker, topic, args.traces, workdir, 20, last, how)
                         for name, how in (runs if r % 2 == 0 else runs[::-1])}
                plain, tls = found["plain"], found["secure"]
                rounds.append(found)
                print(f"{releases} releases, round {r + 1}: scrapes during the fold p50/p99 "
                      f"plain {plain['busy'][0]:.1f}/{plain['busy'][1]:.1f} ms, TLS + auth "
                      f"{tls['busy'][0]:.1f}/{tls['busy'][1]:.1f} ms "
                      f"({tls['busy'][1] / plain['busy'][1]:.2f}x p99; each connection's "
                      f"first scrape p50/p99 {plain['first'][0]:.1f}/{plain['first'][1]:.1f} "
                      f"vs {tls['first'][0]:.1f}/{tls['first'][1]:.1f} ms; "
                      f"{plain['failures']} / {tls['failures']} failed); worker "
                      f"{plain['rate']:,.0f} / {tls['rate']:,.0f} traces/s; page process CPU "
                      f"per 1,000 traces {plain['pages_cpu_ms']:.0f} / "
                      f"{tls['pages_cpu_ms']:.0f} ms", flush=True)
                if last:
                    print(f"{releases} releases idle, p50/p99 plain vs TLS + auth: 1 scraper "
                          f"{plain['one'][0]:.1f}/{plain['one'][1]:.1f} vs "
                          f"{tls['one'][0]:.1f}/{tls['one'][1]:.1f} ms; 20 at once "
                          f"{plain['twenty'][0]:.1f}/{plain['twenty'][1]:.1f} vs "
                          f"{tls['twenty'][0]:.1f}/{tls['twenty'][1]:.1f} ms "
                          f"(each a new connection: a TLS handshake per scrape)", flush=True)
            ratios = [f["secure"]["busy"][1] / f["plain"]["busy"][1] for f in rounds]
            results[releases] = {"rounds": rounds, "p99_ratio_median": statistics.median(ratios)}
            print(f"{releases} releases: TLS + auth p99 during the fold "
                  f"{statistics.median(ratios):.2f}x plain (median of {len(ratios)} rounds; "
                  f"{', '.join(f'{x:.2f}' for x in ratios)})", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
