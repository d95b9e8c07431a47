"""A calibration key's null simulated far longer than its calibration: do the product's
thresholds at long budgets (extrapolated beyond the ~15,000 windows the calibration
measures) hold them?

The key's own null (`family.sample`: true parameters drawn from the reference's
uncertainty, one stratum each, `--chains` strata a batch), `--windows` windows in
streams of `--steps`, watched by the GLR (`glr_scan`) to their first passage of every
threshold on a grid: ARL0(h) = windows watched / alarms (pooled: read it where few
streams alarm, i.e. well beyond the calibration's reach). Then the product's threshold
for each budget (`thresholds.threshold`, from the shipped or cached curve) is read
on that measured curve.

    python benchmarks/long_nulls.py --key share --share 0.005 --sign 1 --windows 8e7
    python benchmarks/long_nulls.py --key location --windows 6e7   (n_ref / window 100)
    python benchmarks/long_nulls.py --key spread --windows 5e7      (Gamma shape 10 a window)
    python benchmarks/long_nulls.py --key mix --categories 6 --windows 3e7
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np

from monitor.detect import detectors as det
from monitor.detect.thresholds import threshold

BUDGETS = (1e4, 3e4, 1e5, 1e6, 2.9e6, 5.8e6)


def key_of(args: argparse.Namespace) -> tuple[det.NullModel, float]:
    """The calibration key and its window size (as `thresholds.calibration_key` makes them)."""
    if args.key == "share":
        return det.Bernoulli(args.share, args.sign, 2000.0), 20.0
    if args.key == "location":
        return det.GaussMean(0.0, 1.0, 1, 100.0), 1.0
    if args.key == "spread":
        return det.GammaScale(1.0, 0.5, args.sign, 2000.0), 20.0
    k = args.categories
    return det.Multinomial((1.0 / k,) * k, 500.0 * k), 50.0 * k


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--key", choices=("share", "location", "spread", "mix"), default="share")
    parser.add_argument("--share", type=float, default=0.005011872336272725)
    parser.add_argument("--sign", type=int, default=1)
    parser.add_argument("--categories", type=int, default=6)
    parser.add_argument("--windows", type=float, default=2e7)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--chains", type=int, default=200)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args(argv)
    family, window = key_of(args)
    hs = np.arange(12.0, 28.01, 0.25) if args.key == "mix" else np.arange(5.0, 17.01, 0.25)
    rng = np.random.default_rng(args.seed)
    n = np.full(args.steps, window)
    alarms, watched, done, started = np.zeros(len(hs)), np.zeros(len(hs)), 0, time.time()
    while done < args.windows:
        peaks = np.maximum.accumulate(
            det.glr_scan(family, n, family.sample(rng, n, args.chains)), axis=1)
        for j, h in enumerate(hs):
            passage = (peaks <= h).sum(axis=1)
            alarms[j] += (passage < args.steps).sum()
            watched[j] += np.minimum(passage + 1, args.steps).sum()
        done += args.chains * args.steps
    print(f"{family}, windows of {window:g}: {done:.3g} windows in {time.time() - started:.0f} s")
    seen = alarms >= 5
    log_arl = np.log(watched[seen] / alarms[seen])
    for budget in BUDGETS:
        h = threshold(family, window, budget)
        if h > hs[seen][-1]:
            print(f"B {budget:8.2e}  h {h:6.2f}  beyond what the run measured")
            continue
        j = int(np.searchsorted(hs, h))
        arl0 = math.exp(float(np.interp(h, hs[seen], log_arl)))
        print(f"B {budget:8.2e}  h {h:6.2f}  measured ARL0 {arl0:9.3g}  x{arl0 / budget:5.2f}"
              f"  ({int(alarms[j])} alarms at h {hs[j]:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
