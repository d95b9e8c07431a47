"""Memory of the fold under a value flood against normal traffic (issue #22).

Two child processes fold the same number of simulated traces through one pipeline with
the default settings (six slice dimensions, batches of 1,000, windows closed as they
go): one as the simulator writes them, one with every trace's slice values and release
made distinct (a flood: 100,000 traces -> 100,000 junk values per dimension). Each
child reports its peak RSS and the resident size after the fold; the ratio flood /
normal is the figure (target <= 1.5x).

    python benchmarks/flood_memory.py --traces 200000
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys


def child(kind: str, n: int) -> None:
    from monitor.aggregate.pipeline import Pipeline
    from monitor.settings import load
    from monitor.simulate import Simulator

    pipeline = Pipeline(load())
    lines = Simulator(seed=1, scenario="steady").traces(n)
    batch: list[bytes] = []
    for i, line in enumerate(lines):
        if kind == "flood":
            doc = json.loads(line)
            doc["slice"] = {k: f"junk-{k}-{i}" for k in doc.get("slice", {})}
            if i % 2:
                doc["system"]["release"] = f"0atk-{i}"
            line = json.dumps(doc).encode()
        batch.append(line)
        if len(batch) == 1000:
            pipeline.feed(batch)
            pipeline.close_ready()
            batch = []
    pipeline.feed(batch)
    pipeline.close_ready()
    with open("/proc/self/status") as status:
        rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"kind": kind, "rss_kib": rss, "peak_kib": peak,
                      "cells": len(pipeline.totals), "seen": len(pipeline.seen),
                      "overflowed": pipeline.slicer.overflowed}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", type=int, default=200_000)
    ap.add_argument("--kind")
    args = ap.parse_args()
    if args.kind:
        child(args.kind, args.traces)
        return
    results = {}
    for kind in ("normal", "flood"):
        out = subprocess.run([sys.executable, __file__, "--kind", kind, "--traces",
                              str(args.traces)], capture_output=True, text=True, check=True)
        results[kind] = json.loads(out.stdout)
        print(out.stdout.strip())
    for key in ("rss_kib", "peak_kib"):
        ratio = results["flood"][key] / results["normal"][key]
        print(f"{key}: flood / normal = {ratio:.2f}x (target <= 1.5x)")


if __name__ == "__main__":
    main()
