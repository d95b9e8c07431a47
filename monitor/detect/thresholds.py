"""False-alarm budgets -> detector thresholds, by simulation from the reference.

A budget is a mean number of windows between false alarms of one stream (ARL0). The
threshold h that gives it is found by simulating the stream under its null model:
`draws` true parameters from the reference's uncertainty (one per equal-probability
stratum: the average is dominated by the few draws far off, which plain random draws
catch or miss by luck), `repeat` independent streams each, `steps` windows of the
stream's typical size. For every h the false-alarm rate of a draw is (alarms / windows
watched) over its streams - a stream stops at its first passage, and a reset after an
alarm restarts it fresh, so this is the renewal rate - and ARL0(h) = 1 / mean rate over
draws. That is the quantity a time budget speaks of: false alarms per unit of time,
averaged over what the reference could have been.

Budgets longer than the simulation are reached by extrapolation: log ARL0 is
asymptotically h - (d / 2) log h + c for a GLR fitting d parameters (Siegmund; h + c for
a CUSUM), with c read off the longest measured run lengths (`extrapolated`).

The null model of a location or spread stream is Gaussian or Gamma; real signals are
not. Their thresholds add the shift the reference's own distribution makes
(`shape_shift`), simulated from the reference's histogram (`empirical.Empirical`) to
~15,000 windows and carried beyond (a location shift as a share of the threshold, a
spread stream's with its shape's tail, `tails`).
A share's model is exact (a Bernoulli count, its truth drawn from the reference count's
confidence law, `detectors.share_truths`); a reference of exactly 0% is keyed on its own.

A family's time budget (one false alarm per `days` for all its streams) is shared
evenly: each of `streams` streams gets ARL0 = streams * days * 86400 / window_seconds
windows (`arl0_windows`).

    >>> threshold(GaussMean(0.0, 1.0, n_ref=100.0), window_n=20, arl0=500)  # doctest: +SKIP
    6.1
"""

from __future__ import annotations

import hashlib
import math
import os
import pickle
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Final, cast

import numpy as np

from monitor.detect import tails
from monitor.detect.detectors import (
    Bernoulli,
    GammaScale,
    GaussMean,
    Multinomial,
    NullModel,
    glr_scan,
)
from monitor.detect.empirical import Empirical
from monitor.detect.shares import Odds

__all__ = ["CALIBRATION_VERSION", "SHIPPED", "arl0_windows", "calibration_key", "extrapolated",
           "key_name", "run_lengths", "saved", "shift_parts", "threshold"]

_MIN_ALARMS = 40  # alarms needed before an ARL0 estimate is trusted
_STEPS = 1500     # windows simulated per stream; longer budgets are extrapolated
_GAUSSIAN_EVENTS = 10.0
_KNOWN_STEPS, _KNOWN_CHAINS = 1_000, 120  # a shape with its reference known exactly
# The calibration version: part of every cache key. Bump it whenever what a key
# simulates changes (a detector's statistic, a null model's sampling, `run_lengths`,
# `_simulate`, the seed): cached and shipped curves then no longer match, and the
# shipped set is made again (`python -m monitor.detect.ship ship`). Comments,
# docstrings and refactors that leave the output alone keep it (a test fails if a sample
# of shipped curves moved under the same version: tests/detect/test_thresholds_cache.py).
# 2: share truths from a count's one-sided confidence law; 3: shapes simulated
# two-sample; 4: shapes simulated on Poisson window sizes, as traffic gives them.
CALIBRATION_VERSION: Final = 4
# Calibrations shipped with the package (`ship`): the default layout's keys, so that a
# fresh install arms its streams without simulating first. Read after the cache folder.
SHIPPED: Final = Path(__file__).with_name("calibrations")


def arl0_windows(days: float, streams: int, window_seconds: float) -> float:
    """Per-stream budget in windows for one false alarm per `days` over `streams` streams."""
    return max(1, streams) * days * 86_400.0 / window_seconds


def threshold(family: NullModel, window_n: float, arl0: float) -> float:
    """The threshold giving `arl0` windows between false alarms (calibrated, cached).

    A location or spread stream that carries its reference's shape (`atoms`) gets the
    model's threshold plus the shift its shape makes (`shape_shift`)."""
    base = _model_threshold(family, window_n, arl0)
    if isinstance(family, GaussMean | GammaScale) and family.atoms is not None:
        base += shape_shift(family, window_n, arl0)
    return base


def shape_shift(family: GaussMean | GammaScale, window_n: float, arl0: float) -> float:
    """How far the reference's own distribution moves the threshold from its model's at
    `arl0` windows: the threshold simulated from the reference's histogram (`Empirical`:
    traces drawn from its bins, and each simulated stream's reference of the stream's
    size drawn from them too) minus the model's, both two-sample, at `arl0` or as far as
    the shape's simulation measured ARL0 directly (~15,000 windows), whichever is
    nearer; the model's curve carries the rest. Beyond that a location shift is carried
    as a share of the model's threshold: a skewed shape's grows with the threshold (the
    window sum's tail leaves the Gaussian's by ~skew x^3 / 6 sqrt(n), x^2 = 2h): a fixed
    shift ran cautious one way and eager the other (benchmarks/RESULTS.md, "Production
    budgets stream by stream"). A spread drop is held to at least its shape's own tail
    (`tails`: lumpy shapes page far more there than carried), a rise put halfway between
    the two (carried runs cautious, the tail eager). Skipped where the model holds:
    location when the window sum's skew and kurtosis are negligible, spread in windows
    of >= 2,000."""
    carried, tail = shift_parts(family, window_n, arl0)
    if tail is None:
        return carried
    return max(carried, tail) if family.sign < 0 else 0.5 * (carried + tail)


def shift_parts(family: GaussMean | GammaScale, window_n: float, arl0: float
                ) -> tuple[float, float | None]:
    """`shape_shift`'s two parts at `arl0`: the shift carried from the shape's simulated
    curve (a location shift beyond it as a share of the model's threshold), and beyond
    the curve a spread stream's own tail (`tails`; None within the curve, or for
    location)."""
    empirical = empirical_key(family, window_n)
    if empirical is None:
        return 0.0, None
    n = _shape_window(window_n)
    hs, log_arls = _curve(*calibration_key(empirical, n))
    at = min(max(arl0, 2.0), math.exp(float(log_arls[-1])))
    # A spread key's Gamma shape is snapped (`empirical_key`); the statistic is the shape
    # times a function of the window's variance ratio, so on the same simulated windows
    # the threshold scales with the shape exactly.
    scale = family.shape / empirical.shape if isinstance(family, GammaScale) else 1.0
    model = replace(family, atoms=None)
    shift = scale * _model_threshold(empirical, n, at) - _model_threshold(model, n, at)
    if arl0 > at and empirical.kind == "location":  # beyond: a share of the threshold
        shift *= _model_threshold(model, n, arl0) / _model_threshold(model, n, at)
    if arl0 > at and empirical.kind == "spread":  # beyond: the shape's own tail too
        tail = (scale * tails.threshold_beyond(empirical, n, hs, log_arls, math.log(arl0))
                - _model_threshold(model, n, arl0))
        return shift, tail
    return shift, None


def _shape_window(window_n: float) -> float:
    """A shape's window size snapped to the R10 series: a growing reference moves a
    stream's mean window a little, which must not cost a new simulation of the same shape
    each time."""
    return float(max(1, round(_fine(window_n))))


def empirical_key(family: GaussMean | GammaScale, window_n: float) -> Empirical | None:
    """The `Empirical` null of a stream's shape, canonical so that equal shapes share one
    simulation (a location drop is a rise of the mirrored shape; the reference's size
    relative to the window snapped as the model's is); None where not needed."""
    atoms = family.atoms
    if not atoms:
        return None
    n = max(1.0, float(round(window_n)))
    window = _shape_window(window_n)
    n_ref = _grid(family.n_ref / window) * window if math.isfinite(family.n_ref) else family.n_ref
    values = np.array([a[0] for a in atoms])
    weights = np.array([a[1] for a in atoms])
    if isinstance(family, GaussMean):
        skew = float((weights * values ** 3).sum())
        kurt = float((weights * values ** 4).sum()) - 3.0
        if skew * skew / n < 1.6e-3 and abs(kurt) / n < 7.5e-3:
            return None  # the window sum is Gaussian to the tail the budget reaches
        if family.sign < 0:
            atoms = tuple((round(-v, 4) + 0.0, w) for v, w in reversed(atoms))
        return Empirical("location", atoms, 1, n_ref=n_ref)
    if n >= 2_000:
        return None
    # The Gamma shape snapped to the R10 series: a stream keeps the atoms it was armed
    # with while its reference grows, but its shape follows the growth, so exact values
    # made the key depend on when calibration reached the stream (a demo run found 263
    # of its shapes shipped under another shape, 0.500 vs 0.508).
    return Empirical("spread", atoms, family.sign, round(_fine(family.shape), 3), n_ref)


def _model_threshold(family: NullModel, window_n: float, arl0: float) -> float:
    key = calibration_key(family, window_n)
    hs, log_arls = _curve(*key)
    target = math.log(max(arl0, 1.0))
    if target <= log_arls[-1]:
        i = int(np.searchsorted(log_arls, target))  # ARL0 rises with h
        if i == 0:
            return float(hs[0])
        frac = (target - log_arls[i - 1]) / max(log_arls[i] - log_arls[i - 1], 1e-12)
        return float(hs[i - 1] + frac * (hs[i] - hs[i - 1]))
    return extrapolated(hs, log_arls, target, _power(key[0]))


def _power(key: NullModel) -> float | None:
    """The log h term of a key's ARL0: half the parameters its GLR fits, 0 for a CUSUM;
    None (fit a slope) for a share of few events watched for a drop (a bounded statistic)."""
    if isinstance(key, Odds):
        return 0.0
    if isinstance(key, Bernoulli) and key.sign < 0:
        return None
    return (key.width - 1) / 2.0 if isinstance(key, Multinomial) else 0.5


def extrapolated(hs: np.ndarray, log_arls: np.ndarray, target: float,
                  power: float | None) -> float:
    """The threshold at `target` (log ARL0) beyond the measured curve: on the asymptotic
    log ARL0 = h - power log h + c, c averaged over the curve's last 2.3 nats (Siegmund),
    or where `power` is None on the line fitted to the curve's top 40%; never below it.

    The line's slope, read from a few dozen alarms, moves with the simulation's seed: on
    5-8 x 10^7 simulated windows, at 10^5-5.8 x 10^6 it gave 0.74-1.25x the budget (a
    0.5% share's rise), 0.75-1.29x (location), 0.36-2.02x (spread); this form 0.87-1.03x,
    0.85-1.10x, 0.70-1.21x (RESULTS.md, "Extrapolated thresholds")."""
    if power is None:
        top = hs >= hs[-1] - 0.4 * (hs[-1] - hs[0])
        slope = np.polyfit(hs[top], log_arls[top], 1)[0] if top.sum() >= 3 else 1.0
        h = float(hs[-1] + (target - log_arls[-1]) / float(np.clip(slope, 0.5, 1.5)))
    else:
        top = log_arls >= log_arls[-1] - 2.3
        c = float(np.mean(log_arls[top] - hs[top] + power * np.log(hs[top])))
        h = max(float(hs[-1]), power + 1.0)
        for _ in range(50):  # h = target - c + power log h: a contraction where h > power
            h = target - c + power * math.log(h)
    return max(float(hs[-1]), h)


def calibration_key(family: NullModel, window_n: float) -> tuple[NullModel, float]:
    """A coarse copy of `family` and window size that gives (nearly) the same threshold,
    so that many streams share one simulation. Gaussian GLRs are pivotal: only the
    reference size relative to the window matters; so is a share with >= 10 expected
    events (and non-events) per window, close enough."""
    n = max(1.0, window_n)
    if isinstance(family, Empirical):
        return family, float(max(1, round(n)))
    pivot = GaussMean(0.0, 1.0, 1, _grid(family.n_ref / n)), 1.0
    if isinstance(family, GaussMean):
        return pivot
    if isinstance(family, GammaScale):
        # A window's sum of squares is Gamma(n * shape): that product sets its skew, which
        # matters long after it looks Gaussian (a pivot at n * shape = 11 gave +50% ARL0).
        total_shape = n * family.shape
        if total_shape >= 10 * _GAUSSIAN_EVENTS:
            return pivot
        return (GammaScale(1.0, _grid(total_shape) / 20.0, family.sign,
                           _grid(family.n_ref / n) * 20.0), 20.0)
    if isinstance(family, Odds):
        # A CUSUM is not pivotal: its threshold depends on the evidence a window carries
        # and on the reference's error against the designed change, so it is keyed as the
        # minority share (a drop of an 80% share is a rise of its 20% complement; the
        # odds ratio is the same) with that share, the events per window and the events
        # of the reference each snapped to the R10 series.
        q = _fine(min(family.p, 1.0 - family.p))
        sign = 1 if (family.sign > 0) == (family.p <= 0.5) else -1
        window = float(max(1, round(_fine(n * q) / q)))
        n_ref = (max(1.0, round(_fine(family.n_ref * q))) / q if math.isfinite(family.n_ref)
                 else family.n_ref)
        return Odds(q, sign, n_ref, family.log_odds), window
    if isinstance(family, Bernoulli):
        share = min(family.p, 1.0 - family.p)
        events = n * share
        if events >= _GAUSSIAN_EVENTS:
            return pivot
        # Few events per window: keyed as the minority share q = min(p, 1 - p), watched
        # for a rise or a drop (a drop of an 80% share is a rise of its 20% complement),
        # with q and the expected count snapped to the R10 series. A key keeping only the
        # count, as a Poisson, was up to 0.5 nat off (measured ARL0 -36% for an 80% share
        # in windows of 20).
        sign = 1 if (family.sign > 0) == (family.p <= 0.5) else -1
        if share <= 0.0:  # a reference of exactly 0% (or 100%) watched for any event
            window = float(max(1, round(_fine(n))))
            return Bernoulli(0.0, 1, _grid(family.n_ref / n) * window), window
        q = min(_fine(share), 0.5)
        window = float(max(1, round(_fine(events) / q)))
        return Bernoulli(q, sign, _grid(family.n_ref / n) * window), window
    if isinstance(family, Multinomial):
        k = len(family.p)
        return Multinomial((1.0 / k,) * k, _grid(family.n_ref / n) * 50.0 * k), 50.0 * k
    return family, n


@lru_cache(maxsize=1024)
def _curve(family: NullModel, window_n: float) -> tuple[np.ndarray, np.ndarray]:
    """(thresholds, log ARL0) measured where enough alarms make the estimate trustworthy."""
    path = _cache_path(family, window_n)
    if path is None:
        return _simulate(family, window_n)
    cached = _load(path)
    if cached is not None:
        return cached
    curve = _load(SHIPPED / path.name)  # the shipped set, copied to the cache
    if curve is None:
        curve = _simulate(family, window_n)
    _save(path, curve, (family, window_n))  # whole, even where an unreadable file was
    return curve


def _load(path: Path) -> tuple[np.ndarray, np.ndarray] | None:
    try:
        with np.load(path) as saved:
            return saved["hs"], saved["log_arls"]
    except (OSError, ValueError, KeyError):
        return None  # absent or unreadable


def _simulate(family: NullModel, window_n: float) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(family, Empirical) and not math.isfinite(family.n_ref):
        # known exactly: no draws of the reference to average (calibration version 2)
        hs, arls, alarms = run_lengths(family, window_n, _KNOWN_STEPS, draws=1,
                                       repeat=_KNOWN_CHAINS)
    else:
        hs, arls, alarms = run_lengths(family, window_n, _STEPS)
    ok = alarms >= _MIN_ALARMS
    if not ok.any():
        return hs[:1], np.log(arls[:1])
    return hs[ok], np.log(np.maximum.accumulate(arls[ok]))


def _cache_path(family: NullModel, window_n: float) -> Path | None:
    """Where a calibration is kept between processes (the simulation is deterministic,
    seed 0, and takes seconds to a minute per key), named by the key and the version:
    RAGMON_CALIBRATION_CACHE (default ~/.cache/ragmon/thresholds; "off": none)."""
    folder = os.environ.get("RAGMON_CALIBRATION_CACHE", "")
    if folder == "off":
        return None
    base = Path(folder) if folder else Path.home() / ".cache" / "ragmon" / "thresholds"
    return base / key_name(family, window_n)


def key_name(family: NullModel, window_n: float) -> str:
    """The file name of a calibration key under this calibration version."""
    key = repr((CALIBRATION_VERSION, family, window_n, _STEPS, _MIN_ALARMS))
    return f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.npz"


def _save(path: Path, curve: tuple[np.ndarray, np.ndarray],
          key: tuple[NullModel, float]) -> None:
    """Write a curve whole, with its version and (pickled) key, so that `ship` can check
    it and a test can simulate it again."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp.npz")
        np.savez(partial, hs=curve[0], log_arls=curve[1], version=CALIBRATION_VERSION,
                 key=np.frombuffer(pickle.dumps(key, protocol=4), dtype=np.uint8))
        os.replace(partial, path)  # whole or not at all, whoever writes it at the same time
    except OSError:
        pass  # a read-only home: calibrate again next time


def saved(path: Path) -> tuple[int | None, tuple[NullModel, float] | None]:
    """(version, key) a saved curve says it was made under (None where it does not)."""
    try:
        with np.load(path) as saved:
            version = int(saved["version"])
            return version, cast(tuple[NullModel, float], pickle.loads(saved["key"].tobytes()))
    except (OSError, ValueError, KeyError, EOFError, pickle.UnpicklingError, AttributeError):
        return None, None


def run_lengths(family: NullModel, window_n: float, steps: int, draws: int = 20,
                repeat: int = 25, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Simulated ARL0 (windows) on a grid of thresholds: (thresholds, arl0, alarms seen)."""
    rng = np.random.default_rng(seed)
    n = np.full(steps, float(window_n))
    if isinstance(family, Empirical):  # a shape's windows vary in size as traffic does
        n = rng.poisson(window_n, steps).astype(np.float64)
    seen = family.window_n(n) if isinstance(family, Empirical) else n
    peaks = np.maximum.accumulate(
        glr_scan(family, seen, family.sample(rng, n, draws, repeat)), axis=1)
    hs = np.quantile(peaks[:, -1], np.linspace(0.02, 0.98, 60))
    hs = np.unique(np.concatenate([np.linspace(0.25, hs[0], 10), hs]))
    # First passage of h: windows whose running peak is still <= h, alarm if < steps.
    passage = np.stack([(peaks <= h).sum(axis=1) for h in hs], axis=1)  # (chains, H)
    alarmed = passage < steps
    watched = np.minimum(passage + 1, steps).reshape(draws, repeat, -1).sum(axis=1)
    rate = alarmed.reshape(draws, repeat, -1).sum(axis=1) / watched
    mean_rate = np.maximum(rate.mean(axis=0), 1e-12)
    return hs, 1.0 / mean_rate, alarmed.sum(axis=0)


def _fine(x: float) -> float:
    """Snap a positive number to the R10 series (10 steps a decade, at most 12% off)."""
    if not math.isfinite(x) or x <= 0:
        return x
    return float(10.0 ** (round(10.0 * math.log10(x)) / 10.0))


def _grid(x: float) -> float:
    """Snap a positive number to the 1-2-5 series (the nearest in log scale)."""
    if not math.isfinite(x) or x <= 0:
        return x
    decade = 10.0 ** math.floor(math.log10(x))
    return min((decade * m for m in (1, 2, 5, 10)), key=lambda v: abs(math.log(v / x)))
