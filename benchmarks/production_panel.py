"""The null panel at production budgets, from long runs of shapes' own nulls: for each
(shape, stream, direction), the product's threshold read on every saved run of a
reference (`long_nulls.py --key shape ... --save F`), ARL0 / budget per budget, and
pooled over the references as the panel pools them (1 / the mean of their rates).

    python benchmarks/production_panel.py ushape:11:top_score:up:/tmp/a.npz \
        ushape:12:top_score:up:/tmp/b.npz ... [--fixed-shift]

`--fixed-shift` adds the threshold a location shift carried as a fixed difference beyond
the shape's simulated curve would give (the rule before session 43). A cell reads NaN
where its run saw fewer than 5 alarms beyond the threshold.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from dataclasses import replace

import long_nulls
import numpy as np

from monitor.detect.thresholds import (
    _curve,
    _model_threshold,
    _shape_window,
    calibration_key,
    threshold,
)

BUDGETS = (1e4, 3e4, 1e5, 1e6, 2.9e6, 5.8e6)


def arl0(path: str, h: float) -> float:
    """ARL0 at threshold `h` on a saved long run (the calibration's estimator)."""
    with np.load(path) as saved:
        hs, alarms, rate = saved["hs"], saved["alarms"], saved["rate"]
    seen = alarms >= 5
    if not seen.any() or h > hs[seen][-1]:
        return float("nan")
    return math.exp(float(np.interp(h, hs[seen], -np.log(rate[seen]))))


def fixed_shift(family, window: float, budget: float) -> float:
    """The threshold with the shape's shift at its curve's top carried unchanged."""
    _, key, scale = family
    n = _shape_window(window)
    log_arls = _curve(*calibration_key(key, n))[1]
    at = min(budget, math.exp(float(log_arls[-1])))
    model = replace(family[0], atoms=None)
    shift = scale * _model_threshold(key, n, at) - _model_threshold(model, n, at)
    return _model_threshold(model, n, budget) + shift


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="shape:seed:stream:direction:saved.npz")
    parser.add_argument("--fixed-shift", action="store_true")
    args = parser.parse_args(argv)
    rules = ("product", "fixed shift") if args.fixed_shift else ("product",)
    pooled: dict[tuple[str, str, str, str], list[list[float]]] = defaultdict(list)
    for run in args.runs:
        shape, seed, stream, direction, path = run.split(":", 4)
        spec = argparse.Namespace(shape=shape, stream=stream, direction=direction,
                                  seed=int(seed))
        family = long_nulls.shape_stream(spec)
        scale = family[2]
        for rule in rules:
            reads = [arl0(path, (threshold(family[0], 20.0, b) if rule == "product"
                                 else fixed_shift(family, 20.0, b)) / scale) / b
                     for b in BUDGETS]
            pooled[(shape, stream, direction, rule)].append(reads)
            print(f"{shape} ({seed}) {stream} {direction}, {rule}: "
                  + " / ".join(f"{x:.2f}" for x in reads), flush=True)
    print("pooled over references, at " + " / ".join(f"{b:.2g}" for b in BUDGETS) + ":")
    for (shape, stream, direction, rule), rows in pooled.items():
        rates = 1.0 / np.array(rows)
        cells = 1.0 / np.nanmean(rates, axis=0)
        print(f"| {shape} | {stream} {direction} | {rule} | {len(rows)} | "
              + " / ".join(f"{x:.2f}" for x in cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
