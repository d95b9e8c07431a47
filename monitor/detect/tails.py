"""A shape's spread tail, at budgets no simulation of the shape reaches.

A spread stream's threshold is its model's plus the shift its reference's shape makes,
simulated (`empirical.Empirical`) to ~15,000 windows and carried beyond. Scores with few
distinct values, or a point mass, break that carry when watched for a drop: a window
whose traces fall on one or two neighbouring values reads a variance far below the
reference's, far more often than the Gamma model of the reference's kurtosis allows.
At production budgets (10^5-10^7 windows a stream) such single windows set the
false-alarm rate: four distinct values paged 5-10x their budget at 10^6-5.8 x 10^6
windows (benchmarks/RESULTS.md, "Lumpy spread down").

So that tail is computed here rather than simulated: the law of one window's sum of
squares, importance-sampled from the shape (windows drawn from the shape tilted towards
each of its values, so that windows of near-equal values are seen however rare, and
weighted back); for one window, over the Poisson law of sizes a stream's traffic gives
its windows (a window smaller than the typical one falls on one value far more often:
with windows of exactly 20 traces four values still paged 0.1-0.6x their budget); its
sums over the detector's longer lags by convolution, at the typical size; and for each
threshold h the union over lags of P(G_lag > h) and its largest term, one-sample (the
reference taken as exact). The false-alarm rate lies between the two, nearer the largest
term where single windows dominate; `threshold_beyond` reads where from the shape's
simulated curve (simulated on Poisson window sizes too), and for a drop lets that point
fall towards the union as h grows beyond it, as long runs of every smooth shape show.

A rise is computed the same way, its windows pulled away from the mean (weighted by
exp(t v^2)) instead of towards a value. There the carried shift runs cautious (the
shape's curve climbs faster than its model's: 1.2-2.0x at 10^6-5.8 x 10^6 windows on a
U shape) and this tail eager (the point between union and largest term drifts towards
the union as h grows: 0.5-1.0x), so `thresholds.shape_shift` takes the midpoint
(benchmarks/RESULTS.md, "Spread up beyond the run").

    >>> threshold_beyond(key, 20.0, hs, log_arls, math.log(1e6))  # doctest: +SKIP
    20.1
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from monitor.detect.detectors import LAGS, RATIO_FLOOR, GammaScale
from monitor.detect.empirical import Empirical

__all__ = ["exponent", "threshold_beyond"]

_WINDOWS = 60_000   # windows importance-sampled from the shape
_CELLS = 1_000      # grid cells of a window's sum of squares per unit of variance ratio
_SPAN = 2           # a window's sum of squares is kept up to this many times its mean
_RISE_SPAN = 8      # and for a rise (a window beyond it only matters to the first lag)
_TILTS = (0.5, 2.0, 8.0)  # strengths of the pull towards a value (standardised units)
_CENTRES = 12       # values pulled towards, at quantiles of the shape's values
_SPREADS = (0.25, 0.5, 1.0, 2.0)  # a rise's pulls away from the mean, exp(t v^2)
# How fast a drop's tail point k falls beyond the curve: chosen on the null panel shapes'
# long runs of a spread drop at 10^4-5.8 x 10^6 windows (of 0, 0.25, 0.5, 0.75 and 1, the
# one value with every cell within 0.7-1.3x), checked on four shapes held out of it
# (benchmarks/RESULTS.md, "Session 46").
_FALL = 0.5
_STEP = 0.02        # the threshold grid's step
_TOP = 150.0        # and its end: beyond it no budget a stream is given reaches
_GRID = np.arange(0.0, _TOP, _STEP)
_GRID.flags.writeable = False  # shared by every key's tail


def threshold_beyond(key: Empirical, window_n: float, hs: np.ndarray, log_arls: np.ndarray,
                     target: float) -> float:
    """The threshold at `target` (log ARL0) of a spread-down key beyond its simulated curve
    (`hs`, `log_arls`); never below the curve's top.

    The union over lags counts an excursion once for every lag that sees it, the largest
    lag's term once in all: the false-alarm rate lies between them, nearer the largest
    term where single windows dominate. So log ARL0 = union + k (largest - union), k
    read off the curve's last 2.3 nats (clipped to [0, 1]); where the curve lies below
    even the union, the union lowered by that much.

    For a drop, k falls beyond the curve as h grows (`_FALL`): the rarer the excursion,
    the less the lags' exceedances overlap, and the nearer the rate comes to their union.
    Measured on every smooth shape's long runs, one-sample and two-sample alike (uniform
    scores: k 0.40 at log ARL0 10, 0.30-0.34 at 12-13); where single windows dominate (point
    masses, few values) the union nears the largest term and k hardly matters. A rise
    keeps k: its threshold is the midpoint of this tail and the carried shift, which holds
    its budget (the fall on a rise put the U shape at 1.35x at 5.8 x 10^6 windows;
    benchmarks/RESULTS.md, "Session 46")."""
    grid, union, largest = exponent(key, window_n)
    top = log_arls >= log_arls[-1] - 2.3
    at = np.minimum(np.searchsorted(grid, hs[top]), len(grid) - 1)
    finite = np.isfinite(largest[at])
    if not finite.any():
        return float(hs[-1])
    gap = float(np.mean(log_arls[top][finite] - union[at][finite]))
    room = float(np.mean(largest[at][finite] - union[at][finite]))
    k = min(gap / max(room, 1e-9), 1.0)
    if key.sign < 0:  # a drop's k falls beyond the curve's top; a rise's drift is met
        k = k * np.minimum(1.0, hs[-1] / np.maximum(grid, 1e-9)) ** _FALL  # by shape_shift
    with np.errstate(invalid="ignore"):  # inf - inf where no lag reaches h: never
        log_arl = union + gap if gap <= 0.0 else union + k * (largest - union)
    log_arl[np.isinf(union)] = np.inf
    reached = (grid >= hs[-1]) & (log_arl >= target)
    return float(grid[reached][0]) if reached.any() else float(grid[-1])


@lru_cache(maxsize=128)  # ~120 KB each
def exponent(key: Empirical, window_n: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(thresholds h, -log of the sum over lags of P(G_lag > h), -log of the largest) for a
    spread key watched for a drop, one-sample, on a grid of h (inf where no lag reaches h)."""
    n = max(2, round(window_n))
    m = n - 1.0  # the degrees of freedom a window gives the GLR
    pmf = _window_law(key, n)
    spectra: dict[int, np.ndarray] = {}
    span = (len(pmf) - 1) / _CELLS  # the largest variance ratio a window is kept to
    # Ratios away from 1 on the side watched, so that phi increases along them.
    ratios = (np.geomspace(RATIO_FLOOR, 1.0, 4_000)[::-1] if key.sign < 0
              else np.geomspace(1.0, span, 4_000))
    phi = ratios - 1.0 - np.log(ratios)
    grid = _GRID
    rate = _first_lag(key, window_n)  # sizes vary; longer lags average them
    largest = rate.copy()
    for lag in LAGS[1:]:
        cells = int(lag) * (len(pmf) - 1)  # the sum over the lag up to its largest
        size = _fft_size(len(pmf) * int(lag))  # the whole sum's support: no wrap-around
        if size not in spectra:
            spectra[size] = np.fft.rfft(pmf, size)
        law = np.maximum(np.fft.irfft(spectra[size] ** int(lag), size)[:cells + 1], 0.0)
        # P(sum <= cell) for a drop, P(sum >= cell) for a rise
        side = np.cumsum(law) if key.sign < 0 else np.cumsum(law[::-1])[::-1]
        per_df = grid / (key.shape * lag * m)
        reach = per_df <= phi[-1]  # within the floor (a drop) or the span (a rise)
        ratio = np.interp(per_df, phi, ratios)
        index = np.minimum((ratio * lag * _CELLS).astype(np.int64), cells)
        p = np.where(reach, side[index], 0.0)
        rate += p
        np.maximum(largest, p, out=largest)
    with np.errstate(divide="ignore"):
        return grid, -np.log(np.minimum(rate, 1.0)), -np.log(np.minimum(largest, 1.0))


def _window_law(key: Empirical, n: int) -> np.ndarray:
    """The law of one window's sum of squares around its mean (variance 1), on cells of
    1 / `_CELLS` of its degrees of freedom up to `_SPAN` times them (a drop), or up to the
    largest ratio a window of n can read (a rise)."""
    squares, weight = _sampled(key, np.full(_WINDOWS, n), np.random.default_rng(0))
    span = _SPAN if key.sign < 0 else min(math.ceil(_top_ratio(key, n)), _RISE_SPAN)
    cells = (squares / (n - 1.0) * _CELLS).astype(np.int64)
    kept = cells <= span * _CELLS
    pmf = np.bincount(cells[kept], weight[kept], span * _CELLS + 1)
    return np.asarray(pmf / max(weight.sum(), 1e-300))


def _top_ratio(key: Empirical, n: int) -> float:
    """The largest variance ratio a window of n traces can read: its values split
    between the shape's two extremes."""
    values, _ = key.standardised()
    spread = float(values.max() - values.min())
    return (n // 2) * (n - n // 2) / n * spread * spread / (n - 1.0)


def _first_lag(key: Empirical, window_n: float) -> np.ndarray:
    """P(G_1 > h) on `_GRID` for one window whose size is Poisson(`window_n`), as a
    stream's traffic gives it: smaller windows than the typical one fall on one or two
    values far more often (benchmarks/RESULTS.md, "Lumpy spread down"). Sizes are
    sampled half from that law, half evenly up to its far tail, and weighted back;
    windows of fewer than 2 traces read no spread."""
    sizes = np.arange(2, int(window_n + 12.0 * math.sqrt(window_n) + 20.0))
    poisson = np.exp(sizes * math.log(window_n) - window_n
                     - np.array([math.lgamma(k + 1.0) for k in sizes]))
    proposal = 0.5 * poisson / poisson.sum() + 0.5 / len(sizes)
    rng = np.random.default_rng(1)
    drawn = rng.choice(len(sizes), 2 * _WINDOWS, p=proposal)
    squares, weight = _sampled(key, sizes[drawn], rng)
    weight = weight * (poisson / proposal)[drawn]
    df = sizes[drawn] - 1.0
    g = GammaScale(1.0, key.shape, key.sign).glr(df, squares[:, None])  # one-sample
    order = np.argsort(g)
    above = np.cumsum(weight[order][::-1])[::-1] / len(g)  # P(G >= g[order][i])
    at = np.searchsorted(g[order], _GRID, side="right")
    return np.where(at < len(g), above[np.minimum(at, len(g) - 1)], 0.0)


def _sampled(key: Empirical, sizes: np.ndarray, rng: np.random.Generator
             ) -> tuple[np.ndarray, np.ndarray]:
    """Windows of `sizes` traces importance-sampled from the shape (variance 1): their sums
    of squares around their means and their weights. Drawn from a mixture of the shape
    itself (half) and the shape tilted towards each of `_CENTRES` of its values, weighted
    back by the likelihood ratio (the multinomial coefficient cancels)."""
    values, weights = key.standardised()
    centres = np.quantile(np.sort(values), np.linspace(0.0, 1.0, _CENTRES), method="nearest")
    pulled = ([weights * np.exp(-tilt * (values - c) ** 2) for c in centres for tilt in _TILTS]
              if key.sign < 0 else [weights * np.exp(t * values * values) for t in _SPREADS])
    laws = np.array([weights] + [p / p.sum() for p in pulled])
    mix = np.r_[0.5, np.full(len(pulled), 0.5 / len(pulled))]
    counts = _counts(rng, sizes, laws, rng.choice(len(mix), len(sizes), p=mix)).astype(float)
    log_laws = counts @ np.log(np.maximum(laws, 1e-300)).T
    peak = log_laws.max(axis=1)
    log_mix = peak + np.log(np.exp(log_laws - peak[:, None]) @ mix)
    weight = np.exp(counts @ np.log(np.maximum(weights, 1e-300)) - log_mix)
    squares = np.maximum(counts @ (values * values) - (counts @ values) ** 2 / sizes, 0.0)
    return squares, weight


def _counts(rng: np.random.Generator, sizes: np.ndarray, laws: np.ndarray,
            picked: np.ndarray) -> np.ndarray:
    """Counts per value of windows of `sizes` traces, each drawn from its `picked` law:
    every trace by inverse CDF on the laws' CDFs laid end to end (law i's on [i, i + 1)),
    twice as fast as a multinomial draw per window."""
    values = laws.shape[1]
    rows = np.repeat(np.arange(len(sizes)), sizes)
    ends = np.cumsum(laws, axis=1)
    ends[:, -1] = 1.0
    laid = (ends + np.arange(len(laws))[:, None]).ravel()
    drawn = np.searchsorted(laid, rng.random(len(rows)) + picked[rows], side="right")
    drawn = np.minimum(drawn - picked[rows] * values, values - 1)
    return np.bincount(rows * values + drawn, minlength=len(sizes) * values).reshape(
        len(sizes), values)


def _fft_size(length: int) -> int:
    return 1 << (length - 1).bit_length()
