"""Replay throughput of the monitoring core on one core: traces/s through ingest -> fold.

Generates N realistic traces with the simulator (written once to benchmarks/data/),
then times, in one process, three stages over the same bytes so the figures compare
as ratios:

1. msgspec decode only (the floor of any validating pipeline);
2. ingest.parse per message (validation + content scan, no aggregation);
3. the full pipeline (parse, dedupe, lateness, slicing, fold, window closing) as
   `ragmon replay` runs it, in batches of 1000, with the pure-Python fold (column-wise
   encode + scatter) and with the compiled fold (monitor/_fold.pyx), rounds interleaved.

    python benchmarks/replay_throughput.py --traces 200000 [--repeat 3]
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from monitor.cli import tune_gc
from monitor.contract import Event
from monitor.fold import COMPILED, Folder
from monitor.ingest import parse
from monitor.pipeline import Pipeline
from monitor.settings import load
from monitor.simulate import Simulator

DATA = Path(__file__).parent / "data"


def sample(n: int) -> list[bytes]:
    path = DATA / f"traces-{n}.jsonl"
    if not path.exists():
        DATA.mkdir(exist_ok=True)
        sim = Simulator(seed=1, scenario="steady", rate=200.0)
        path.write_bytes(b"".join(line + b"\n" for line in sim.traces(n)))
    return path.read_bytes().splitlines()


def interleaved(repeat: int, stages: list[tuple[str, Callable[[], None]]]) -> dict[str, float]:
    """Best time of each stage over `repeat` rounds, each round running every stage once
    (this machine's speed drifts by +-30% over minutes: interleaving keeps ratios fair)."""
    best: dict[str, float] = {}
    for _ in range(repeat):
        for name, fn in stages:
            gc.collect()
            start = time.perf_counter()
            fn()
            seconds = time.perf_counter() - start
            best[name] = min(seconds, best.get(name, seconds))
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    lines = sample(args.traces)
    size = sum(map(len, lines)) / len(lines)
    decoder = msgspec.json.Decoder(Event)

    def decode_only() -> None:
        for raw in lines:
            decoder.decode(raw)

    def parse_only() -> None:
        for raw in lines:
            parse(raw)

    def full(compiled: bool) -> None:
        pipeline = Pipeline(load())
        pipeline.folder = Folder(pipeline.layout, pipeline.admit_missing, compiled)
        for i in range(0, len(lines), 1000):
            pipeline.feed(lines[i : i + 1000])
            pipeline.close_ready()
        pipeline.close_ready(final=True)
        assert pipeline.input["folded"] == len(lines)

    print(f"{len(lines)} traces, mean {size:.0f} bytes")
    stages = [("msgspec decode only", decode_only), ("ingest.parse", parse_only),
              ("full pipeline, Python fold", lambda: full(False))]
    if COMPILED:
        stages.append(("full pipeline, compiled fold", lambda: full(True)))
    for gc_mode in ("default gc", "tuned gc (as ragmon replay)"):
        if gc_mode.startswith("tuned"):
            tune_gc()
        for name, seconds in interleaved(args.repeat, stages).items():
            print(f"{gc_mode:28s} {name:28s} {len(lines) / seconds:>9,.0f} traces/s "
                  f"({seconds:.2f} s)")


if __name__ == "__main__":
    main()
