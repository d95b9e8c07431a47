"""The streams of a cell and how each reads it: which (signal, direction) pairs exist,
how a stream's null model comes from a reference cell, and what a window contributes.

Every continuous signal gets a location stream (window sums of its traces' normal scores
in the reference, `normal_scores`; Gaussian GLR) and a spread stream (within-window sums
of squared scores; Gamma-scale GLR) in both directions, each carrying the shape of its
reference's scores (`shape_of`) for calibration; shares are odds-ratio CUSUMs
(`shares.rate`; none in a direction a degenerate reference cannot move); the abstention
reasons one multinomial
stream. The quantity shown beside a statistic is the signal's own mean or standard
deviation. `distances` explains a drift (KS, PSI, Wasserstein between histograms)
without deciding it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Final

import numpy as np

from monitor.aggregate.layout import Histogram, Layout
from monitor.aggregate.table import Cell
from monitor.detect import detectors as det
from monitor.detect import shares

__all__ = ["EXCLUDED_SIGNALS", "SHAPE_WINDOW_MAX", "Spec", "distances", "held_out_scores",
           "normal_scores", "shape_of", "stream_specs", "with_shape"]

EXCLUDED_SIGNALS: Final = ("latency_ms", "cost")


# (reference cell, the null model the stream was armed with or None) -> (null model, n_ref)
Builder = Callable[[Cell, det.NullModel | None], tuple[det.NullModel, float] | None]


@dataclass(frozen=True)
class Spec:
    """How one stream reads its reference and its windows."""

    signal: str
    direction: str
    family: str  # the alert family sharing one false-alarm budget
    build: Builder  # (reference cell, the stream's armed model) -> (null model, n_ref)
    window: Callable[[Cell, det.NullModel], tuple[float, list[float]]]  # -> (n, t)
    value: Callable[[Cell], float | None]  # the quantity shown beside the statistic


# Streams whose windows hold fewer traces than this are calibrated on their reference's
# own shape (`thresholds.shape_shift`, ~1.5 s of simulation per shape); in larger
# windows sums are close enough to the Gaussian / Gamma model, and the cost of a shape
# per stream (hundreds of slices, again after every restart) is not paid.
SHAPE_WINDOW_MAX: Final = 200.0


def with_shape(model: det.NullModel, window_n: float, armed: det.NullModel | None) -> det.NullModel:
    """`model` with the reference shape its calibration uses: none in windows of
    SHAPE_WINDOW_MAX traces or more; the shape a stream was armed with (`armed`) when its
    reference grows (the histogram moves a little with every block, and a new shape
    would be simulated again for every stream at every growth)."""
    if getattr(model, "atoms", None) is None:
        return model
    if window_n >= SHAPE_WINDOW_MAX:
        return replace(model, atoms=None)  # type: ignore[type-var]
    kept = getattr(armed, "atoms", None)
    return model if kept is None else replace(model, atoms=kept)  # type: ignore[type-var]


def stream_specs(layout: Layout, log_odds: float = shares.LOG_ODDS) -> list[Spec]:
    """Every stream a cell gets, from the layout (signals and reasons are configured);
    a share with a young reference is tuned to a change of odds ratio exp(`log_odds`)."""
    c = layout.counts
    specs: list[Spec] = []
    for name, hist in layout.histograms.items():
        if name in EXCLUDED_SIGNALS:
            continue
        for direction, sign in (("up", 1), ("down", -1)):
            specs.append(Spec(name, direction, name, _location(hist, sign),
                              _location_window(hist), _mean(hist)))
            specs.append(Spec(f"{name}_spread", direction, name, _spread(hist, sign),
                              _spread_window(hist), _sd(hist)))
    traces = c["traces"]
    ccu = layout.reason_column("critical_claim_unsupported")
    answered = (c["decision_answer"], c["decision_partial"])
    specs.append(_rate_spec("critical_claim_unsupported_rate", "up", 1, (ccu,), (traces,),
                            log_odds))
    for direction, sign in (("down", -1), ("up", 1)):
        specs.append(_rate_spec("answer_coverage", direction, sign, answered, (traces,),
                                log_odds))
    specs.append(_rate_spec("self_check_reject_rate", "up", 1, (c["self_check_reject"],),
                            (c["self_check_pass"], c["self_check_reject"]), log_odds))
    specs.append(_rate_spec("verbatim_failure_rate", "up", 1, (c["citation_verbatim_false"],),
                            (c["citation_true"],), log_odds))
    reason_cols = [layout.reason_column(code) for code in layout.reasons]
    specs.append(Spec("reason_mix", "change", "reason_mix", _mix(reason_cols), _mix_window,
                      lambda _cell: None))
    return specs


def distances(hist: Histogram, reference: Cell, window: Cell) -> dict[str, float]:
    """Explanations, not alarms: how far the window's histogram of a signal is from the
    reference's - Kolmogorov-Smirnov (largest CDF gap), PSI (with half-count smoothing)
    and Wasserstein-1 (area between the CDFs, in the signal's units)."""
    p = reference.counts[hist.offset: hist.offset + hist.width].astype(np.float64)
    q = window.counts[hist.offset: hist.offset + hist.width].astype(np.float64)
    if p.sum() <= 0 or q.sum() <= 0:
        return {}
    cp, cq = np.cumsum(p) / p.sum(), np.cumsum(q) / q.sum()
    ps, qs = (p + 0.5) / (p.sum() + 0.5 * len(p)), (q + 0.5) / (q.sum() + 0.5 * len(q))
    widths = np.diff(hist.edges)
    return {
        "ks": float(np.max(np.abs(cp - cq))),
        "psi": float(np.sum((qs - ps) * np.log(qs / ps))),
        "wasserstein": float(np.sum(np.abs(cp - cq)[:-2] * widths)),
    }


# --- how each kind of stream reads a cell ---------------------------------------------------

def normal_scores(hist: Histogram, cell: Cell) -> det.Scores:
    """What a trace in each bin of `hist` is read as: its normal score in the reference
    `cell`, Phi^-1 of the bin's mid-rank (half a trace of smoothing at either end, so a
    bin the reference never saw reads as just beyond its extremes, ~3.5 for 2,000 traces).

    Location and spread streams watch sums of these, not of raw values: whatever the
    signal's shape (bounded, skewed, multimodal, heavy-tailed, rounded), the scores of
    traces drawn from the reference's law are close to standard normal, so the window
    sums are Gaussian and a threshold calibrated on the Gaussian model keeps its budget
    out to long run lengths (a lognormal signal's raw sums false-alarmed 3-20x the budget;
    benchmarks/RESULTS.md, "Null panel"); for a shift of a Gaussian signal the normal
    scores test is as efficient as the mean itself (Chernoff-Savage), more for others."""
    return det.normal_scores(_bins(hist, cell))


def held_out_scores(bins: np.ndarray) -> np.ndarray:
    """Each bin's score as `detectors.normal_scores` reads a trace the reference did not
    hold: the bin's mid-rank with one of its traces left out (leave-one-out).

    A stream's reference moments are taken on these, not on the scores the map gives the
    reference's own traces: a map fitted to a sample reads that sample as evenly spaced
    normal quantiles, narrower than new traces read (a new trace falls beyond the
    reference's extremes 1 time in n + 1 at either end, and a bin the reference
    under-filled reads farther out). The truth's score variance exceeded the reference's
    by 6-9 / n on every continuous shape of the null panel (0.14 of its standard error at
    2,000 traces), and spread up false-alarmed up to 1.8x the budget; on held-out scores
    the bias is within +-1.5 / n on four of the five shapes (-6 / n, conservative, on
    scores rounded to 2 decimals; benchmarks/RESULTS.md, "Null panel", session 21)."""
    return np.asarray(det.normal_scores(np.asarray(bins, np.float64), held_out=True))


def _bins(hist: Histogram, cell: Cell) -> np.ndarray:
    return cell.counts[hist.offset: hist.offset + hist.width].astype(np.float64)


def _scored(hist: Histogram, cell: Cell, armed: det.NullModel | None
            ) -> tuple[det.Scores, float, float, float, float, det.Atoms | None] | None:
    """(scores, n, mean, variance, 4th central moment, shape) of the cell's traces read as
    scores: the armed stream's (a grown reference keeps what its windows were read as),
    else the cell's own normal scores, its moments and shape taken as new traces read
    (`held_out_scores`: the map is fitted to these very traces). None under
    two traces."""
    bins = _bins(hist, cell)
    n = float(bins.sum())
    if n < 2:
        return None
    scores = getattr(armed, "scores", ())
    if scores:
        s = np.asarray(scores)
    else:
        scores, s = normal_scores(hist, cell), held_out_scores(bins)
    w = bins / n
    mean = float((w * s).sum())
    var = float((w * (s - mean) ** 2).sum())
    m4 = float((w * (s - mean) ** 4).sum())
    return scores, n, mean, var, m4, shape_of(s, w)


def shape_of(values: np.ndarray, weights: np.ndarray) -> det.Atoms | None:
    """The distribution of a stream's per-trace values (the scores of the reference's bins
    with their shares) standardised, rounded to 1e-4: the shape its thresholds are
    simulated from (`thresholds.shape_shift`). None for a single value."""
    mean = float((weights * values).sum())
    sd = float(np.sqrt(max((weights * (values - mean) ** 2).sum(), 0.0)))
    if sd <= 1e-9 * max(1.0, abs(mean)):
        return None  # one bin: nothing to simulate a shape from
    return tuple((round(float((v - mean) / sd), 4), round(float(p), 6))
                 for v, p in zip(values, weights, strict=True) if p > 0)


def _location(hist: Histogram, sign: int) -> Builder:
    def build(cell: Cell, armed: det.NullModel | None = None) -> tuple[det.NullModel, float] | None:
        scored = _scored(hist, cell, armed)
        if scored is None:
            return None
        scores, n, mean, var, _m4, atoms = scored
        return det.location(n, mean, var, sign, atoms, scores), n
    return build


def _spread(hist: Histogram, sign: int) -> Builder:
    def build(cell: Cell, armed: det.NullModel | None = None) -> tuple[det.NullModel, float] | None:
        scored = _scored(hist, cell, armed)
        if scored is None:
            return None
        scores, n, _mean, var, m4, atoms = scored
        # The fourth moment sets how much (s - mean)^2 varies without any change of spread.
        return det.spread(n, var, max(m4, var * var * 1.01), sign, atoms, scores), n
    return build


def _score_sums(hist: Histogram, cell: Cell, model: det.NullModel) -> tuple[float, float, float]:
    """(traces, sum of scores, sum of squared scores) of a window's cell."""
    bins = _bins(hist, cell)
    s = np.asarray(getattr(model, "scores", ()))
    return float(bins.sum()), float(bins @ s), float(bins @ (s * s))


def _location_window(hist: Histogram) -> Callable[[Cell, det.NullModel], tuple[float, list[float]]]:
    def window(cell: Cell, model: det.NullModel) -> tuple[float, list[float]]:
        n, total, _ = _score_sums(hist, cell, model)
        return n, [total]
    return window


def _spread_window(hist: Histogram) -> Callable[[Cell, det.NullModel], tuple[float, list[float]]]:
    def window(cell: Cell, model: det.NullModel) -> tuple[float, list[float]]:
        dof, squares = det.spread_sum(*_score_sums(hist, cell, model))
        return dof, [squares]
    return window


def _moments(hist: Histogram, cell: Cell) -> tuple[float, float, float]:
    n = float(cell.counts[hist.count_col])
    total, squares = cell.sums[hist.sum_col], cell.sums[hist.sum_col + 1]
    return n, total, squares


def _mean(hist: Histogram) -> Callable[[Cell], float | None]:
    def value(cell: Cell) -> float | None:
        n, total, _ = _moments(hist, cell)
        return total / n if n else None
    return value


def _sd(hist: Histogram) -> Callable[[Cell], float | None]:
    def value(cell: Cell) -> float | None:
        n, total, squares = _moments(hist, cell)
        return float(np.sqrt(max(squares / n - (total / n) ** 2, 0.0))) if n else None
    return value


def _rate_spec(signal: str, direction: str, sign: int, events: tuple[int, ...],
               totals: tuple[int, ...], log_odds: float) -> Spec:
    def counts(cell: Cell) -> tuple[float, float]:
        return (float(sum(cell.counts[i] for i in totals)),
                float(sum(cell.counts[i] for i in events)))

    def build(cell: Cell,
              _armed: det.NullModel | None = None) -> tuple[det.NullModel, float] | None:
        n, k = counts(cell)
        model = shares.rate(n, k, sign, log_odds)
        return None if model is None else (model, n)

    def window(cell: Cell, _model: det.NullModel) -> tuple[float, list[float]]:
        n, k = counts(cell)
        return n, [k]

    def value(cell: Cell) -> float | None:
        n, k = counts(cell)
        return k / n if n else None

    return Spec(signal, direction, signal, build, window, value)


_MIX_MIN_SHARE: Final = 0.02


def _mix(cols: list[int]) -> Builder:
    def build(cell: Cell,
              _armed: det.NullModel | None = None) -> tuple[det.NullModel, float] | None:
        k = cell.counts[cols].astype(np.float64)
        n = float(k.sum())
        if n <= 0:
            return None
        # Reasons under 2% of the reference share one category: a handful of rare codes
        # would otherwise dominate the statistic (and its null distribution).
        common = [i for i in range(len(cols)) if k[i] >= _MIX_MIN_SHARE * n]
        rare = [i for i in range(len(cols)) if k[i] < _MIX_MIN_SHARE * n]
        groups = [(cols[i],) for i in common] + ([tuple(cols[i] for i in rare)] if rare else [])
        counts = np.array([cell.counts[list(g)].sum() for g in groups], np.float64)
        if len(groups) < 2:
            return None
        p = (counts + 0.5) / (n + 0.5 * len(counts))  # smoothed: rare is not impossible
        return det.Multinomial(tuple(float(x) for x in p), n, groups=tuple(groups)), n
    return build


def _mix_window(cell: Cell, model: det.NullModel) -> tuple[float, list[float]]:
    assert isinstance(model, det.Multinomial)
    counts = [float(cell.counts[list(g)].sum()) for g in model.groups]
    return sum(counts), counts
