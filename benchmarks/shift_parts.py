"""Which part of a spread-down shape key's threshold binds beyond its calibration's reach:
the shift carried from the curve's top, or the shape's own tail (`tails`)?

`thresholds.shape_shift` takes the larger of the two for a drop. Prints both (in the
stream's units, over its model's threshold) at each budget beyond the shape's simulated
curve, for null panel shapes built as `long_nulls.py --key shape` builds them.

    python benchmarks/shift_parts.py uniform:11 uniform:12 beta64:11
"""

from __future__ import annotations

import argparse
import math
import sys

import long_nulls

from monitor.detect import thresholds as th

BUDGETS = (1e4, 1e5, 1e6, 5.8e6)
WINDOW = 20.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("keys", nargs="+", help="SHAPE:SEED, a null panel shape and the "
                                                 "seed of its reference")
    parser.add_argument("--stream", default="top_score_spread")
    args = parser.parse_args(argv)
    for item in args.keys:
        shape, seed = item.split(":")
        stream = argparse.Namespace(shape=shape, stream=args.stream, direction="down",
                                    seed=int(seed))
        family, key, _ = long_nulls.shape_stream(stream)
        log_arls = th._curve(*th.calibration_key(key, th._shape_window(WINDOW)))[1]
        top = math.exp(float(log_arls[-1]))
        parts = []
        for budget in BUDGETS:
            carried, tail = th.shift_parts(family, WINDOW, budget)
            if tail is None:
                parts.append(f"{budget:.1e} within the curve")
                continue
            parts.append(f"{budget:.1e} carried {carried:+.2f} tail {tail:+.2f}")
        print(f"{shape} {seed} (curve to {top:.3g} windows): " + " | ".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
