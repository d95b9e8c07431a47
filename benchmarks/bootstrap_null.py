"""Would a bootstrapped null hold the spread budget? (issue #23, an experiment)

The product's threshold of a location or spread stream is its model's (Gaussian /
Gamma, the reference's uncertainty drawn from the model) plus the shift the reference's
own shape makes measured with the reference known exactly (`thresholds.shape_shift`).
Spread up runs short of its budget on every shape of the null panel (0.51-0.71x at
B = 5,000). This script calibrates the same streams the way issue #23 asks instead:
simulated from the reference's own histogram *and* its sampling uncertainty in one
simulation - each draw a true law p ~ Dirichlet(reference counts) over the reference's
scored bins (the Bayesian bootstrap), drawn one per stratum of the truth's score
variance (or mean, for location), as `detectors.strata` does for the models - windows
from p read through the reference's scores, and the product's own two-sample GLR.

For each of `--references` references of 2,000 traces of a panel shape it reports both
thresholds and the ARL0 each gives on fresh windows of the true law (watched as
`null_panel.measured` watches them), so the two are compared on the same references.

    python benchmarks/bootstrap_null.py --shape beta64 --direction up --budget 5000
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass

import cells
import null_panel
import numpy as np

from monitor.detect import detectors as det
from monitor.detect.streams import with_shape
from monitor.detect.thresholds import extrapolated, threshold

_CANDIDATES = 50  # Dirichlet draws per stratum, one kept


@dataclass(frozen=True)
class Bootstrapped:
    """A location or spread stream's null: truths from the reference's histogram."""

    family: det.GaussMean | det.GammaScale
    kind: str  # "location" or "spread"
    width: int = 1

    @property
    def n_ref(self) -> float:
        return self.family.n_ref

    def glr(self, n: np.ndarray, t: np.ndarray, base: det.Base = None) -> np.ndarray:
        return self.family.glr(n, t, base)

    def window_n(self, n: np.ndarray) -> np.ndarray:
        size = np.maximum(np.round(n), 1.0)
        return size if self.kind == "location" else size - 1.0

    def sample(self, rng: np.random.Generator, n: np.ndarray, draws: int,
               repeat: int = 1) -> np.ndarray:
        f = self.family
        assert f.atoms is not None
        v = np.array([a[0] for a in f.atoms])
        w = np.array([a[1] for a in f.atoms])
        w = w / w.sum()
        # Standardised atoms back on the stream's scale (a spread's mean is its variance).
        centre, var = (f.mean, f.var) if isinstance(f, det.GaussMean) else (0.0, f.mean)
        s = centre + math.sqrt(var) * v
        cand = rng.gamma(w * f.n_ref, 1.0, (draws * _CANDIDATES, len(w)))
        cand /= cand.sum(axis=1, keepdims=True)
        mean = cand @ s
        stat = mean if self.kind == "location" else cand @ (s * s) - mean * mean
        pick = np.argsort(stat)[np.arange(draws) * _CANDIDATES
                                + rng.integers(0, _CANDIDATES, draws)]
        ps = np.repeat(cand[pick], repeat, 0)
        size = np.maximum(np.round(n), 1).astype(np.int64)
        width = int(size.max())
        inside = np.arange(width)[None, :] < size[:, None]  # (L, width)
        out = np.empty((len(ps), len(n), 1))
        for i, p in enumerate(ps):  # traces by inverse CDF: cheaper than multinomials
            cdf = np.cumsum(p)
            x = s[np.minimum(np.searchsorted(cdf, rng.random((len(n), width)) * cdf[-1]),
                             len(s) - 1)] * inside
            total, squares = x.sum(axis=1), (x * x).sum(axis=1)
            out[i, :, 0] = (total if self.kind == "location"
                            else np.maximum(squares - total * total / size, 0.0))
        return out


def bootstrapped_threshold(null: Bootstrapped, window_n: float, arl0: float,
                           steps: int = 1500, draws: int = 20, repeat: int = 25) -> float:
    """As `thresholds.run_lengths` + `_model_threshold`, on the bootstrapped null."""
    rng = np.random.default_rng(0)
    n = np.full(steps, float(window_n))
    peaks = np.maximum.accumulate(
        det.glr_scan(null, null.window_n(n), null.sample(rng, n, draws, repeat)), axis=1)
    hs = np.quantile(peaks[:, -1], np.linspace(0.02, 0.98, 60))
    hs = np.unique(np.concatenate([np.linspace(0.25, hs[0], 10), hs]))
    passage = np.stack([(peaks <= h).sum(axis=1) for h in hs], axis=1)
    alarmed = passage < steps
    watched = np.minimum(passage + 1, steps).reshape(draws, repeat, -1).sum(axis=1)
    rate = (alarmed.reshape(draws, repeat, -1).sum(axis=1) / watched).mean(axis=0)
    ok = alarmed.sum(axis=0) >= 40
    hs, log_arls = hs[ok], np.log(np.maximum.accumulate(1.0 / np.maximum(rate[ok], 1e-12)))
    target = math.log(arl0)
    if target <= log_arls[-1]:
        return float(np.interp(target, log_arls, hs))
    return extrapolated(hs, log_arls, target, 0.5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="beta64")
    parser.add_argument("--stream", default="spread", choices=["spread", "location"])
    parser.add_argument("--direction", default="up")
    parser.add_argument("--budget", type=float, default=5000.0)
    parser.add_argument("--references", type=int, default=20)
    parser.add_argument("--window", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    lay = cells.layout()
    shape = next(s for s in null_panel.SHAPES if s.name == args.shape)
    name = shape.signal + ("_spread" if args.stream == "spread" else "")
    spec = cells.spec(lay, name, args.direction)
    rng = np.random.default_rng(args.seed)
    steps, chains = null_panel.watch_plan(args.budget)
    rates: dict[str, list[float]] = {"product": [], "bootstrapped": []}
    started = time.perf_counter()
    for _ in range(args.references):
        assert shape.draw is not None
        ref = shape.draw(rng, (null_panel.REF,))
        built = spec.build(cells.cell_of(lay, shape.signal, ref))
        assert built is not None
        family = with_shape(built[0], float(args.window), None)
        assert isinstance(family, det.GaussMean | det.GammaScale)
        hs = {"product": threshold(family, float(args.window), args.budget),
              "bootstrapped": bootstrapped_threshold(Bootstrapped(family, args.stream),
                                                     float(args.window), args.budget)}
        sizes = np.full(steps, args.window)
        n, t = null_panel.null_windows(shape, spec, family, lay, sizes, chains, rng)
        peaks = np.maximum.accumulate(det.glr_scan(family, n, t), axis=1)
        for key, h in hs.items():
            rates[key].append(null_panel.renewal_rate(peaks, h)[1])
        print(f"  h product {hs['product']:.2f} bootstrapped {hs['bootstrapped']:.2f}",
              flush=True)
    for key, r in rates.items():
        print(f"{args.shape} {name} {args.direction} B={args.budget:.0f} {key}: "
              f"ARL0 / B = {1.0 / np.mean(r) / args.budget:.2f}x "
              f"({args.references} references, {time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
