"""A stream's null simulated from its reference's own distribution, not a model's.

The detectors' statistics are a Gaussian GLR on window sums (location) and a Gamma-scale
GLR on within-window sums of squares (spread); their thresholds are calibrated on those
models (`thresholds`). Real signals are bounded, skewed, multimodal, rounded or made of
point masses, and the false-alarm rate of a statistic depends on that shape, most in
small windows. `Empirical` draws each window's traces from the reference's histogram
(`detectors.Atoms`, as `streams` coarsens it), and each reference from the same shape,
so that `thresholds.shape_shift` can measure how far the shape moves the threshold of
the two-sample statistic the stream runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from monitor.detect.detectors import Atoms, Base, GammaScale, GaussMean, strata

__all__ = ["Empirical"]

# References drawn per stratum of their mean (location) or variance (spread): the
# draws that calibrate a threshold are picked from these by their quantile.
_CANDIDATES = 50


@dataclass(frozen=True)
class Empirical:
    """The null of a location or spread stream simulated from a reference's own shape.

    Traces are drawn from `atoms` (standardised: mean 0, variance 1). With a finite
    `n_ref`, each simulated stream also gets its own reference of `n_ref` traces drawn
    from the same atoms, one per equal-probability stratum of its mean (location) or
    variance (spread), and runs the two-sample statistic against what that reference
    reads - how the shape meets the reference's uncertainty is part of what is measured
    (a law of four values reads its variance more precisely than a Gaussian, and its
    windows' sums of squares have another skew: benchmarks/RESULTS.md, "Null panel",
    session 38). With `n_ref` infinite the reference is the atoms themselves, known
    exactly. `kind` is "location" (t = window sum) or "spread" (t = sum of squares
    around the window's mean, n = window size - 1); the GLR is the model's."""

    kind: str
    atoms: Atoms
    sign: int = 1
    shape: float = 0.5  # the spread model's Gamma shape (its statistic's scale)
    n_ref: float = float("inf")
    width: int = 1

    @property
    def model(self) -> GaussMean | GammaScale:
        if self.kind == "location":
            return GaussMean(0.0, 1.0, self.sign, self.n_ref)
        return GammaScale(1.0, self.shape, self.sign, self.n_ref)

    def glr(self, n: np.ndarray, t: np.ndarray, base: Base = None) -> np.ndarray:
        return self.model.glr(n, t, base)

    def sample(self, rng: np.random.Generator, n: np.ndarray, draws: int,
               repeat: int = 1) -> np.ndarray:
        values, weights = self.standardised()
        chains = draws * repeat
        size = np.broadcast_to(np.maximum(np.round(n), 0).astype(np.int64),
                               (chains, np.shape(n)[-1]))  # n: (L,) or (chains, L)
        left = size.copy()
        total = np.zeros(size.shape)
        squares = np.zeros(size.shape)
        rest = 1.0
        for value, weight in zip(values, weights, strict=True):  # a chain of binomials
            share = 1.0 if rest <= weight else weight / rest
            got = rng.binomial(left, min(max(share, 0.0), 1.0))
            left -= got
            rest -= weight
            total += got * value
            squares += got * (value * value)
        mean, var = self._references(rng, values, weights, draws, repeat)
        if self.kind == "location":
            return np.asarray((total - size * mean) / np.sqrt(var))[..., None]
        return np.asarray(np.maximum(squares - total * total / np.maximum(size, 1), 0.0)
                          / var)[..., None]

    def window_n(self, n: np.ndarray) -> np.ndarray:
        """The n the GLR sees for windows of `n` traces (spread: degrees of freedom; a
        window of fewer than 2 traces reads no spread, `spread_sum`)."""
        size = np.maximum(np.round(n), 0.0)
        return size if self.kind == "location" else np.maximum(size - 1.0, 0.0)

    def standardised(self) -> tuple[np.ndarray, np.ndarray]:
        values = np.array([a[0] for a in self.atoms])
        weights = np.array([a[1] for a in self.atoms])
        weights = weights / weights.sum()
        mean = float((weights * values).sum())  # standardised here: the key is rounded
        sd = math.sqrt(max(float((weights * (values - mean) ** 2).sum()), 1e-12))
        return (values - mean) / sd, weights

    def _references(self, rng: np.random.Generator, values: np.ndarray, weights: np.ndarray,
                    draws: int, repeat: int) -> tuple[np.ndarray, np.ndarray]:
        """(chains, 1) means and variances the streams' references read: (0, 1) for a
        known reference, else one reference of `n_ref` traces per stratum of the
        statistic's own uncertainty, repeated `repeat` times."""
        if not math.isfinite(self.n_ref):
            return np.zeros((draws * repeat, 1)), np.ones((draws * repeat, 1))
        traces = round(self.n_ref)
        drawn = rng.multinomial(traces, weights, size=draws * _CANDIDATES) / traces
        mean = drawn @ values
        var = np.maximum(drawn @ (values * values) - mean * mean, 1e-12)
        order = np.argsort(mean if self.kind == "location" else var)
        picked = order[np.minimum((strata(rng, draws)[:, 0] * len(order)).astype(np.int64),
                                  len(order) - 1)]
        return (np.repeat(mean[picked], repeat)[:, None],
                np.repeat(var[picked], repeat)[:, None])
