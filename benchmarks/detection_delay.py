"""Detection delay at a measured false-alarm rate: ragmon's GLR vs oracle, KS/Z, ADWIN, PH.

Every method watches one stream of per-trace values and is asked once per window of 20
traces (ragmon and the oracle; windowed tests re-test every 20 traces; River's detectors
see every trace). Each method is calibrated to ARL0 = 10,000 traces per stream, and
that ARL0 is then *measured* on fresh stationary streams (false alarms per trace,
reset after each alarm), so delays compare at equal false-alarm rates.

- ragmon: the product's streams (`monitor.detect.streams`: scores binned as the worker
  bins them and read as normal scores of the reference; shares as event counts) with the
  reference frozen from the first 2,000 traces of each stream (its default), threshold
  from `thresholds.threshold`
  (the product's own calibration: no tuning on this benchmark); after the freeze the
  reference grows by the product's policy (`monitor.detect.growth`: alarm-free blocks of 2,000
  traces join one block late, up to `--reference-max-traces`, default 20,000 as the
  setting; 0 keeps it frozen), the threshold recalibrated for each size.
- oracle: CUSUM of the true per-trace log-likelihood ratio (knows pre- and post-change
  laws), threshold by bisection to the ARL0.
- oracle_ref (not in the default methods): the oracle's CUSUM with the pre-change law
  estimated from ragmon's reference (size known, nothing grows): a bound on what that
  reference allows right after the freeze.
- windowed KS (continuous) / one-sided two-proportion Z (rates): reference = first
  1,000 traces, window = last 500 traces, threshold on the statistic by bisection.
- River ADWIN (delta) and PageHinkley (threshold; mode up/down as the change) by bisection.

Delay = traces from the change to the end of the first window after it that alarmed;
the change comes `--pre` stationary traces after the reference (default 1,000: right
after the freeze; a longer stretch shows a release that has run a while) plus a
uniform offset inside a window. A false alarm before the change is counted and the
stream goes on (every method resets itself after an alarm). Median over runs.

    taskset -c 0 python benchmarks/detection_delay.py [--runs 200] [--runs-baselines N]
        [--pre N] [--quick]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from functools import partial

import cells
import numpy as np
from delay_methods import (
    ARL0,
    PRE,
    REF_WINDOWED,
    TOP,
    Law,
    Step,
    W,
    adwin,
    beta_mean,
    oracle,
    oracle_ref,
    page_hinkley,
    ragmon_grid,
    ragmon_onesample,
    windowed,
)

from monitor.detect import detectors as det
from monitor.detect.growth import Growth
from monitor.detect.shares import LOG_ODDS, at_budget
from monitor.detect.streams import with_shape
from monitor.detect.thresholds import threshold as ragmon_threshold

REF_RAGMON = 2_000
GROWTH_LIMIT = 20_000  # ragmon's `reference_max_traces` default
LAYOUT = cells.layout()


SPREAD = beta_mean(0.6, 11 / 1.5625 - 1)
SCENARIOS = {
    "top_score mean +0.02": (TOP, beta_mean(0.62), "location", +1),
    "top_score mean +0.05": (TOP, beta_mean(0.65), "location", +1),
    "top_score mean +0.10": (TOP, beta_mean(0.70), "location", +1),
    "top_score sd x1.25": (TOP, SPREAD, "spread", +1),
    "critical_claim_unsupported 2% -> 3%": (Law("bern", p=0.02), Law("bern", p=0.03), "rate", +1),
    "critical_claim_unsupported 2% -> 4%": (Law("bern", p=0.02), Law("bern", p=0.04), "rate", +1),
    "critical_claim_unsupported 2% -> 6%": (Law("bern", p=0.02), Law("bern", p=0.06), "rate", +1),
    "answer coverage 80% -> 75%": (Law("bern", p=0.80), Law("bern", p=0.75), "rate", -1),
}
ISSUE_ORACLE = {  # the issue's measured oracle medians, for comparison
    "top_score mean +0.02": 288, "top_score mean +0.05": 62, "top_score mean +0.10": 23,
    "top_score sd x1.25": 59, "critical_claim_unsupported 2% -> 3%": 822,
    "critical_claim_unsupported 2% -> 4%": 281, "critical_claim_unsupported 2% -> 6%": 122,
    "answer coverage 80% -> 75%": 304,
}


# ---- methods: each is make(reference values) -> step(values) -> alarm ----------------------



def ragmon(kind: str, sign: int, limit: int,
           log_odds: float = LOG_ODDS) -> Callable[[np.ndarray], Step]:
    """ragmon's detector as the worker runs it: the stream spec's null model and window
    reading (a score's traces binned into the layout's histogram and read as normal scores
    of the reference; `monitor.detect.streams`), with the shape its threshold is calibrated
    on (`with_shape`); after the freeze the reference grows by the product's policy
    (`monitor.detect.growth`, blocks of the reference's own size) up to `limit` traces."""
    if kind == "rate":
        signal = "critical_claim_unsupported_rate" if sign > 0 else "answer_coverage"
    else:
        signal = "top_score" if kind == "location" else "top_score_spread"
    spec = cells.spec(LAYOUT, signal, "up" if sign > 0 else "down", log_odds)
    cell_signal = signal.removesuffix("_spread")

    def family_of(ref: np.ndarray, armed: det.NullModel | None) -> det.NullModel:
        built = spec.build(cells.cell_of(LAYOUT, cell_signal, ref), armed)
        assert built is not None
        return at_budget(with_shape(built[0], W, armed), ARL0 / W)

    def make(ref: np.ndarray) -> Step:
        family = family_of(ref, None)
        d = det.Detector(family, ragmon_threshold(family, W, ARL0 / W))
        growth: Growth[list[np.ndarray]] = Growth(len(ref), len(ref), limit, list)
        values = [ref]

        def step(x: np.ndarray) -> bool:
            alarm = d.update(*spec.window(cells.cell_of(LAYOUT, cell_signal, x), d.model)).alarm
            growth.block.append(x)
            ready = growth.observe(len(x), alarm)
            if ready:
                values.extend(ready)
                d.model = family_of(np.concatenate(values), d.model)
                d.threshold = ragmon_threshold(d.model, W, ARL0 / W)
            return alarm
        return step
    return make



def measured_arl0(make: Callable[[np.ndarray], Step], law: Law, ref_n: int, traces: int,
                  rng: np.random.Generator, streams: int = 40) -> tuple[float, int]:
    """Traces per false alarm on stationary streams (renewal: detectors reset themselves)."""
    alarms = 0
    for _ in range(streams):
        step = make(law.draw(rng, ref_n))
        x = law.draw(rng, traces // streams)
        for i in range(0, len(x) - W + 1, W):
            alarms += step(x[i:i + W])
    return traces / max(alarms, 1), alarms


def calibrate(build: Callable[[float], Callable[[np.ndarray], Step]], law: Law, ref_n: int,
              lo: float, hi: float, rng: np.random.Generator, log: bool = False,
              increasing: bool = True, iters: int = 11, traces: int = 600_000) -> float:
    """Bisection on a method's parameter until its measured ARL0 matches ARL0."""
    for _ in range(iters):
        mid = math.sqrt(lo * hi) if log else (lo + hi) / 2
        arl, _ = measured_arl0(build(mid), law, ref_n, traces, rng)
        if (arl < ARL0) == increasing:
            lo = mid
        else:
            hi = mid
    return math.sqrt(lo * hi) if log else (lo + hi) / 2


def delays(make: Callable[[np.ndarray], Step], pre: Law, post: Law, ref_n: int, runs: int,
           rng: np.random.Generator, pre_traces: int = PRE,
           horizon: int = 20_000) -> tuple[float, int]:
    """Median delay over `runs`; the change comes `pre_traces` (+ up to a window) after
    the reference. A false alarm before the change is counted and the detector goes on
    (it has reset itself, as in production); the delay is to the first alarm after it."""
    out: list[float] = []
    early = 0
    for _ in range(runs):
        step = make(pre.draw(rng, ref_n))
        change = pre_traces + int(rng.integers(0, W))
        x = np.concatenate([pre.draw(rng, change), post.draw(rng, horizon)])
        for i in range(0, len(x) - W + 1, W):
            if step(x[i:i + W]):
                end = i + W
                if end <= change:
                    early += 1
                    continue
                out.append(end - change)
                break
    return float(np.median(out)) if out else math.inf, early


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--runs-baselines", type=int,
                        help="runs for the windowed tests, ADWIN and PageHinkley (default: "
                             "--runs); their per-trace Python loops make 1,000 runs take hours")
    parser.add_argument("--quick", action="store_true", help="fewer traces for calibration")
    parser.add_argument("--only", help="substring of scenario names to run")
    parser.add_argument("--methods", default="ragmon,oracle,windowed,adwin,ph")
    parser.add_argument("--json", help="write results here")
    parser.add_argument("--reference-traces", type=int, default=REF_RAGMON,
                        help="traces in ragmon's reference (its default: 2000)")
    parser.add_argument("--reference-max-traces", type=int, default=GROWTH_LIMIT,
                        help="ragmon's reference grows up to this many traces (its default: "
                             "20000; 0 keeps it frozen)")
    parser.add_argument("--share-odds-ratio", type=float, default=math.exp(LOG_ODDS),
                        help="ragmon's share_odds_ratio (default: the product's, 1.75)")
    parser.add_argument("--pre", type=int, default=PRE,
                        help="stationary traces between the reference and the change")
    parser.add_argument("--seed", type=int, default=2026,
                        help="the draws' seed (another seed: an independent repeat)")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    cal_traces = 200_000 if args.quick else 600_000
    arl_traces = 400_000 if args.quick else 2_000_000
    methods = args.methods.split(",")
    results: dict[str, dict[str, object]] = {}
    baselines: dict[tuple[str, str, int], Callable[[np.ndarray], Step]] = {}
    for name, (pre, post, kind, sign) in SCENARIOS.items():
        if args.only and args.only not in name:
            continue
        row: dict[str, object] = {"issue_oracle": ISSUE_ORACLE[name]}
        t0 = time.time()
        for method in methods:
            if method == "oracle_ref" and kind == "spread":
                continue  # defined for rates and location shifts only
            if method in ("ragmon_onesample", "ragmon_grid") and kind != "rate":
                continue  # measured for shares only
            ref_n = (args.reference_traces
                     if method in ("ragmon", "oracle_ref", "ragmon_onesample", "ragmon_grid")
                     else REF_WINDOWED)
            key = (method, f"{pre}", sign if kind != "spread" else 2)
            if method == "ragmon":
                make = ragmon(kind, sign, args.reference_max_traces,
                              math.log(args.share_odds_ratio))
            elif method == "ragmon_onesample":
                make = ragmon_onesample(sign)
            elif method == "ragmon_grid":
                make = ragmon_grid(sign)
            elif method == "oracle":
                h = calibrate(partial(oracle, pre, post), pre, ref_n, 0.1, 20.0, rng,
                              traces=cal_traces)
                make = oracle(pre, post, h)
            elif method == "oracle_ref":
                h = calibrate(partial(oracle_ref, pre, post, kind), pre, ref_n, 0.1, 20.0,
                              rng, traces=cal_traces)
                make = oracle_ref(pre, post, kind, h)
            elif key in baselines:
                make = baselines[key]
            elif method == "windowed":
                lo, hi = (0.5, 8.0) if kind == "rate" else (0.02, 0.5)
                h = calibrate(partial(windowed, kind, sign), pre, ref_n, lo, hi, rng,
                              traces=cal_traces)
                make = baselines[key] = windowed(kind, sign, h)
            elif method == "adwin":
                d = calibrate(adwin, pre, ref_n, 1e-12, 0.5, rng, log=True, increasing=False,
                              iters=14, traces=cal_traces)
                make = baselines[key] = adwin(d)
            else:
                h = calibrate(partial(page_hinkley, sign), pre, ref_n, 0.01, 200.0, rng,
                              log=True, traces=cal_traces)
                make = baselines[key] = page_hinkley(sign, h)
            arl, alarms = measured_arl0(make, pre, ref_n, arl_traces, rng)
            runs = (args.runs if method in ("ragmon", "oracle", "oracle_ref", "ragmon_onesample",
                                            "ragmon_grid")
                    else args.runs_baselines or args.runs)
            median, early = delays(make, pre, post, ref_n, runs, rng, args.pre)
            row[method] = {"median_delay": median, "runs": runs, "measured_arl0": round(arl),
                           "false_alarms_measured": alarms, "false_alarms_before_change": early}
            print(f"{name:40s} {method:9s} delay {median:8.1f}  ARL0 {arl:9.0f} "
                  f"({alarms} alarms)  early {early}", flush=True)
        for method in ("ragmon", "oracle_ref", "ragmon_onesample", "ragmon_grid"):
            if method in row and "oracle" in row:
                r, o = row[method], row["oracle"]
                assert isinstance(r, dict) and isinstance(o, dict)
                ratio = round(r["median_delay"] / o["median_delay"], 2)
                row[f"{method}_over_oracle"] = ratio
                print(f"{name:40s} {method}/oracle = {ratio}  ({time.time() - t0:.0f}s)",
                      flush=True)
        results[name] = row
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
