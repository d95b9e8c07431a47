"""The streams of a cell and how each reads it: which (signal, direction) pairs exist,
how a stream's null model comes from a reference cell, and what a window contributes.

Every continuous signal gets a location stream (window sums; Gaussian GLR) and a spread
stream (within-window sums of squares; Gamma-scale GLR) in both directions, each carrying
its reference's shape (`shape_of`) for calibration; shares are Bernoulli streams (none in
a direction a degenerate reference cannot move); the abstention reasons one multinomial
stream. `distances` explains a
drift (KS, PSI, Wasserstein between histograms) without deciding it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Final

import numpy as np

from monitor.aggregate.layout import Histogram, Layout
from monitor.aggregate.table import Cell
from monitor.detect import detectors as det

__all__ = ["EXCLUDED_SIGNALS", "SHAPE_WINDOW_MAX", "Spec", "distances", "shape_of", "stream_specs",
           "with_shape"]

EXCLUDED_SIGNALS: Final = ("latency_ms", "cost")


@dataclass(frozen=True)
class Spec:
    """How one stream reads its reference and its windows."""

    signal: str
    direction: str
    family: str  # the alert family sharing one false-alarm budget
    build: Callable[[Cell], tuple[det.Family, float] | None]  # -> (null model, n_ref)
    window: Callable[[Cell, det.Family], tuple[float, list[float]]]  # -> (n, t)
    value: Callable[[Cell], float | None]  # the quantity shown beside the statistic


# Streams whose windows hold fewer traces than this are calibrated on their reference's
# own shape (`thresholds.shape_shift`, ~0.25 s of simulation per stream); in larger
# windows sums are close enough to the Gaussian / Gamma model, and the cost of a shape
# per stream (hundreds of slices, again after every restart) is not paid.
SHAPE_WINDOW_MAX: Final = 200.0


def with_shape(family: det.Family, window_n: float, armed: det.Family | None) -> det.Family:
    """`family` with the reference shape its calibration uses: none in windows of
    SHAPE_WINDOW_MAX traces or more; the shape a stream was armed with (`armed`) when its
    reference grows (the histogram moves a little with every block, and a new shape
    would be simulated again for every stream at every growth)."""
    if getattr(family, "atoms", None) is None:
        return family
    if window_n >= SHAPE_WINDOW_MAX:
        return replace(family, atoms=None)  # type: ignore[type-var]
    kept = getattr(armed, "atoms", None)
    return family if kept is None else replace(family, atoms=kept)  # type: ignore[type-var]


def stream_specs(layout: Layout) -> list[Spec]:
    """Every stream a cell gets, from the layout (signals and reasons are configured)."""
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
    specs.append(_rate_spec("critical_claim_unsupported_rate", "up", 1, (ccu,), (traces,)))
    for direction, sign in (("down", -1), ("up", 1)):
        specs.append(_rate_spec("answer_coverage", direction, sign, answered, (traces,)))
    specs.append(_rate_spec("self_check_reject_rate", "up", 1, (c["self_check_reject"],),
                            (c["self_check_pass"], c["self_check_reject"])))
    specs.append(_rate_spec("verbatim_failure_rate", "up", 1, (c["citation_verbatim_false"],),
                            (c["citation_true"],)))
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

def _moments(hist: Histogram, cell: Cell) -> tuple[float, float, float]:
    n = float(cell.counts[hist.count_col])
    total, squares = cell.sums[hist.sum_col], cell.sums[hist.sum_col + 1]
    return n, total, squares


def shape_of(hist: Histogram, cell: Cell) -> det.Atoms | None:
    """The reference's histogram as a standardised distribution: its bins as atoms (bin
    mids; the under- and overflow bins at the range's edges, where a point mass such as
    a ratio of exactly 1.0 falls), in units of the histogram's own standard deviation,
    rounded to 1e-4. The shape its thresholds are simulated from (`thresholds`); a
    coarser summary (12 quantile groups) was measured 0.6-43x off budget, the bins
    0.8-1.2x (benchmarks/RESULTS.md, "Null panel")."""
    edges = hist.edges
    mids = np.concatenate([[edges[0]], (edges[1:] + edges[:-1]) / 2, [edges[-1]]])
    bins = cell.counts[hist.offset: hist.offset + hist.width].astype(np.float64)
    if bins.sum() <= 0:
        return None
    w = bins / bins.sum()
    mean = float((w * mids).sum())
    sd = float(np.sqrt(max((w * (mids - mean) ** 2).sum(), 0.0)))
    if sd <= 1e-9 * max(1.0, abs(mean)):
        return None  # one bin: nothing to simulate a shape from
    return tuple((round(float((m - mean) / sd), 4), round(float(p), 6))
                 for m, p in zip(mids, w, strict=True) if p > 0)


def _location(hist: Histogram, sign: int) -> Callable[[Cell], tuple[det.Family, float] | None]:
    def build(cell: Cell) -> tuple[det.Family, float] | None:
        n, total, squares = _moments(hist, cell)
        if n < 2:
            return None
        mean = total / n
        return det.location(n, mean, squares / n - mean * mean, sign, shape_of(hist, cell)), n
    return build


def _spread(hist: Histogram, sign: int) -> Callable[[Cell], tuple[det.Family, float] | None]:
    def build(cell: Cell) -> tuple[det.Family, float] | None:
        n, total, squares = _moments(hist, cell)
        if n < 2:
            return None
        mean = total / n
        var = squares / n - mean * mean
        # The fourth moment from the histogram (bin mids; under/overflow at the edges):
        # it sets how much (x - mean)^2 varies without any change of spread.
        edges = hist.edges
        mids = np.concatenate([[edges[0]], (edges[1:] + edges[:-1]) / 2, [edges[-1]]])
        bins = cell.counts[hist.offset: hist.offset + hist.width].astype(np.float64)
        m4 = float((bins * (mids - mean) ** 4).sum() / max(bins.sum(), 1.0))
        return det.spread(n, var, max(m4, var * var * 1.01), sign, shape_of(hist, cell)), n
    return build


def _location_window(hist: Histogram) -> Callable[[Cell, det.Family], tuple[float, list[float]]]:
    def window(cell: Cell, _family: det.Family) -> tuple[float, list[float]]:
        n, total, _ = _moments(hist, cell)
        return n, [total]
    return window


def _spread_window(hist: Histogram) -> Callable[[Cell, det.Family], tuple[float, list[float]]]:
    def window(cell: Cell, _family: det.Family) -> tuple[float, list[float]]:
        dof, squares = det.spread_sum(*_moments(hist, cell))
        return dof, [squares]
    return window


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
               totals: tuple[int, ...]) -> Spec:
    def counts(cell: Cell) -> tuple[float, float]:
        return (float(sum(cell.counts[i] for i in totals)),
                float(sum(cell.counts[i] for i in events)))

    def build(cell: Cell) -> tuple[det.Family, float] | None:
        n, k = counts(cell)
        family = det.rate(n, k, sign)
        return None if family is None else (family, n)

    def window(cell: Cell, _family: det.Family) -> tuple[float, list[float]]:
        n, k = counts(cell)
        return n, [k]

    def value(cell: Cell) -> float | None:
        n, k = counts(cell)
        return k / n if n else None

    return Spec(signal, direction, signal, build, window, value)


_MIX_MIN_SHARE: Final = 0.02


def _mix(cols: list[int]) -> Callable[[Cell], tuple[det.Family, float] | None]:
    def build(cell: Cell) -> tuple[det.Family, float] | None:
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


def _mix_window(cell: Cell, family: det.Family) -> tuple[float, list[float]]:
    assert isinstance(family, det.Multinomial)
    counts = [float(cell.counts[list(g)].sum()) for g in family.groups]
    return sum(counts), counts
