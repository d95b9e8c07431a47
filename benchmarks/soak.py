"""Soak: a steady stream of new trace ids with 5% bad input, for a long time; is memory flat?

Starts the embedded broker and one `ragmon worker`, produces at `--rate` traces/s
(simulator `bad_input` scenario from the start: ~5% malformed messages), and every
`--every` seconds records the worker's resident memory (from /proc), the series it
exports and its input counters. Prints a table and the growth of RSS after warm-up.

    python benchmarks/soak.py --minutes 30 --rate 1100 --retention-max 50000
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

from monitor.broker import EmbeddedBroker, free_port
from monitor.client import Sender, ensure_topics
from monitor.export.collector import parse_exposition
from monitor.simulate import Simulator


def rss_mib(pid: int) -> float:
    """Resident memory of the worker and its children (the partition states live in one)."""
    return children_mib(pid) + _own_mib(pid)


def children_mib(pid: int) -> float:
    return sum(rss_mib(int(child)) for task in Path(f"/proc/{pid}/task").iterdir()
               for child in (task / "children").read_text().split())


def _own_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--rate", type=float, default=1100)
    ap.add_argument("--every", type=float, default=60)
    ap.add_argument("--retention-max", type=int, default=50_000,
                    help="trace ids remembered per partition (dedupe/label-join memory)")
    args = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="ragmon-soak-"))
    with EmbeddedBroker(log=workdir / "broker.log") as broker:
        port = free_port()
        settings = broker.settings(metrics_port=port, app_id="ragmon-soak")
        ensure_topics(settings)
        env = {**os.environ, **broker.env(),
               "RAGMON_METRICS_PORT": str(port), "RAGMON_APP_ID": "ragmon-soak",
               "RAGMON_TRACE_RETENTION_MAX": str(args.retention_max)}
        log = open(workdir / "worker.log", "wb")  # noqa: SIM115
        worker = subprocess.Popen([sys.executable, "-m", "monitor.cli", "worker",
                                   "--loglevel", "warning"], env=env, stdout=log,
                                  stderr=subprocess.STDOUT, cwd=workdir)
        sim = Simulator(seed=11, scenario="bad_input", change_at=0, rate=args.rate,
                        start=datetime.now(UTC), label_share=0.02)
        sender = Sender(settings)
        started = time.monotonic()
        sent, next_sample, rows = 0, 0.0, []
        print(f"{'min':>5} {'sent':>9} {'read':>9} {'rejected':>8} {'rss MiB':>8} {'series':>7} "
              f"{'refs':>5} {'children MiB':>12} {'ref traces':>10}", flush=True)
        try:
            while (elapsed := time.monotonic() - started) < args.minutes * 60:
                due = int(elapsed * args.rate) - sent
                for line in sim.traces(max(due, 0)):
                    sender.send(settings.topic_decisions, line)
                for line in sim.labels:
                    sender.send(settings.topic_labels, line)
                sim.labels.clear()
                sim.feedback.clear()
                sent += max(due, 0)
                sender.flush()
                if elapsed >= next_sample:
                    next_sample += args.every
                    try:
                        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as r:
                            m = parse_exposition(r.read().decode())
                    except OSError:
                        m = {}
                    frozen = sum(1 for name, _ in m if name == "ragmon_reference_info")
                    ref_traces = sum(v for (name, _), v in m.items()
                                     if name == "ragmon_reference_traces")
                    row = (elapsed / 60, sent,
                           m.get(("ragmon_input_messages_total", (("outcome", "read"),)), 0),
                           m.get(("ragmon_input_messages_total", (("outcome", "rejected"),)), 0),
                           rss_mib(worker.pid), m.get(("ragmon_series", ()), 0), frozen,
                           children_mib(worker.pid), ref_traces)
                    rows.append(row)
                    print(f"{row[0]:5.1f} {row[1]:9d} {row[2]:9.0f} {row[3]:8.0f} "
                          f"{row[4]:8.1f} {row[5]:7.0f} {row[6]:5d} {row[7]:12.1f} "
                          f"{row[8]:10.0f}", flush=True)
                time.sleep(0.2)
        finally:
            sender.close()
            worker.terminate()
            worker.wait(timeout=30)
    growth("first third of the run", [r for r in rows if r[0] >= args.minutes / 3])
    # The monitor is warm once its references froze (the first window closes after
    # window_seconds + allowed_lateness_seconds, 11 minutes by default) and their
    # thresholds were calibrated (drift series appear): from the sample after that on.
    frozen = next((i for i, r in enumerate(rows) if r[6]), None)
    if frozen is None:
        print("references never froze: no warm-up point keyed to them")
    else:
        growth("references frozen and calibrated", rows[frozen + 2:])
        # References then grow (monitor/detect/growth.py) and are recalibrated at each step:
        # warm two samples after their sizes stopped changing (as after the freeze).
        final = max((i for i, r in enumerate(rows) if r[8] != rows[-1][8]), default=-1) + 1
        growth("references at their final size and calibrated", rows[final + 2:])


def growth(rule: str, warm: list[tuple]) -> None:
    if len(warm) < 2:
        print(f"warm-up by {rule}: too few samples after it")
        return
    change = (warm[-1][4] - warm[0][4]) / warm[0][4]
    print(f"RSS after warm-up by {rule} ({warm[0][0]:.0f} min): {warm[0][4]:.0f} -> "
          f"{warm[-1][4]:.0f} MiB ({100 * change:+.1f}%), max {max(r[4] for r in warm):.0f} "
          f"MiB; max series {max(r[5] for r in warm):.0f}")


if __name__ == "__main__":
    main()
