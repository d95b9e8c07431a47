"""How far the calibration's estimator of a reference's false-alarm rate reads from the
truth, on run lengths whose law is known: exponential with mean ARL0, censored where a
simulated stream ends.

A reference's rate is read as alarms / windows watched over its R streams, each watched
to its first alarm or its end (`thresholds.run_lengths`, `long_nulls.simulate`); the
ARL0 is 1 / the mean of those rates over references. A stream that alarms is also
watched for fewer windows, so with few streams a reference's ratio reads high, and the
log ARL0 low, by O(1 / R), however long the budget:

    python benchmarks/ratio_bias.py [--arl0 16000] [--draws 400000]

Prints log ARL0 read minus the truth for the calibration (25 streams of 1,500 windows),
the long runs (10 of 10,000) and the layouts `calibration_bias.py` tried.
"""

from __future__ import annotations

import argparse
import math
import sys

import numpy as np

LAYOUTS = ((25, 1_500, "the calibration"), (10, 10_000, "the long runs"),
           (25, 10_000, "--steps 10000"), (6, 1_500, "--repeat 6"), (5, 1_500, "--repeat 5"),
           (2, 1_500, "--repeat 2"), (1, 1_500, "--repeat 1"))


def read_log_arl0(rng: np.random.Generator, arl0: float, streams: int, steps: int,
                  draws: int) -> float:
    """log ARL0 as the calibration reads it from `draws` references of `streams` streams
    of `steps` windows, the run lengths exponential with mean `arl0`."""
    runs = rng.exponential(arl0, (draws, streams))
    alarms = (runs < steps).sum(axis=1)
    watched = (np.minimum(np.floor(runs), steps - 1) + 1).sum(axis=1)
    return -math.log(float(np.mean(alarms / watched)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arl0", type=float, nargs="+", default=[1.6e4, 1e6])
    parser.add_argument("--draws", type=int, default=400_000)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    for arl0 in args.arl0:
        print(f"ARL0 {arl0:.3g}: log ARL0 read minus the truth")
        for streams, steps, name in LAYOUTS:
            error = read_log_arl0(rng, arl0, streams, steps, args.draws) - math.log(arl0)
            print(f"  {streams:3d} streams x {steps:6,d} windows ({name}): {error:+.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
