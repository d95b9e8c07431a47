"""The null panel at production budgets, from long runs of shapes' own nulls: for each
(shape, stream, direction), the product's threshold read on every saved run of a
reference (`long_nulls.py --key shape ... --save F`), ARL0 / budget per budget, and
pooled over the references as the panel pools them (1 / the mean of their rates).

    python benchmarks/production_panel.py ushape:11:top_score:up:/tmp/a.npz \
        ushape:12:top_score:up:/tmp/b.npz ... [--fixed-shift]

`--fixed-shift` adds the threshold a location shift carried as a fixed difference beyond
the shape's simulated curve would give (the rule before session 43); `--falls 0,0.5,...`
reads the product's thresholds with each of these values of `tails._FALL` (how fast a
spread drop's tail point falls beyond the curve: 0 held it, before session 46). A cell
reads NaN where its run saw fewer than 5 alarms beyond the threshold.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from dataclasses import replace

import long_nulls
import numpy as np

from monitor.detect import tails
from monitor.detect.thresholds import (
    _curve,
    _model_threshold,
    _shape_window,
    calibration_key,
    shape_shift,
    threshold,
)


def arl0(path: str, h: float) -> float:
    """ARL0 at threshold `h` on a saved long run (the calibration's estimator)."""
    with np.load(path) as saved:
        log_arl = long_nulls.measured_log_arl0(saved["hs"], saved["alarms"], saved["rate"], h)
    return math.exp(float(log_arl))


def fixed_shift(family, empirical, window: float, budget: float) -> float:
    """The threshold with the shape's shift at its curve's top carried unchanged."""
    n = _shape_window(window)
    top = math.exp(float(_curve(*calibration_key(empirical, n))[1][-1]))
    shift = shape_shift(family, window, min(budget, top))
    return _model_threshold(replace(family, atoms=None), n, budget) + shift


def _threshold(rule: str, family, empirical, budget: float) -> float:
    """The threshold `rule` gives at `budget`: the product's, with a fixed shift, or the
    product's with `tails._FALL` set to the value the rule names."""
    if rule == "fixed shift":
        return fixed_shift(family, empirical, 20.0, budget)
    if not rule.startswith("fall "):
        return threshold(family, 20.0, budget)
    kept = tails._FALL
    tails._FALL = float(rule.split()[1])
    try:
        return threshold(family, 20.0, budget)
    finally:
        tails._FALL = kept


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="shape:seed:stream:direction:saved.npz")
    parser.add_argument("--fixed-shift", action="store_true")
    parser.add_argument("--falls", type=lambda text: [float(x) for x in text.split(",")],
                        default=[], help="values of tails._FALL to read the product at")
    args = parser.parse_args(argv)
    rules = (["product", "fixed shift"] if args.fixed_shift else ["product"]) + [
        f"fall {fall:g}" for fall in args.falls]
    pooled: dict[tuple[str, str, str, str], list[list[float]]] = defaultdict(list)
    for run in args.runs:
        shape, seed, stream, direction, path = run.split(":", 4)
        spec = argparse.Namespace(shape=shape, stream=stream, direction=direction,
                                  seed=int(seed))
        family, empirical, scale = long_nulls.shape_stream(spec)
        for rule in rules:
            reads = [arl0(path, _threshold(rule, family, empirical, b) / scale) / b
                     for b in long_nulls.BUDGETS]
            pooled[(shape, stream, direction, rule)].append(reads)
            print(f"{shape} ({seed}) {stream} {direction}, {rule}: "
                  + " / ".join(f"{x:.2f}" for x in reads), flush=True)
    print("pooled over references, at " + " / ".join(f"{b:.2g}" for b in long_nulls.BUDGETS) + ":")
    for (shape, stream, direction, rule), rows in pooled.items():
        rates = 1.0 / np.array(rows)
        cells = 1.0 / np.nanmean(rates, axis=0)
        print(f"| {shape} | {stream} {direction} | {rule} | {len(rows)} | "
              + " / ".join(f"{x:.2f}" for x in cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
