"""A young share's false alarms at long budgets, over the exact law of its reference.

For a true share `--share` and references of 2,000 traces, every event count k of the
binomial's central 1 - 2e-9 is a reference (a count of 0 too, for the GLR: the
degenerate reference the product watches for any rise): its family (`--family odds`: `shares.Odds`,
`glr`: the two-sample `detectors.Bernoulli`) with the product's threshold for each
budget, watched on `--streams` null streams of `--steps` windows of `--window` traces.
ARL0 = 1 / (rate averaged over k by its probability). Counts whose streams raise no
alarm read as rate 0, so a figure beyond what the streams can show is an upper bound.

    python benchmarks/long_budgets.py [--family odds|glr] [--share 0.02] [--window 20]
        [--budgets 5e3,5e4,1e5,1e6,1e7] [--direction up|down] [--streams 40] [--steps 10000]

The demo's production budget (one false alarm per family per week, windows of 10 s):
48 critical_claim_unsupported streams (2 releases x 24 cells) -> 2.9e6 windows a stream,
96 answer_coverage streams -> 5.8e6.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from null_panel import renewal_rate
from scipy import stats

from monitor.detect import detectors as det
from monitor.detect import shares
from monitor.detect.thresholds import threshold

REF = 2_000
BUDGETS = "5e3,5e4,1e5,1e6,1e7"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", choices=("odds", "glr"), default="odds")
    parser.add_argument("--share", type=float, default=0.02)
    parser.add_argument("--window", type=int, default=20)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--streams", type=int, default=40)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--budgets", default=BUDGETS, help="ARL0 budgets, in windows")
    parser.add_argument("--direction", choices=("up", "down"), default="up",
                        help="watch the share for a rise or a drop (coverage up)")
    args = parser.parse_args(argv)
    budgets = [float(b) for b in args.budgets.split(",")]
    rng = np.random.default_rng(args.seed)
    sign = 1 if args.direction == "up" else -1
    # A count of 0 is the GLR's degenerate reference; it cannot drop.
    fewest = 0 if args.family == "glr" and sign > 0 else 1
    low = max(fewest, int(stats.binom.ppf(1e-9, REF, args.share)))
    counts = np.arange(low, int(stats.binom.ppf(1 - 1e-9, REF, args.share)) + 1)
    total, alarms = np.zeros(len(budgets)), np.zeros(len(budgets), np.int64)
    for k in counts:
        family: det.NullModel = (shares.Odds(k / REF, sign, REF) if args.family == "odds"
                              else det.Bernoulli(k / REF, sign, REF))
        t = rng.binomial(args.window, args.share, (args.streams, args.steps))
        n = np.full(args.steps, float(args.window))
        peaks = np.maximum.accumulate(det.glr_scan(family, n, t[..., None].astype(float)), 1)
        for j, budget in enumerate(budgets):
            alarmed, rate = renewal_rate(peaks, threshold(family, args.window, budget))
            total[j] += stats.binom.pmf(k, REF, args.share) * rate
            alarms[j] += alarmed
    for budget, rate, seen in zip(budgets, total, alarms, strict=True):
        arl0 = 1.0 / max(rate, 1e-300)
        print(f"{args.family} share {args.share} {args.direction} B={budget:8.2e}  "
              f"ARL0 <= {arl0:10.3g}  x{arl0 / budget:6.3f}  ({seen} alarms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
