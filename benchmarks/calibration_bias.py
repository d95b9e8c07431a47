"""Does a shape key's calibration read its null's ARL0 as a long run does, at the top of
its curve (where every threshold beyond is read from)? Variants of `run_lengths`
against a curve `long_nulls.py --save` measured.

    python benchmarks/calibration_bias.py --shape uniform --seed 12 \
        --long /tmp/uniform_up_12.npz --seeds 8 [--draws 80 --repeat 6] [--steps 10000]
        [--skip 256] [--own-sizes] [--own-grid] [--correct]

Prints, per calibration seed, log ARL0 of the calibration minus the long run's at the
curve's top (positive: the calibration reads more ARL0, so thresholds read from it are
eager), and the mean over the curve's top 2.3 nats. Defaults are the calibration's own:
20 references, 25 streams each, 1,500 windows, one draw of window sizes for all streams.
"""

from __future__ import annotations

import argparse
import sys

import long_nulls
import numpy as np

from monitor.detect.detectors import glr_scan
from monitor.detect.thresholds import _MIN_ALARMS, calibration_key


def curve(args: argparse.Namespace, key, window: float, seed: int
          ) -> tuple[np.ndarray, np.ndarray]:
    """(thresholds, log ARL0) as `thresholds.run_lengths` + `_simulate` make them, with
    the variant's references, streams, length, warm-up and window sizes."""
    peaks = _peaks(args, key, window, seed)
    steps = peaks.shape[1]
    # --own-grid: the thresholds from another simulation's peaks, not the measured one's
    grid = _peaks(args, key, window, seed + 1000) if args.own_grid else peaks
    hs = np.quantile(grid[:, -1], np.linspace(0.02, 0.98, 60))
    hs = np.unique(np.concatenate([np.linspace(0.25, hs[0], 10), hs]))
    passage = np.stack([(peaks <= h).sum(axis=1) for h in hs], axis=1)
    alarmed = passage < steps
    watched = np.minimum(passage + 1, steps).reshape(args.draws, args.repeat, -1).sum(axis=1)
    rate = alarmed.reshape(args.draws, args.repeat, -1).sum(axis=1) / watched
    mean = np.maximum(rate.mean(axis=0), 1e-12)
    log_arl = -np.log(mean)
    if args.correct:  # the log of a mean reads high by ~ its variance / 2 mean^2
        log_arl -= rate.var(axis=0, ddof=1) / args.draws / (2.0 * mean * mean)
    ok = alarmed.sum(axis=0) >= _MIN_ALARMS
    return hs[ok], np.maximum.accumulate(log_arl[ok])


def _peaks(args: argparse.Namespace, key, window: float, seed: int) -> np.ndarray:
    """Every simulated stream's running peak of the statistic."""
    rng = np.random.default_rng(seed)
    chains = args.draws * args.repeat
    n = rng.poisson(window, (chains, args.steps) if args.own_sizes else args.steps)
    n = n.astype(np.float64)
    stat = glr_scan(key, key.window_n(n), key.sample(rng, n, args.draws, args.repeat))
    return np.maximum.accumulate(stat[:, args.skip:], axis=1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", required=True, help="a null panel shape")
    parser.add_argument("--seed", type=int, default=11, help="the reference's seed")
    parser.add_argument("--stream", default="top_score_spread")
    parser.add_argument("--direction", default="up")
    parser.add_argument("--long", required=True, help="a curve long_nulls.py --save wrote")
    parser.add_argument("--seeds", type=int, default=4, help="calibration seeds 0..N-1")
    parser.add_argument("--draws", type=int, default=20, help="references drawn")
    parser.add_argument("--repeat", type=int, default=25, help="streams a reference")
    parser.add_argument("--steps", type=int, default=1_500)
    parser.add_argument("--skip", type=int, default=0, help="windows not counted at the start")
    parser.add_argument("--own-sizes", action="store_true",
                        help="each stream its own window sizes (the calibration: one draw)")
    parser.add_argument("--own-grid", action="store_true",
                        help="thresholds from an independent simulation (the calibration "
                             "takes them from the quantiles of the peaks it measures)")
    parser.add_argument("--correct", action="store_true",
                        help="subtract the delta-method bias of the log of the mean")
    args = parser.parse_args(argv)
    args.steps += args.skip
    _, key, _ = long_nulls.shape_stream(args)
    key, window = calibration_key(key, 20.0)
    with np.load(args.long) as saved:
        long_run = saved["hs"], saved["alarms"], saved["rate"]
    tops, means, reach = [], [], []
    for seed in range(args.seeds):
        hs, log_arls = curve(args, key, window, seed)
        top = log_arls >= log_arls[-1] - 2.3
        gap = log_arls[top] - long_nulls.measured_log_arl0(*long_run, hs[top])
        tops.append(gap[-1])
        means.append(gap.mean())
        reach.append(log_arls[-1])
    print(f"{args.shape} {args.seed} {args.stream} {args.direction}, {args.draws} x "
          f"{args.repeat} streams of {args.steps - args.skip} windows (skip {args.skip}, "
          f"own sizes {args.own_sizes}, own grid {args.own_grid}, corrected {args.correct}): "
          "at the top "
          + " ".join(f"{x:+.2f}" for x in tops)
          + f"; mean {np.mean(tops):+.3f}, over the top 2.3 nats {np.mean(means):+.3f}; "
          f"top at log ARL0 {np.mean(reach):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
