"""False alarms of rare shares on stationary traffic, through `ragmon backtest` (issue #44).

Writes stationary streams of 200,000 traces at 20 traces/s (one release, the
simulator's slices and signals) whose only share that matters is rare: a
critical_claim_unsupported share of 0.1%, 0.3%, 0.5%, 1% (answers otherwise), or an
answer coverage of 99% / 99.5% (abstentions for weak retrieval otherwise). Runs the
backtest a user would (`--reference-traces 2000 --arl0 10000 --window-seconds 1`: a
budget of one false alarm per 10,000 traces a stream, 20 in the file) in this process,
with the reference growing as in the worker, and counts the alarms of the stream that
watches the share on the release total and over its slices.

    python benchmarks/rare_shares.py [--only ccu0.5,...]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import Counter
from pathlib import Path

import msgspec
import numpy as np

from monitor.simulate import Simulator

TRACES = 200_000
STREAMS = {  # name: (share, signal, direction, reason of the rare side)
    "ccu0.1": (0.001, "critical_claim_unsupported_rate", "up", "critical_claim_unsupported"),
    "ccu0.3": (0.003, "critical_claim_unsupported_rate", "up", "critical_claim_unsupported"),
    "ccu0.5": (0.005, "critical_claim_unsupported_rate", "up", "critical_claim_unsupported"),
    "ccu1": (0.01, "critical_claim_unsupported_rate", "up", "critical_claim_unsupported"),
    "coverage99": (0.01, "answer_coverage", "down", "weak_retrieval"),
    "coverage99.5": (0.005, "answer_coverage", "down", "weak_retrieval"),
}


def write(path: Path, share: float, reason: str, seed: int) -> None:
    """The simulator's traces of one release at 20 traces/s, decisions redrawn: the rare
    side with probability `share`, an answer otherwise (claims dropped: no gate leaks)."""
    sim = Simulator(seed=seed, rate=20.0, releases=("r1",), label_share=0.0)
    rng = np.random.default_rng(seed)
    rare = rng.random(TRACES) < share
    with path.open("wb") as out:
        for i, line in enumerate(sim.traces(TRACES)):
            trace = json.loads(line)
            for key in ("claims", "requirements", "reason", "rule"):
                trace.pop(key, None)
            if rare[i]:
                trace.update(decision="abstain", reason=reason, rule="RARE")
            else:
                trace["decision"] = "answer"
            out.write(msgspec.json.encode(trace) + b"\n")


def alarms(path: Path, out: Path) -> list[dict]:
    from monitor.cli import main as ragmon

    ragmon(["backtest", str(path), "--reference-traces", "2000", "--arl0", "10000",
            "--window-seconds", "1", "--no-progress", "--out", str(out)])
    return [json.loads(line) for line in out.read_text().splitlines() if line.strip()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only")
    parser.add_argument("--seed", type=int, default=44)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ragmon-rare-"))
    budget = TRACES / 10_000
    print(f"# budget {budget:.0f} false alarms a "
          "stream; counts: release total / every slice stream of the signal")
    for name, (share, signal, direction, reason) in STREAMS.items():
        if args.only and name not in args.only.split(","):
            continue
        started = time.perf_counter()
        path = work / f"{name}.jsonl"
        write(path, share, reason, args.seed)
        found = [a for a in alarms(path, work / f"{name}.alarms.jsonl")
                 if a.get("signal") == signal and a.get("direction") == direction]
        total = sum(1 for a in found if not a.get("dimension"))
        slices = Counter((a.get("dimension"), a.get("value")) for a in found if a.get("dimension"))
        per_slice = (sum(slices.values()) / len(slices)) if slices else 0.0
        print(f"{name:13s} {signal} {direction}: total {total} ({total / budget:.2f}x), "
              f"slices {sum(slices.values())} over {len(slices)} alarmed slice streams "
              f"(mean {per_slice:.1f}), {time.perf_counter() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
