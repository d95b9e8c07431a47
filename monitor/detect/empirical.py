"""A stream's null simulated from its reference's own distribution, not a model's.

The detectors' statistics are a Gaussian GLR on window sums (location) and a Gamma-scale
GLR on within-window sums of squares (spread); their thresholds are calibrated on those
models (`thresholds`). Real signals are bounded, skewed, multimodal, rounded or made of
point masses, and the false-alarm rate of a statistic depends on that shape, most in
small windows. `Empirical` draws each window's traces from the reference's histogram
(`detectors.Atoms`, as `streams` coarsens it), so that `thresholds.shape_shift` can
measure how far the shape moves the threshold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from monitor.detect.detectors import Atoms, Base, GammaScale, GaussMean

__all__ = ["Empirical"]


@dataclass(frozen=True)
class Empirical:
    """The null of a location or spread stream simulated from a reference's own shape.

    Traces are drawn from `atoms` (standardised: mean 0, variance 1), known exactly
    (`n_ref` infinite): `thresholds` measures how far this shape moves a threshold from
    the Gaussian (location) or Gamma (spread) model it is computed with, and adds that
    shift to the model's threshold, which carries the reference's sampling uncertainty.
    `kind` is "location" (t = window sum) or "spread" (t = sum of squares around the
    window's mean, n = window size - 1); the GLR is the model's, one-sample."""

    kind: str
    atoms: Atoms
    sign: int = 1
    shape: float = 0.5  # the spread model's Gamma shape (its statistic's scale)
    n_ref: float = float("inf")
    width: int = 1

    @property
    def model(self) -> GaussMean | GammaScale:
        if self.kind == "location":
            return GaussMean(0.0, 1.0, self.sign)
        return GammaScale(1.0, self.shape, self.sign)

    def glr(self, n: np.ndarray, t: np.ndarray, base: Base = None) -> np.ndarray:
        return self.model.glr(n, t)  # known exactly: the windows before add nothing

    def sample(self, rng: np.random.Generator, n: np.ndarray, draws: int,
               repeat: int = 1) -> np.ndarray:
        chains = draws * repeat
        size = np.broadcast_to(np.maximum(np.round(n), 1).astype(np.int64), (chains, len(n)))
        left = size.copy()
        total = np.zeros(size.shape)
        squares = np.zeros(size.shape)
        values = np.array([a[0] for a in self.atoms])
        weights = np.array([a[1] for a in self.atoms])
        weights = weights / weights.sum()
        mean = float((weights * values).sum())  # standardised here: the key is rounded
        values = (values - mean) / math.sqrt(max(float((weights * (values - mean) ** 2).sum()),
                                                 1e-12))
        rest = 1.0
        for value, weight in zip(values, weights, strict=True):  # a chain of binomials
            share = 1.0 if rest <= weight else weight / rest
            got = rng.binomial(left, min(max(share, 0.0), 1.0))
            left -= got
            rest -= weight
            total += got * value
            squares += got * (value * value)
        if self.kind == "location":
            return total[..., None]
        return np.maximum(squares - total * total / size, 0.0)[..., None]

    def window_n(self, n: np.ndarray) -> np.ndarray:
        """The n the GLR sees for windows of `n` traces (spread: degrees of freedom)."""
        size = np.maximum(np.round(n), 1.0)
        return size if self.kind == "location" else size - 1.0
