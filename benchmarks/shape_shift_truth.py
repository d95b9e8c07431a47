"""A shape's threshold shift at long budgets, against long simulations (issue #44).

`thresholds.shape_shift` adds to a spread or location stream's model threshold the shift
its reference's shape makes, measured with the reference known exactly. This compares,
for one shape and direction of the spread stream (windows of `--window` traces):

- the product's pieces: the model's curve as calibrated (500 chains of 1,500 windows,
  extrapolated beyond), the shape's (`_SHIFT_CHAINS` chains of 1,000 windows) and the
  shift it carries from where that simulation reaches;
- the truth for a known reference: both simulated with `--chains` chains of `--steps`
  windows (longer than the budget: every threshold measured, none extrapolated).

    python benchmarks/shape_shift_truth.py --shape normal|four [--sign 1|-1]
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from scipy import stats

from monitor.detect import thresholds as th
from monitor.detect.detectors import GammaScale
from monitor.detect.empirical import Empirical

SHAPES = {
    # a standard normal as 64 equal-probability atoms: its true shift is the model's own
    # difference from the window statistic (degrees of freedom), no shape at all
    "normal": tuple((round(float(v), 4), 1 / 64)
                    for v in stats.norm.ppf((np.arange(64) + 0.5) / 64)),
    # four equally likely values (the null panel's coarse retriever), standardised
    "four": ((-1.3416, 0.25), (-0.4472, 0.25), (0.4472, 0.25), (1.3416, 0.25)),
}
BUDGETS = (1_000, 2_500, 5_000)


def curve(hs: np.ndarray, arls: np.ndarray, alarms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ok = alarms >= 40  # as `thresholds._simulate`
    return hs[ok], np.log(np.maximum.accumulate(arls[ok]))


def h_at(found: tuple[np.ndarray, np.ndarray], arl0: float) -> float:
    """The measured threshold for `arl0` (nan beyond the simulation: no extrapolation)."""
    hs, log_arls = found
    target = math.log(arl0)
    if target > log_arls[-1]:
        return float("nan")
    i = int(np.searchsorted(log_arls, target))
    if i == 0:
        return float(hs[0])
    frac = (target - log_arls[i - 1]) / max(log_arls[i] - log_arls[i - 1], 1e-12)
    return float(hs[i - 1] + frac * (hs[i] - hs[i - 1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="normal")
    ap.add_argument("--sign", type=int, choices=(1, -1), default=1)
    ap.add_argument("--window", type=float, default=20.0)
    ap.add_argument("--chains", type=int, default=2_000)
    ap.add_argument("--steps", type=int, default=6_000)
    args = ap.parse_args()
    shape = Empirical("spread", SHAPES[args.shape], args.sign, 0.5)
    key, n = th.calibration_key(GammaScale(1.0, 0.5, args.sign, float("inf")), args.window)
    model_long = curve(*th.run_lengths(key, n, args.steps, draws=1, repeat=args.chains))
    shape_long = curve(*th.run_lengths(shape, args.window, args.steps, draws=1,
                                       repeat=args.chains))
    shape_product = curve(*th.run_lengths(shape, args.window, th._SHIFT_STEPS, draws=1,
                                          repeat=th._SHIFT_CHAINS))
    reach = math.exp(float(shape_product[1][-1]))
    carried = h_at(shape_product, reach) - th._model_threshold(key, n, reach)
    print(f"spread {'up' if args.sign > 0 else 'down'}, shape {args.shape}, windows of "
          f"{args.window:.0f}; the shape's product simulation reaches {reach:,.0f} windows, "
          f"carried shift {carried:+.3f}")
    print("budget | model: product / long | shape: product / long | true shift | "
          "product threshold - true")
    for arl0 in BUDGETS:
        product_model = th._model_threshold(key, n, arl0)
        true_shift = h_at(shape_long, arl0) - h_at(model_long, arl0)
        at = min(arl0, reach)  # as `shape_shift`: measured up to the reach, carried beyond
        shift = h_at(shape_product, at) - th._model_threshold(key, n, at)
        print(f"{arl0:>6,} | {product_model:.3f} / {h_at(model_long, arl0):.3f} | "
              f"{h_at(shape_product, arl0):.3f} / {h_at(shape_long, arl0):.3f} | "
              f"{true_shift:+.3f} | {product_model + shift - h_at(shape_long, arl0):+.3f}")


if __name__ == "__main__":
    main()
