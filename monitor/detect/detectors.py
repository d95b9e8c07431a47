"""Sequential change detectors on window sufficient statistics: the window-limited GLR.

Every detector sees one stream: per closed window, a count `n` and a small statistic
vector `t` (a sum, a number of events, counts per category). Against the reference
parameter theta0 it computes, for each candidate change point k among the last
`LAGS` windows, the generalised log-likelihood ratio of "the windows since k follow the
best-fitting alternative" versus "they follow theta0":

    G_k = sup_theta log L(theta; windows k..now) - log L(theta0; windows k..now)
        = N_k * KL(theta_hat_k || theta0)        (exponential families)
    statistic = max_k G_k;  alarm when statistic > threshold

The reference is itself a sample (`n_ref` traces): with it, each G is the two-sample
GLR (windows since k vs reference, pooled under the null), so a small reference makes
the detector humbler instead of making every long stretch look like a change. The
windows the detector holds from before k are more of the null and join the reference
side (`base`): right after a freeze the reference is then its traces plus what followed
(benchmarks/RESULTS.md: a few per cent faster on slow changes; the longest lag, all held
against the reference alone, still catches a drift that crept in).

Why GLR and not a CUSUM with one designed shift: a CUSUM is optimal for the shift it
was built for and slow for the others; the GLR estimates the shift size from the data
since the candidate change point, so small and large shifts are both caught within a
small factor of the oracle CUSUM that knows the true change (Lorden 1971; Lai 1998 for
the window limit). The window limit keeps memory and time per update constant. The
exception is a share whose reference holds few events: there the small changes a GLR
fits are the reference's own error, and one designed change does better (`shares.Odds`).

Families (one-sided unless noted, `sign` +1 detects a rise, -1 a drop):

- `GaussMean(mean, var)`: t = sum of a per-trace quantity y with reference mean and
  variance; G = max(0, sign * (T - N mean))^2 / (2 var N). On y = x it detects a
  location shift of x; on y = (x - mu0)^2 a change of spread.
- `Bernoulli(p)`: t = number of events; G = N kl(K/N, p) on the side of `sign`.
- `Multinomial(p)`: t = counts per category, two-sided; G = sum_j K_j log(K_j / (N p_j)).

    >>> d = Detector(Bernoulli(0.02, sign=1), threshold=6.0)
    >>> d.update(20, [3]).statistic > 0
    True
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final, Literal, Protocol

import numpy as np
from scipy import special

__all__ = ["LAGS", "RATIO_FLOOR", "Atoms", "Base", "Bernoulli", "Detector", "GammaScale",
           "GaussMean", "Multinomial", "NullModel", "Scores", "Update", "glr_scan", "location",
           "normal_scores", "share_truths", "spread", "spread_sum", "strata"]

# Candidate change points, in windows back from the newest: a geometric grid loses little
# against every lag (the GLR surface is flat near its maximum) at a tenth of the cost.
LAGS: Final = np.array(
    [1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64, 80, 96, 128, 160, 192, 256],
    np.int64,
)
_TINY: Final = 1e-300
# The smallest spread ratio a window is read as: a window whose values are all equal (a
# signal with point masses, a small window) would otherwise give -log 0, a statistic
# no threshold can hold; a tenth of the reference's standard deviation is change enough.
RATIO_FLOOR: Final = 1e-2

# A reference's own distribution, standardised: ((value, weight), ...) with weighted mean
# 0 and variance 1 (`streams` makes it from a histogram; `empirical` simulates from it).
Atoms = tuple[tuple[float, float], ...]
# The windows a detector holds before a candidate change point: (cumulative n, t).
Base = tuple[np.ndarray, np.ndarray] | None
# A value per histogram bin (under- and overflow included) that a trace in it is read as.
Scores = tuple[float, ...]


class NullModel(Protocol):
    """The null model of one stream: a GLR on cumulative statistics, and null samples."""

    @property
    def width(self) -> int:
        """Length of the per-window statistic vector t."""
        ...

    @property
    def n_ref(self) -> float:
        """Traces the reference parameters were estimated on (inf: known exactly)."""
        ...

    def __hash__(self) -> int: ...

    def glr(self, n: np.ndarray, t: np.ndarray, base: Base = None) -> np.ndarray:
        """G for cumulative counts `n` (shape S) and statistics `t` (shape S + (width,)) of
        the windows since each candidate change point; `base`, (n, t) of the same shapes,
        the windows held before it, which join the reference as more of the null."""
        ...

    def sample(self, rng: np.random.Generator, n: np.ndarray, draws: int,
               repeat: int = 1) -> np.ndarray:
        """Null window statistics of streams of windows of sizes `n` (L,): shape
        (draws * repeat, L, width). Each draw is a true parameter taken from the
        reference's uncertainty (so thresholds account for a reference of finite size),
        shared by `repeat` consecutive streams."""
        ...


@dataclass(frozen=True)
class GaussMean:
    """Mean of a per-trace quantity with reference `mean`, `var` (estimated on `n_ref`)."""

    mean: float
    var: float
    sign: int = 1
    n_ref: float = float("inf")
    width: int = 1
    atoms: Atoms | None = None  # the reference's shape, for calibration only
    scores: Scores = ()  # for callers: what each histogram bin's traces are read as

    def glr(self, n: np.ndarray, t: np.ndarray, base: Base = None) -> np.ndarray:
        n0: float | np.ndarray = self.n_ref
        mean: float | np.ndarray = self.mean
        if base is not None and math.isfinite(self.n_ref):  # the windows held before join
            n0 = n0 + base[0]
            mean = (self.n_ref * self.mean + base[1][..., 0]) / n0
        excess = np.maximum(self.sign * (t[..., 0] - n * mean), 0.0)
        nn = np.maximum(n, _TINY)
        return np.asarray(excess * excess / (2.0 * self.var * nn * (1.0 + nn / n0)))

    def sample(self, rng: np.random.Generator, n: np.ndarray, draws: int,
               repeat: int = 1) -> np.ndarray:
        sd = np.sqrt(self.var)
        offset = np.repeat(special.ndtri(strata(rng, draws)) * sd / np.sqrt(self.n_ref),
                           repeat, 0)
        chains = draws * repeat
        sums = n * (self.mean + offset) + rng.normal(0.0, 1.0, (chains, len(n))) * sd * np.sqrt(n)
        return np.asarray(sums[..., None])


@dataclass(frozen=True)
class GammaScale:
    """Scale of a positive per-trace quantity y ~ Gamma(shape, mean / shape): on
    y = (x - mean)^2 a change of the spread of x. The shape comes from the reference's
    kurtosis (shape = var^2 / (m4 - var^2); 1/2 for Gaussian x), which keeps the skew of
    sums of squares - a Gaussian approximation there false-alarms upward.
    G = shape N (r - 1 - log r), r = T / (N mean), on the side of `sign`."""

    mean: float
    shape: float
    sign: int = 1
    n_ref: float = float("inf")
    width: int = 1
    atoms: Atoms | None = None  # the reference's shape, for calibration only
    scores: Scores = ()  # for callers: what each histogram bin's traces are read as

    def glr(self, n: np.ndarray, t: np.ndarray, base: Base = None) -> np.ndarray:
        nn = np.maximum(n, _TINY)
        r = np.maximum(t[..., 0] / (nn * self.mean), RATIO_FLOOR)
        if not math.isfinite(self.n_ref):
            g = self.shape * nn * (r - 1.0 - np.log(r))
            return np.where(self.sign * (r - 1.0) > 0, g, 0.0)
        n0: float | np.ndarray = self.n_ref  # two samples: the windows and the reference
        r0: float | np.ndarray = 1.0
        if base is not None:  # the windows held before join the reference
            n0 = n0 + base[0]
            r0 = (self.n_ref + base[1][..., 0] / self.mean) / n0
        pooled = (r * nn + r0 * n0) / (nn + n0)
        g = self.shape * (nn * np.log(pooled / r) + n0 * np.log(pooled / r0))
        return np.where(self.sign * (r - r0) > 0, g, 0.0)

    def sample(self, rng: np.random.Generator, n: np.ndarray, draws: int,
               repeat: int = 1) -> np.ndarray:
        # The reference mean of y is itself a Gamma(shape n_ref) average.
        scale = np.full((draws, 1), self.mean / self.shape)
        if np.isfinite(self.n_ref):
            a = self.shape * self.n_ref
            scale = scale * special.gammaincinv(a, strata(rng, draws)) / a
        scale = np.repeat(scale, repeat, 0)
        return np.asarray((rng.gamma(self.shape * n, 1.0, (len(scale), len(n))) * scale)[..., None])


@dataclass(frozen=True)
class Bernoulli:
    """Share of traces with an event; `p` is the reference share (with a reference of
    known size, `n_ref`, the statistic is two-sample, and `p` may be 0 or 1)."""

    p: float
    sign: int = 1
    n_ref: float = float("inf")
    width: int = 1

    def glr(self, n: np.ndarray, t: np.ndarray, base: Base = None) -> np.ndarray:
        k = t[..., 0]
        nn = np.maximum(n, _TINY)
        phat = k / nn
        if not math.isfinite(self.n_ref):
            g = _xlogy(k, phat / self.p) + _xlogy(n - k, (1.0 - phat) / (1.0 - self.p))
            return np.where(self.sign * (phat - self.p) > 0, g, 0.0)
        k0: float | np.ndarray = self.p * self.n_ref  # two samples: windows and reference
        n0: float | np.ndarray = self.n_ref
        if base is not None:  # the windows held before join the reference
            k0, n0 = k0 + base[1][..., 0], n0 + base[0]
        p0 = k0 / n0
        pooled = (k + k0) / (nn + n0)
        with np.errstate(divide="ignore", invalid="ignore"):  # 0/0 where pooled is 0 or 1
            g = (_xlogy(k, phat / pooled) + _xlogy(n - k, (1.0 - phat) / (1.0 - pooled))
                 + _xlogy(k0, p0 / pooled) + _xlogy(n0 - k0, (1.0 - p0) / (1.0 - pooled)))
        return np.where(self.sign * (phat - p0) > 0, g, 0.0)

    def sample(self, rng: np.random.Generator, n: np.ndarray, draws: int,
               repeat: int = 1) -> np.ndarray:
        p = np.full((draws, 1), self.p)
        if np.isfinite(self.n_ref):
            p = share_truths(rng, self.p * self.n_ref, self.n_ref, self.sign > 0, draws)
        p = np.repeat(p, repeat, 0)
        return rng.binomial(n.astype(np.int64), p)[..., None].astype(np.float64)


@dataclass(frozen=True)
class Multinomial:
    """Shares of categories (e.g. abstention reasons); any change of the mix, two-sided."""

    p: tuple[float, ...]
    n_ref: float = float("inf")
    sign: int = 0
    groups: tuple[tuple[int, ...], ...] = ()  # source columns of each category (for callers)

    @property
    def width(self) -> int:
        return len(self.p)

    def glr(self, n: np.ndarray, t: np.ndarray, base: Base = None) -> np.ndarray:
        p = np.asarray(self.p)
        nn = np.maximum(n, _TINY)[..., None]
        if not math.isfinite(self.n_ref):
            return np.asarray(_xlogy(t, t / (nn * p)).sum(axis=-1))
        k0 = p * self.n_ref  # two samples: the windows and the reference (+ base)
        n0 = np.asarray(self.n_ref, np.float64)
        if base is not None:
            k0, n0 = k0 + base[1], n0 + base[0]
        n0 = np.asarray(n0)[..., None]
        pooled = (t + k0) / (nn + n0)
        return np.asarray((_xlogy(t, t / (nn * pooled)) + _xlogy(k0, k0 / (n0 * pooled)))
                          .sum(axis=-1))

    def sample(self, rng: np.random.Generator, n: np.ndarray, draws: int,
               repeat: int = 1) -> np.ndarray:
        p = np.asarray(self.p)
        if np.isfinite(self.n_ref):
            ps = rng.dirichlet(p * self.n_ref + 0.5, draws)
        else:
            ps = np.broadcast_to(p, (draws, len(p)))
        ps = np.repeat(ps, repeat, 0)
        return rng.multinomial(n.astype(np.int64)[None, :], ps[:, None, :]).astype(np.float64)


def strata(rng: np.random.Generator, draws: int) -> np.ndarray:
    """(draws, 1) uniforms, one in each of `draws` equal strata of (0, 1): the true
    parameters a calibration averages over then cover the reference's uncertainty evenly.
    The false-alarm rate averaged over them is dominated by the few draws far off the
    reference; plain random draws (20) missed them often enough to move a threshold by up
    to 1 nat from seed to seed."""
    u = (np.arange(draws) + rng.random(draws)) / draws
    return np.clip(u, 1e-12, 1.0 - 1e-12)[:, None]  # no infinite quantile at 0


def share_truths(rng: np.random.Generator, events: float, n_ref: float, rises: bool,
                 draws: int) -> np.ndarray:
    """(draws, 1) true shares behind `events` in `n_ref` traces, a stratum each of their
    confidence law on the side a false alarm comes from: Beta(k + 1, n - k) for a rise
    (a count's exact upper bounds), Beta(k, n - k + 1) for a drop (Jeffreys' prior let
    rare shares page up to 1.5x their budget; benchmarks/RESULTS.md, "Rare shares")."""
    a, b = (events + 1.0, n_ref - events) if rises else (events, n_ref - events + 1.0)
    if a <= 0.0 or b <= 0.0:  # a bound: the share cannot move that way
        return np.full((draws, 1), 0.0 if a <= 0.0 else 1.0)
    return np.asarray(special.betaincinv(a, b, strata(rng, draws)))


def location(n_ref: float, mean: float, var: float, sign: int,
             atoms: Atoms | None = None, scores: Scores = ()) -> GaussMean:
    """Location shift of a signal (window statistic: the sum of its values)."""
    return GaussMean(mean, max(var, 1e-12), sign, n_ref, atoms=atoms, scores=scores)


def spread(n_ref: float, var: float, m4: float, sign: int,
           atoms: Atoms | None = None, scores: Scores = ()) -> GammaScale:
    """Change of spread: y = (x - mean)^2 has mean `var` and variance m4 - var^2 (from the
    reference, so a non-Gaussian shape is not mistaken for a change). Windows enter
    as `spread_sum`."""
    var = max(var, 1e-12)
    shape = var * var / max(m4 - var * var, 1e-3 * var * var)
    return GammaScale(var, shape, sign, n_ref, atoms=atoms, scores=scores)


def normal_scores(bins: np.ndarray, held_out: bool = False) -> Scores:
    """Phi^-1 of each bin's mid-rank among counts `bins` (half a count of smoothing at
    either end: a bin with no count reads as just beyond the extremes), to 1e-4;
    `held_out`: with one of the bin's own traces left out (`streams.held_out_scores`)."""
    left = np.minimum(bins, 1.0) if held_out else 0.0  # an empty bin holds nothing to leave out
    below = np.cumsum(bins) - bins
    mid = (below + (bins - left) / 2.0 + 0.5) / (float(np.sum(bins)) + 1.0 - left)
    return tuple(round(float(x), 4) for x in special.ndtri(mid))


def spread_sum(n: float, total: float, sum_squares: float) -> tuple[float, float]:
    """A window's spread statistic for `spread`: (n - 1, sum of squares around the
    window's own mean), so that a shift of location is not read as a change of spread."""
    if n < 2:
        return 0.0, 0.0
    return n - 1.0, max(sum_squares - total * total / n, 0.0)


def _xlogy(x: np.ndarray | float, y: np.ndarray | float) -> np.ndarray:
    """x * log(y) with 0 * log(anything) = 0."""
    x = np.asarray(x, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(x > 0, x * np.log(np.maximum(y, _TINY)), 0.0)


def glr_scan(model: NullModel, n: np.ndarray, t: np.ndarray, lags: np.ndarray = LAGS
             ) -> np.ndarray:
    """The statistic after every window of many streams at once (for calibration, benchmarks).

    `n`: (L,) or (C, L) window sizes; `t`: (C, L, width). Returns (C, L): at step i the
    max over lags l of G(windows i-l+1 .. i), with lags cut at the stream's start.
    """
    chains, steps = t.shape[:2]
    n = np.broadcast_to(n, (chains, steps)).astype(np.float64)
    pn = np.concatenate([np.zeros((chains, 1)), np.cumsum(n, axis=1)], axis=1)
    pt = np.concatenate([np.zeros((chains, 1, t.shape[2])), np.cumsum(t, axis=1)], axis=1)
    end = np.arange(1, steps + 1)
    held = np.maximum(end - int(LAGS[-1]), 0)  # the oldest window a `Detector` still holds
    best = np.zeros((chains, steps))
    for lag in lags:
        start = np.maximum(end - lag, 0)
        base = (pn[:, start] - pn[:, held], pt[:, start] - pt[:, held])
        g = model.glr(pn[:, end] - pn[:, start], pt[:, end] - pt[:, start], base)
        np.maximum(best, g, out=best)
        if lag >= steps:
            break
    return best


@dataclass(frozen=True)
class Update:
    """One detector's verdict after a window: the statistic, its threshold, and whether it
    alarmed. `since` is how many windows back the best change point lies (the estimate of
    when the change happened); `status` is "ok", "alarm", "insufficient_data" or (set by
    `Drift`) "small_reference"."""

    statistic: float
    threshold: float
    alarm: bool
    since: int
    status: Literal["ok", "alarm", "insufficient_data", "small_reference"]


class Detector:
    """One stream's window-limited GLR: `update(n, t)` per closed window -> `Update`.

    After an alarm the history is cleared, so one change gives one alarm and the
    statistic starts afresh (a change that persists alarms again only after it has
    been re-established from new windows).
    """

    __slots__ = ("_n", "_t", "filled", "head", "model", "threshold")

    def __init__(self, model: NullModel, threshold: float) -> None:
        size = int(LAGS[-1])
        self.model = model
        self.threshold = threshold
        self._n = np.zeros(size)
        self._t = np.zeros((size, model.width))
        self.head = 0    # next slot to write
        self.filled = 0  # windows held

    def update(self, n: float, t: np.ndarray | list[float]) -> Update:
        size = len(self._n)
        self._n[self.head] = n
        self._t[self.head] = t
        self.head = (self.head + 1) % size
        self.filled = min(self.filled + 1, size)
        order = (self.head - 1 - np.arange(self.filled)) % size  # newest first
        cn = np.cumsum(self._n[order])
        ct = np.cumsum(self._t[order], axis=0)
        # The grid's lags that fit, and everything held (as `glr_scan` cuts at the start).
        lags = np.append(LAGS[self.filled > LAGS], self.filled) - 1
        base = (cn[-1] - cn[lags], ct[-1] - ct[lags])
        g = self.model.glr(cn[lags], ct[lags], base)
        best = int(np.argmax(g))
        statistic = float(g[best])
        alarm = statistic > self.threshold
        if alarm:
            self.reset()
        return Update(statistic, self.threshold, alarm, int(lags[best]) + 1,
                      "alarm" if alarm else "ok")

    def reset(self) -> None:
        self.head = self.filled = 0
        self._n[:] = 0.0
        self._t[:] = 0.0
