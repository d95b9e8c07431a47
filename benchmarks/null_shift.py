"""Does a stream's shape shift help or hurt its false-alarm budget? (issue #23)

For one shape of `null_panel` and one continuous stream (location or spread, a
direction), `--references` references of 2,000 traces are drawn; each gets two
thresholds for a budget of B windows of 20 traces: the product's (`thresholds.threshold`,
the model plus the shift its reference's shape makes) and the model's alone (the same
family without its shape). Both are watched on the *same* fresh null windows of the true
law, so the difference between them is the shift's doing, not the references' luck.
Cells: measured ARL0 / B (target 0.7-1.3x).

    python benchmarks/null_shift.py --shape beta64 --stream spread --direction up
        [--budget 5000] [--references 60] [--seed 11]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

import cells
import null_panel
import numpy as np

from monitor.detect import detectors as det
from monitor.detect.streams import with_shape
from monitor.detect.thresholds import threshold


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="beta64")
    parser.add_argument("--stream", choices=("location", "spread"), default="spread")
    parser.add_argument("--direction", choices=("up", "down"), default="up")
    parser.add_argument("--budget", type=float, default=5000.0)
    parser.add_argument("--references", type=int, default=60)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args(argv)
    shape = next(s for s in null_panel.SHAPES if s.name == args.shape)
    assert shape.kind == "signal" and not shape.cycle, "a continuous shape of fixed windows"
    lay = cells.layout()
    suffix = "_spread" if args.stream == "spread" else ""
    spec = cells.spec(lay, shape.signal + suffix, args.direction)
    rng = np.random.default_rng(args.seed)
    budget = args.budget
    steps, chains = null_panel.watch_plan(budget)
    sizes = np.full(steps, 20)
    rates: dict[str, list[float]] = {"product": [], "model alone": []}
    for _ in range(args.references):
        assert shape.draw is not None
        built = spec.build(cells.cell_of(lay, shape.signal, shape.draw(rng, (null_panel.REF,))))
        assert built is not None
        family = with_shape(built[0], 20.0, None)
        hs = {"product": threshold(family, 20.0, budget),
              "model alone": threshold(replace(family, atoms=None), 20.0, budget)}
        n, t = null_panel.null_windows(shape, spec, family, lay, sizes, chains, rng)
        peaks = np.maximum.accumulate(det.glr_scan(family, n, t), axis=1)
        for name, h in hs.items():
            rates[name].append(null_panel.renewal_rate(peaks, h)[1])
    cells_ = "  ".join(f"{name} {1.0 / np.mean(r) / budget:.2f}x" for name, r in rates.items())
    print(f"{args.shape} {spec.signal} {args.direction} B={budget:.0f} "
          f"({args.references} references): {cells_}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
