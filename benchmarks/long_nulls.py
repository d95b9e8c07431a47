"""A calibration key's null simulated far longer than its calibration: do the product's
thresholds at long budgets (extrapolated beyond the ~15,000 windows the calibration
measures) hold them?

The key's own null (`family.sample`: true parameters drawn from the reference's
uncertainty, one stratum each, `--chains` strata a batch), `--windows` windows in
streams of `--steps`, watched by the GLR (`glr_scan`) to their first passage of every
threshold on a grid: ARL0(h) = windows watched / alarms (pooled: read it where few
streams alarm, i.e. well beyond the calibration's reach). Then the product's threshold
for each budget (`thresholds.threshold`, from the shipped or cached curve) is read
on that measured curve. With `--repeat R` each drawn reference runs R streams and the
calibration's own estimator is printed beside it: 1 / the mean over draws of their rate
(pooling under-weights the references that alarm early, whose streams stop sooner). A
reference's rate over few streams reads high, ARL0 low by O(1 / R): ~5-10% with R = 10
(`ratio_bias.py`); use `--repeat 100 --chains 40 --steps 1500` where the figure matters
(`--chains 4` draws few references: few alarms, and a wide reading, at long budgets).

    python benchmarks/long_nulls.py --key share --share 0.005 --sign 1 --windows 8e7
    python benchmarks/long_nulls.py --key location --windows 6e7   (n_ref / window 100)
    python benchmarks/long_nulls.py --key spread --windows 5e7      (Gamma shape 10 a window)
    python benchmarks/long_nulls.py --key mix --categories 6 --windows 3e7
    python benchmarks/long_nulls.py --key shape --shape fewvalued --stream top_score_spread
        --direction down --windows 3e7

`--key shape`: a null panel shape's stream (one reference of 2,000 traces drawn from the
shape, binned and built as the worker does), whose threshold is its model's plus the
shape's shift (measured to ~15,000 windows, carried beyond); the long run simulates
the shape's own null (`empirical.Empirical`: windows drawn from the reference's
histogram, each stream's reference too), so it checks that carry at long budgets.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import replace

import cells
import null_panel
import numpy as np

from monitor.detect import detectors as det
from monitor.detect import tails
from monitor.detect.empirical import Empirical
from monitor.detect.streams import stream_specs, with_shape
from monitor.detect.thresholds import _shape_window, empirical_key, threshold

BUDGETS = (1e4, 3e4, 1e5, 1e6, 2.9e6, 5.8e6)


def measured_log_arl0(hs: np.ndarray, alarms: np.ndarray, rate: np.ndarray,
                      h: np.ndarray | float) -> np.ndarray:
    """log ARL0 at thresholds `h` on a measured curve, by the calibration's estimator
    (1 / the mean over draws of their rate), read where >= 5 alarms; NaN beyond."""
    seen = alarms >= 5
    h = np.asarray(h, dtype=np.float64)
    log_arl = np.interp(h, hs[seen], -np.log(rate[seen]))
    return np.where(h > hs[seen][-1], np.nan, log_arl)


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


def shape_stream(args: argparse.Namespace) -> tuple[det.NullModel, Empirical, float]:
    """(the stream's family, its shape's null, threshold units per key unit)."""
    shape = next(s for s in null_panel.SHAPES + null_panel.HELD_OUT
                 if s.name == args.shape)
    lay = cells.layout()
    spec = next(s for s in stream_specs(lay)
                if s.signal == args.stream and s.direction == args.direction)
    ref = shape.draw(np.random.default_rng(args.seed), (null_panel.REF,))
    built = spec.build(null_panel.cell_of(lay, shape, ref))
    assert built is not None
    family = with_shape(built[0], 20.0, None)
    assert isinstance(family, det.GaussMean | det.GammaScale)
    empirical = empirical_key(family, 20.0)
    assert empirical is not None, "a shape the model holds: no shift to check"
    scale = family.shape / empirical.shape if isinstance(family, det.GammaScale) else 1.0
    return family, empirical, scale


def passages(peaks: np.ndarray, hs: np.ndarray, chains: int, repeat: int
             ) -> tuple[np.ndarray, np.ndarray]:
    """(alarms, windows watched), each (thresholds, references): for every threshold, the
    streams of each drawn reference (`repeat` a reference, in order) that passed it
    (`peaks`: their running peaks), and the windows they were watched to their first
    passage or their end."""
    steps = peaks.shape[1]
    alarms = np.empty((len(hs), chains))
    watched = np.empty((len(hs), chains))
    for j, h in enumerate(hs):
        passage = (peaks <= h).sum(axis=1)
        alarms[j] = (passage < steps).reshape(chains, repeat).sum(axis=1)
        watched[j] = np.minimum(passage + 1, steps).reshape(chains, repeat).sum(axis=1)
    return alarms, watched


def simulate(args: argparse.Namespace, simulated: det.NullModel, window: float
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(thresholds, alarms, windows watched, mean over draws of their false-alarm rate)
    of `--windows` windows of the null, `--repeat` streams a drawn reference."""
    seen_n = simulated.window_n if isinstance(simulated, Empirical) else (lambda n: n)
    hs = np.arange(5.0, 40.01, 0.25)
    rng = np.random.default_rng(args.seed)
    n = np.full(args.steps, window)
    alarms, watched, rates = np.zeros(len(hs)), np.zeros(len(hs)), np.zeros(len(hs))
    done, draws, started = 0, 0, time.time()
    while done < args.windows:
        if args.poisson:  # window sizes as a stream's traffic gives them: each stream's
            # own (one draw shared by a batch's streams made their alarms cluster)
            n = rng.poisson(window, (args.chains * args.repeat, args.steps)).astype(np.float64)
        peaks = np.maximum.accumulate(det.glr_scan(
            simulated, seen_n(n), simulated.sample(rng, n, args.chains, args.repeat)), axis=1)
        alarmed, seen = passages(peaks, hs, args.chains, args.repeat)
        alarms += alarmed.sum(axis=1)
        watched += seen.sum(axis=1)
        rates += (alarmed / seen).sum(axis=1)
        done += args.chains * args.repeat * args.steps
        draws += args.chains
    print(f"{simulated}, windows of {window:g}: {done:.3g} windows in "
          f"{time.time() - started:.0f} s")
    if args.save:
        np.savez(args.save, hs=hs, alarms=alarms, watched=watched, rate=rates / draws)
    return hs, alarms, watched, rates / draws


def print_tail_points(key: Empirical, window: float, hs: np.ndarray, alarms: np.ndarray,
                      rate: np.ndarray) -> None:
    """Where a spread key's measured log ARL0 lies between the union over lags (k = 0) and
    the largest lag's term (k = 1) of its one-sample tail (`tails.exponent`)."""
    grid, union, largest = tails.exponent(key, _shape_window(window))
    for h in hs[alarms >= 5][::4]:
        j = min(int(np.searchsorted(grid, h)), len(grid) - 1)
        measured = float(measured_log_arl0(hs, alarms, rate, h))
        k = (measured - union[j]) / (largest[j] - union[j])
        print(f"h {h:6.2f}  log ARL0 {measured:6.2f}  union {union[j]:6.2f}  "
              f"largest {largest[j]:6.2f}  k {k:5.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--key", choices=("share", "location", "spread", "mix", "shape"),
                        default="share")
    parser.add_argument("--shape", default="fewvalued", help="a null panel shape")
    parser.add_argument("--stream", default="top_score_spread")
    parser.add_argument("--direction", default="down")
    parser.add_argument("--share", type=float, default=0.005011872336272725)
    parser.add_argument("--sign", type=int, default=1)
    parser.add_argument("--categories", type=int, default=6)
    parser.add_argument("--windows", type=float, default=2e7)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--chains", type=int, default=200, help="references drawn a batch")
    parser.add_argument("--repeat", type=int, default=1, help="streams a drawn reference")
    parser.add_argument("--poisson", action="store_true",
                        help="Poisson window sizes around the window (fixed: a staircase)")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--save", help="write the measured curve (hs, alarms, watched) here")
    parser.add_argument("--load", help="read a curve --save wrote instead of simulating")
    parser.add_argument("--one-sample", action="store_true",
                        help="--key shape: the shape itself as every stream's reference (no "
                             "reference error, as `tails` models it); prints the tail's point")
    args = parser.parse_args(argv)
    if args.one_sample and args.key != "shape":
        parser.error("--one-sample reads a shape key's tail: it needs --key shape")
    simulated: det.NullModel
    if args.key == "shape":
        (family, simulated, scale), window = shape_stream(args), 20.0
        if args.one_sample:
            simulated = replace(simulated, n_ref=math.inf)
    else:
        (family, window), scale = key_of(args), 1.0
        simulated = family
    if args.load:
        with np.load(args.load) as saved:
            hs, alarms, watched = saved["hs"], saved["alarms"], saved["watched"]
            rate = saved.get("rate")
    else:
        hs, alarms, watched, rate = simulate(args, simulated, window)
    seen = alarms >= 5
    log_arl = np.log(watched[seen] / alarms[seen])
    if args.one_sample:
        assert isinstance(simulated, Empirical) and rate is not None  # --key shape
        print_tail_points(simulated, window, hs, alarms, rate)
        return 0
    for budget in BUDGETS:
        h = threshold(family, window, budget) / scale  # in the simulated statistic's units
        if h > hs[seen][-1]:
            print(f"B {budget:8.2e}  h {h:6.2f}  beyond what the run measured")
            continue
        j = int(np.searchsorted(hs, h))
        arl0 = math.exp(float(np.interp(h, hs[seen], log_arl)))
        line = (f"B {budget:8.2e}  h {h:6.2f}  measured ARL0 {arl0:9.3g}  x{arl0 / budget:5.2f}"
                f"  ({int(alarms[j])} alarms at h {hs[j]:.2f})")
        if rate is not None and args.repeat > 1:  # the calibration's estimator
            mean = math.exp(float(measured_log_arl0(hs, alarms, rate, h)))
            line += f"  mean of draws' rates: x{mean / budget:5.2f}"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
