"""Which references carry a shape key's false-alarm rate at long budgets?

A long null of the key (`long_nulls.py --key shape`: windows drawn from the shape, each
stream two-sample against its own reference of 2,000 traces), its references drawn one
per equal-probability stratum of their variance (`empirical.Empirical`), `--repeat`
streams each. For the product's threshold at each budget, prints the pooled ARL0 over
the budget and the share of the alarms raised by streams whose reference lies in each
decile of variance (lowest first). If a few references carried the rate, a decile or
two would hold most of the alarms.

    python benchmarks/reference_strata.py --shape uniform --direction down --seed 12 \
        --windows 6e7 [--chains 100 --repeat 20 --steps 1500]
"""

from __future__ import annotations

import argparse
import sys
import time

import long_nulls
import numpy as np

from monitor.detect import detectors as det
from monitor.detect.thresholds import threshold

BUDGETS = (1e4, 1e5, 1e6, 5.8e6)
DECILES = 10


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="uniform", help="a null panel shape")
    parser.add_argument("--stream", default="top_score_spread")
    parser.add_argument("--direction", default="down")
    parser.add_argument("--seed", type=int, default=11, help="the key's reference seed")
    parser.add_argument("--windows", type=float, default=2e7)
    parser.add_argument("--chains", type=int, default=100, help="references drawn a batch")
    parser.add_argument("--repeat", type=int, default=20, help="streams a reference")
    parser.add_argument("--steps", type=int, default=1_500)
    args = parser.parse_args(argv)
    if args.chains % DECILES:
        parser.error(f"--chains must be a multiple of {DECILES}")
    family, key, scale = long_nulls.shape_stream(args)
    hs = np.array([threshold(family, 20.0, budget) / scale for budget in BUDGETS])
    rng = np.random.default_rng(args.seed + 1000)
    alarms = np.zeros((len(hs), args.chains))  # by threshold and stratum of variance
    watched = np.zeros((len(hs), args.chains))
    done, started = 0, time.time()
    while done < args.windows:
        n = rng.poisson(20.0, (args.chains * args.repeat, args.steps)).astype(np.float64)
        stat = det.glr_scan(key, key.window_n(n), key.sample(rng, n, args.chains, args.repeat))
        alarmed, seen = long_nulls.passages(np.maximum.accumulate(stat, axis=1), hs,
                                            args.chains, args.repeat)
        alarms += alarmed
        watched += seen
        done += args.chains * args.repeat * args.steps
    print(f"{args.shape} {args.seed} {args.stream} {args.direction}: {done:.3g} windows, "
          f"{args.repeat} streams a reference, in {time.time() - started:.0f} s")
    for j, budget in enumerate(BUDGETS):
        total = alarms[j].sum()
        arl0 = watched[j].sum() / total / budget if total else float("inf")
        shares = [alarms[j][part].sum() / max(total, 1.0)
                  for part in np.array_split(np.arange(args.chains), DECILES)]
        print(f"B {budget:8.2e}  h {hs[j]:6.2f}  ARL0 / budget {arl0:5.2f}  "
              f"({total:.0f} alarms); by decile of variance: "
              + " ".join(f"{s:.2f}" for s in shares))
    return 0


if __name__ == "__main__":
    sys.exit(main())
