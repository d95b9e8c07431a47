"""Replay throughput of the monitoring core on one core: traces/s through ingest -> fold.

Generates N realistic traces with the simulator (written once to benchmarks/data/),
then times, in one process, these stages over the same bytes so the figures compare
as ratios:

1. msgspec decode only (the floor of any validating pipeline);
2. the yardstick: the first reference point of issue #2, "orjson + per-event dict
   updates" (~51k traces/s on the machine the issue was written on): no validation,
   the counts a dashboard needs (decisions, reasons, claim verdicts, signal sums) added
   per event to a dict per (window, release, slice). This machine's speed swings by
   up to 1.7x between hours (msgspec decode alone measured 116k-200k/s on the same
   code), so ragmon's rate is also given as a ratio to this stage. It is *not* a
   conversion to the issue's machine: how the issue's version was written is unknown
   (a first version of this one, building each event's keys once per cell, ran 50k/s
   here; this one 75k/s);
3. ingest.parse per message (validation + content scan, no aggregation);
4. the full pipeline (parse, dedupe, lateness, slicing, fold, window closing) as
   `ragmon replay` runs it, in batches of 1000: pure Python (the references: per-message
   admission in monitor/aggregate/admission.py, column-wise encode + scatter) and compiled
   (admission and fold in C: monitor/aggregate/_admission.pyx and _fold.pyx), rounds
   interleaved.

    python benchmarks/replay_throughput.py --traces 200000 [--repeat 3]
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable
from pathlib import Path

import msgspec
import orjson

from monitor.aggregate.compiled import COMPILED
from monitor.aggregate.pipeline import Pipeline
from monitor.ingest.contract import Event
from monitor.ingest.parse import parse
from monitor.memory import tune_gc
from monitor.settings import load
from monitor.simulate import Simulator

DATA = Path(__file__).parent / "data"
YARDSTICK = "yardstick: orjson + dicts"


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

    def yardstick() -> None:
        dims = ("language", "fact_type", "source", "risk", "doc_version")
        table: dict[tuple[object, ...], dict[str, float]] = {}
        for raw in lines:
            event = orjson.loads(raw)
            window = event["ts"][:16]  # the minute
            release = event["system"]["release"]
            slices = event.get("slice", {})
            tokens = event.get("query_tokens")
            cells = [(window, release, None, None)]
            cells.extend((window, release, d, slices[d]) for d in dims if d in slices)
            if tokens is not None:
                length = "short" if tokens <= 5 else "medium" if tokens <= 15 else "long"
                cells.append((window, release, "query_length", length))
            keys = ["traces", event["decision"]]
            if event.get("reason"):
                keys.append(event["reason"])
            keys.extend(c["importance"] + "/" + c["verdict"] for c in event.get("claims", ()))
            signals = event.get("signals", {}).items()
            for cell in cells:
                stats = table.get(cell)
                if stats is None:
                    stats = table[cell] = {}
                for key in keys:
                    stats[key] = stats.get(key, 0) + 1
                for name, value in signals:
                    stats[name] = stats.get(name, 0.0) + value

    def parse_only() -> None:
        for raw in lines:
            parse(raw)

    def full(compiled: bool) -> None:
        pipeline = Pipeline(load(), compiled=compiled)
        for i in range(0, len(lines), 1000):
            pipeline.feed(lines[i : i + 1000])
            pipeline.close_ready()
        pipeline.close_ready(final=True)
        assert pipeline.input["folded"] == len(lines)

    print(f"{len(lines)} traces, mean {size:.0f} bytes")
    stages = [("msgspec decode only", decode_only), (YARDSTICK, yardstick),
              ("ingest.parse", parse_only),
              ("full pipeline, pure Python", lambda: full(False))]
    if COMPILED:
        stages.append(("full pipeline, compiled", lambda: full(True)))
    for gc_mode in ("default gc", "tuned gc (as ragmon replay)"):
        if gc_mode.startswith("tuned"):
            tune_gc()
        best = interleaved(args.repeat, stages)
        for name, seconds in best.items():
            ratio = best[YARDSTICK] / seconds
            print(f"{gc_mode:28s} {name:30s} {len(lines) / seconds:>9,.0f} traces/s "
                  f"({seconds:.2f} s)  {ratio:5.2f}x yardstick")


if __name__ == "__main__":
    main()
