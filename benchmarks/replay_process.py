"""`ragmon replay`, the whole process, against a naive stdlib loop over the same file.

The file holds N traces of the richest shape the contract allows (every optional field
filled: otel ids, every version component, five slice dimensions, a rule, four signals,
eight chunk ids, three claims with evidence, requirements, checks, usage, evals), about
1.5 KB each, written once to benchmarks/data/. Each round runs, as separate processes
and alternating:

- `python -m monitor.cli replay FILE --json` (start-up, read, parse, validate, strip
  content, de-duplicate, fold, drift, summary: what a user runs);
- `python benchmarks/replay_process.py --naive FILE`: `json.loads` per line, a
  `collections.Counter` of decisions per slice and a sum of signals per slice (what a
  user would write in ten minutes, validating nothing).

The figure is the ratio of their wall times in each round (naive / ragmon: above 1 means
ragmon is faster), medians over rounds; the ratio of their CPU times (user + system) is
printed beside it.

    python benchmarks/replay_process.py --traces 200000 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import msgspec

from monitor.simulate import Simulator

DATA = Path(__file__).parent / "data"


def rich(trace: dict, i: int) -> dict:
    """A simulator trace with every optional field the contract has filled in."""
    trace["otel"] = {"trace_id": f"{i + 1:032x}", "span_id": f"{i + 1:016x}"}
    trace["rule"] = "T_CRITICAL" if trace["decision"] != "answer" else "T_PASS"
    if trace["decision"] == "abstain":
        trace.setdefault("reason", "weak_retrieval")
    trace["retrieval"]["chunk_ids"] = [f"doc-{(i * 7 + k) % 997}#p{k}" for k in range(8)]
    verdicts = ("supported", "supported", "unsupported")
    trace["claims"] = [
        {"id": f"c{k}", "importance": "critical" if k == 0 else "normal",
         "verdict": verdicts[(i + k) % 3], "entailment": round(0.3 + 0.2 * k, 3),
         "evidence": [f"doc-{(i + k) % 997}#p{k}"], "rendered": k != 2}
        for k in range(3)]
    trace["requirements"] = {"expected": ["condition", "deadline", "shipping"],
                             "covered": ["condition", "deadline"][: 1 + i % 2],
                             "critical": ["deadline"], "rubric": "returns-v3"}
    trace["evals"] = {"faithfulness": round((i % 100) / 100, 2),
                      "answer_relevancy": round(((i * 3) % 100) / 100, 2)}
    return trace


def write(path: Path, n: int) -> None:
    sim = Simulator(seed=11, scenario="steady", rate=50.0)
    encode = msgspec.json.Encoder().encode
    with path.open("wb") as out:
        for i, line in enumerate(sim.traces(n)):
            out.write(encode(rich(json.loads(line), i)) + b"\n")


def naive(path: Path) -> None:
    """The stdlib loop: decisions counted and signals summed per slice, nothing checked."""
    decisions: Counter[tuple[str, str, str, str]] = Counter()
    sums: defaultdict[tuple[str, str, str, str], float] = defaultdict(float)
    with path.open("rb") as lines:
        for line in lines:
            trace = json.loads(line)
            release = trace["system"]["release"]
            for dimension, value in trace.get("slice", {}).items():
                key = (release, dimension, value, trace["decision"])
                decisions[key] += 1
                for name, signal in trace.get("signals", {}).items():
                    sums[(release, dimension, value, name)] += signal
    print(json.dumps({"cells": len(decisions), "traces": sum(decisions.values())}))


def timed(command: list[str]) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system) of one run of `command`. On this
    shared VM, wall time also counts what neighbours take (steal); CPU time does not."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--naive", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.naive:
        naive(args.naive)
        return
    DATA.mkdir(exist_ok=True)
    path = DATA / f"rich-{args.traces}.jsonl"
    if not path.exists():
        write(path, args.traces)
    size = path.stat().st_size / args.traces
    print(f"{args.traces:,} traces, {size:,.0f} bytes each on average")
    ratios, cpu_ratios = [], []
    for round_ in range(args.repeat):
        stdlib, stdlib_cpu = timed([sys.executable, __file__, "--naive", str(path)])
        ragmon, ragmon_cpu = timed([sys.executable, "-m", "monitor.cli", "replay", str(path),
                                    "--json"])
        ratios.append(stdlib / ragmon)
        cpu_ratios.append(stdlib_cpu / ragmon_cpu)
        print(f"round {round_ + 1}: stdlib loop {stdlib:.2f} s, ragmon replay {ragmon:.2f} s "
              f"({args.traces / ragmon:,.0f} traces/s): {stdlib / ragmon:.2f}x; CPU "
              f"{stdlib_cpu:.2f} s vs {ragmon_cpu:.2f} s: {stdlib_cpu / ragmon_cpu:.2f}x")
    print(f"ragmon replay / stdlib loop, median: {statistics.median(ratios):.2f}x wall, "
          f"{statistics.median(cpu_ratios):.2f}x CPU")


if __name__ == "__main__":
    main()
