"""Instructions per trace under cachegrind: the replay pipeline's cost without the noise.

This machine's wall-clock speed swings by +-30% between runs (see RESULTS.md), so a 5%
change of the fold cannot be seen in traces/s. Instruction counts can: each stage runs
in a child process under `valgrind --tool=cachegrind --cache-sim=no`, once over N traces
and once over none (imports, reading, set-up), and the difference is divided by N.
Instructions are not time: cache misses, which cost the real pipeline ~2x over a
cache-warm loop (RESULTS.md), do not show. Use it to compare two versions of the code:

    python benchmarks/instructions.py --traces 20000 [--against /path/to/other/checkout]

Stages: msgspec decode only, `ingest.parse`, the full pipeline compiled (admission and
fold, monitor/aggregate/_admission.pyx and _fold.pyx) and pure Python (as `replay_throughput.py`,
batches of 1000). The other checkout needs its compiled parts built (`python setup.py
build_ext --inplace` there).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

STAGES = ("decode", "parse", "compiled", "python")
DATA = Path(__file__).parent / "data"


def run_stage(stage: str, n: int, data: Path) -> None:
    """The child: one stage over the first `n` traces of `data`."""
    import msgspec

    from monitor.aggregate.fold import Folder
    from monitor.aggregate.pipeline import Pipeline
    from monitor.ingest.contract import Event
    from monitor.ingest.parse import parse
    try:
        from monitor.memory import tune_gc
    except ImportError:  # a checkout from before session 15 (--against)
        from monitor.cli import tune_gc  # type: ignore[attr-defined,no-redef]
    from monitor.settings import load

    lines = []
    with open(data, "rb") as f:
        for _ in range(n):
            lines.append(f.readline().rstrip(b"\n"))
    tune_gc()
    if stage == "decode":
        decoder = msgspec.json.Decoder(Event)
        for raw in lines:
            decoder.decode(raw)
    elif stage == "parse":
        for raw in lines:
            parse(raw)
    else:
        try:  # compiled admission and fold, or the pure-Python references
            pipeline = Pipeline(load(), compiled=stage == "compiled")
        except TypeError:  # a checkout from before monitor/aggregate/_admission.pyx: only the fold
            pipeline = Pipeline(load())
            pipeline.folder = Folder(pipeline.layout, pipeline.admit_missing,
                                     stage == "compiled")
        for i in range(0, len(lines), 1000):
            pipeline.feed(lines[i:i + 1000])
            pipeline.close_ready()
        pipeline.close_ready(final=True)


def instructions(stage: str, n: int, tree: Path | None, data: Path) -> int:
    env = {**os.environ, "PYTHONHASHSEED": "0"}  # same dict layouts in every run
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    out = subprocess.run(
        ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
         sys.executable, __file__, "--stage", stage, "--traces", str(n), "--data", str(data)],
        capture_output=True, text=True, env=env, check=True)
    match = re.search(r"I\s+refs:\s+([\d,]+)", out.stderr)
    if match is None:
        raise RuntimeError(f"no instruction count from valgrind: {out.stderr[-500:]}")
    return int(match.group(1).replace(",", ""))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", type=int, default=20_000)
    ap.add_argument("--stage", choices=STAGES, help=argparse.SUPPRESS)
    ap.add_argument("--stages", default=",".join(STAGES))
    ap.add_argument("--against", type=Path, help="another checkout to compare with")
    ap.add_argument("--data", type=Path, default=DATA / "traces-200000.jsonl",
                    help="JSONL traces (default: replay_throughput.py's file; "
                         "replay_process.py writes the richest shape, rich-200000.jsonl)")
    args = ap.parse_args()
    if args.stage:
        run_stage(args.stage, args.traces, args.data)
        return
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    if not args.data.exists():
        sys.exit(f"no {args.data}: run benchmarks/replay_throughput.py (or replay_process.py "
                 "for the rich file) once first, it writes the traces file")
    trees: list[tuple[str, Path | None]] = [("this checkout", None)]
    if args.against is not None:
        trees.append((str(args.against), args.against.resolve()))
    for stage in args.stages.split(","):
        for name, tree in trees:
            per_trace = (instructions(stage, args.traces, tree, args.data)
                         - instructions(stage, 0, tree, args.data)) / args.traces
            print(f"{stage:9s} {per_trace:>10,.0f} instructions/trace  ({name})", flush=True)


if __name__ == "__main__":
    main()
