"""How soon after a reference freezes every drift stream can alarm (issue #23).

Runs `ragmon demo` (embedded broker, worker, two releases at `--rate` traces/s, steady
traffic) with an empty calibration cache of its own (what a fresh install computes; the
calibrations shipped in the package still count, as for a user), scrapes the worker's
/metrics every second, and reports per release: when its reference froze
(`ragmon_reference_traces` appears), how many streams it has, and how long after the
freeze the last one left `insufficient_data` (streams a grown reference adds wait
from the scrape that first shows them; the longest wait is reported). The figure the
issue asks for: every stream armed within 120 s of its freeze.

    python benchmarks/arming.py --duration 200
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from monitor.broker import free_port
from monitor.detect.thresholds import SHIPPED
from monitor.export.collector import parse_exposition


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=200.0)
    parser.add_argument("--rate", type=float, default=200.0)
    args = parser.parse_args()
    port = free_port()
    cache = tempfile.mkdtemp(prefix="ragmon-arming-cache-")
    demo = subprocess.Popen(
        [sys.executable, "-m", "monitor.cli", "demo", "--duration", str(args.duration),
         "--rate", str(args.rate), "--scenario", "steady", "--metrics-port", str(port)],
        env={**os.environ, "RAGMON_CALIBRATION_CACHE": cache},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started = time.monotonic()
    frozen: dict[str, float] = {}
    since: dict[str, float] = {}     # release -> when its streams began to wait
    longest: dict[str, float] = {}   # release -> longest wait (s) until all were armed
    streams: dict[str, float] = {}
    timeline = []
    while demo.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                samples = parse_exposition(r.read().decode())
        except OSError:
            time.sleep(1)
            continue
        now = time.monotonic() - started
        states: dict[str, dict[str, float]] = {}
        for (name, labels), value in samples.items():
            ls = dict(labels)
            if name == "ragmon_reference_traces":
                frozen.setdefault(ls["release"], now)
            if name == "ragmon_drift_streams":
                states.setdefault(ls["release"], {})[ls["status"]] = value
        for release, by_status in states.items():
            if release not in frozen:
                continue
            waiting = by_status.get("insufficient_data", 0.0)
            streams[release] = sum(by_status.values())
            if waiting and release not in since:  # the freeze, or a growth adding streams
                since[release] = frozen[release] if release not in longest else now
            if not waiting and release in since:
                longest[release] = max(longest.get(release, 0.0), now - since.pop(release))
            elif not waiting and streams[release]:
                longest.setdefault(release, 0.0)  # all armed at the first scrape after the freeze
            timeline.append((round(now, 1), release, waiting, streams[release]))
        time.sleep(1)
    used = {path.name for path in Path(cache).glob("*.npz")}
    shipped = {path.name for path in SHIPPED.glob("*.npz")}
    print(json.dumps({
        "duration": args.duration, "rate": args.rate,
        "releases": {r: {"frozen_at_s": round(frozen[r], 1), "streams": streams.get(r),
                         "longest_wait_until_all_armed_s": round(longest[r], 1)
                         if r in longest else None,
                         "still_waiting_at_end": r in since} for r in sorted(frozen)},
        "waiting_after_freeze": [t for t in timeline if t[2]][:40],
        # Calibrations the run needed: copied from the shipped set, or simulated itself
        # (keys the shipped set misses: the streams they belong to waited for them).
        "calibrations": {"from_shipped": len(used & shipped), "simulated": len(used - shipped)},
    }, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
