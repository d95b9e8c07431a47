"""Per-trace values as the worker's fold holds them: a layout and the cell of a window.

Benchmarks that judge the product's detectors feed them what the worker would: values
binned into the layout's histogram with their count and sums (`cell_of`), read by the
product's own stream specs (`monitor.detect.streams`)."""

from __future__ import annotations

import numpy as np

from monitor.aggregate.layout import Layout, from_settings
from monitor.aggregate.table import Cell
from monitor.detect.shares import LOG_ODDS
from monitor.detect.streams import Spec, stream_specs
from monitor.settings import Settings, SignalRange


def layout() -> Layout:
    """The default layout with a `top_score` signal on [0, 1] and a `latency_like` on [0, 20]."""
    signals = {"top_score": SignalRange(), "latency_like": SignalRange(lo=0.0, hi=20.0)}
    return from_settings(Settings(signals=signals))


def spec(lay: Layout, signal: str, direction: str, log_odds: float = LOG_ODDS) -> Spec:
    """The product's stream spec (`log_odds`: the change a young share is tuned to)."""
    return next(s for s in stream_specs(lay, log_odds)
                if (s.signal, s.direction) == (signal, direction))


def cell_of(lay: Layout, signal: str, values: np.ndarray) -> Cell:
    """A cell holding `values` of a signal as the worker's fold would (histogram, count,
    sums); for a share (`answer_coverage`, `critical_claim_unsupported_rate`) values are
    0/1 events."""
    counts = np.zeros(lay.n_counts, np.int64)
    sums = np.zeros(lay.n_sums)
    c = lay.counts
    counts[c["traces"]] = len(values)
    if signal == "answer_coverage":
        events = int(values.sum())
        counts[c["decision_answer"]] = events
        counts[c["decision_abstain"]] = len(values) - events
        return Cell(counts, sums, {})
    if signal == "critical_claim_unsupported_rate":
        counts[lay.reason_column("critical_claim_unsupported")] = int(values.sum())
        return Cell(counts, sums, {})
    hist = lay.histograms[signal]
    np.add.at(counts, hist.columns(values), 1)
    counts[hist.count_col] = len(values)
    sums[hist.sum_col] = float(values.sum())
    sums[hist.sum_col + 1] = float((values * values).sum())
    return Cell(counts, sums, {})
