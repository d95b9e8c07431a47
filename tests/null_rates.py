"""Score streams under the null, as the detector tests measure them: a reference cell of
per-trace values, and the false-alarm rate of a stream whose windows hold given scores."""

from __future__ import annotations

import numpy as np

from monitor.aggregate.layout import Histogram, Layout
from monitor.aggregate.table import Cell
from monitor.detect import detectors as det


def cell_of(layout: Layout, hist: Histogram, values: np.ndarray) -> Cell:
    """A cell holding `values` of one signal as the worker's fold would."""
    counts = np.zeros(layout.n_counts, np.int64)
    sums = np.zeros(layout.n_sums)
    np.add.at(counts, hist.columns(values), 1)
    counts[hist.count_col] = len(values)
    sums[hist.sum_col], sums[hist.sum_col + 1] = values.sum(), (values * values).sum()
    return Cell(counts, sums, {})


def renewal_rate(family: det.NullModel, x: np.ndarray, h: float, spread: bool) -> float:
    """False alarms per window watched of streams whose windows hold the per-trace scores
    `x` (chains, steps, traces), alarming above `h`, each watched to its first alarm;
    `spread`: the windows' sums of squares around their mean, else their sums."""
    chains, steps, size = x.shape
    total, squares = x.sum(axis=2), (x * x).sum(axis=2)
    if spread:
        n, t = np.full((chains, steps), size - 1.0), squares - total * total / size
    else:
        n, t = np.full((chains, steps), float(size)), total
    peaks = np.maximum.accumulate(det.glr_scan(family, n, t[..., None]), axis=1)
    passage = (peaks <= h).sum(axis=1)
    return float((passage < steps).sum() / np.minimum(passage + 1, steps).sum())
