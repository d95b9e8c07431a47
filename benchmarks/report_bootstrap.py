"""`ragmon report` on a generated two-release file: 10,000 cluster resamples of 100k traces.

Target (issue #6): under a minute on one core, end to end (reading, joining labels,
bootstrap, JSON). Stages are timed separately in one process so they compare as
ratios; the trace-level bootstrap (no cluster field: every trace its own cluster) is
the worst case and is timed too.

    taskset -c 1 python benchmarks/report_bootstrap.py --traces 100000 --bootstrap 10000
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

from monitor.cli import main
from monitor.offline.compare import compare
from monitor.offline.frame import load
from monitor.simulate import Simulator

DATA = Path(__file__).parent / "data"


def generate(n: int) -> tuple[Path, Path]:
    traces, labels = DATA / f"report-{n}.jsonl", DATA / f"report-{n}-labels.jsonl"
    if not traces.exists():
        DATA.mkdir(exist_ok=True)
        sim = Simulator(seed=11, scenario="looser_gate", change_at=0, label_share=0.2)
        with traces.open("wb") as f:
            for line in sim.traces(n):
                f.write(line + b"\n")
        labels.write_bytes(b"".join(line + b"\n" for line in sim.labels))
    return traces, labels


def main_() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--traces", type=int, default=100_000)
    parser.add_argument("--bootstrap", type=int, default=10_000)
    args = parser.parse_args()
    traces, labels = generate(args.traces)
    out = DATA / "report.json"
    start = time.perf_counter()
    code = main(["report", str(traces), "--labels", str(labels), "--baseline", "2026.11.3",
                 "--candidate", "2026.12.1", "--cluster-field", "cluster", "--bootstrap",
                 str(args.bootstrap), "--format", "json", "--out", str(out), "--no-progress"])
    end_to_end = time.perf_counter() - start
    assert code == 0
    start = time.perf_counter()
    loaded = load(traces.read_bytes().splitlines(), labels.read_bytes().splitlines(),
                  ("language", "fact_type", "source", "risk", "doc_version"))
    reading = time.perf_counter() - start
    timings = {}
    for field in ("cluster", None):
        start = time.perf_counter()
        result = compare(loaded.frame, "2026.11.3", "2026.12.1", cluster_field=field,
                         resamples=args.bootstrap, seed=0, adjust_by="language")
        timings[field] = (time.perf_counter() - start, result.clusters)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"traces {args.traces}, resamples {args.bootstrap}")
    print(f"ragmon report end to end (cluster field): {end_to_end:.1f} s")
    print(f"  read + join labels: {reading:.1f} s")
    for field, (seconds, clusters) in timings.items():
        print(f"  bootstrap + adjusted, cluster_field={field} ({clusters}): {seconds:.1f} s")
    print(f"peak RSS {rss:.0f} MiB")


if __name__ == "__main__":
    main_()
