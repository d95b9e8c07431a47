"""The column layout of one cell's statistics: which counter or sum lives where.

A cell (release x slice x window) is two fixed-length vectors: integer counts (event
counters and histogram bins) and float sums. Fixing the layout once, from the settings,
is what makes every cell the same size and every merge a vector addition.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

import numpy as np

from monitor.ingest.contract import DECISIONS, IMPORTANCES, SELF_CHECKS, VERDICTS
from monitor.ingest.meaning import LABEL_OUTCOMES
from monitor.settings import Settings

__all__ = ["CLAIM_KINDS", "Histogram", "Layout", "from_settings"]

CLAIM_KINDS: Final = tuple(
    f"{importance}_{verdict}"
    for importance in IMPORTANCES
    for verdict in VERDICTS
)
SCALAR_COUNTS: Final = (
    "traces",
    *(f"decision_{d}" for d in DECISIONS),
    "claims_traces",
    *(f"claims_{k}" for k in CLAIM_KINDS),
    "gate_leaks",
    "requirements_traces", "requirements_all", "requirements_critical_missed",
    "citation_true", "citation_verbatim_false",
    *(f"self_check_{v}" for v in SELF_CHECKS),
    "usage_traces",
    "feedback_up", "feedback_down",
    *(f"label_{name}" for name in LABEL_OUTCOMES),
)
SCALAR_SUMS: Final = ("coverage_sum", "input_tokens_sum", "output_tokens_sum", "model_calls_sum")
EVALS: Final = ("faithfulness", "answer_relevancy", "context_precision", "context_recall")


@dataclass(frozen=True)
class Histogram:
    """Fixed bins over [edges[0], edges[-1]) plus an underflow and an overflow bin.

    Counts sit at `offset .. offset + len(edges) + 1` in the count vector: bin 0 is
    underflow, bin i (1..len(edges)-1) is [edges[i-1], edges[i]), the last is overflow.
    """

    name: str
    edges: np.ndarray
    offset: int
    count_col: int  # traces with a value
    sum_col: int    # float column of the sum; sum of squares at sum_col + 1

    @property
    def width(self) -> int:
        return len(self.edges) + 1

    def columns(self, values: np.ndarray) -> np.ndarray:
        """Count columns of many values at once (vectorised binning)."""
        return self.offset + np.searchsorted(self.edges, values, side="right")


@dataclass(frozen=True)
class Layout:
    """Names -> column indices for counts (int64) and sums (float64)."""

    counts: dict[str, int]
    sums: dict[str, int]
    reasons: tuple[str, ...]          # configured codes, then "other"
    histograms: dict[str, Histogram]  # signals by name, plus latency_ms and cost
    evals: tuple[str, ...]
    n_counts: int = field(default=0)
    n_sums: int = field(default=0)
    cells_per_trace: int = 1  # the release total plus one cell per slice dimension

    def reason_column(self, code: str) -> int:
        col = self.counts.get(f"reason_{code}")
        return self.counts["reason_other"] if col is None else col


def from_settings(settings: Settings) -> Layout:
    """Build the layout: scalar counters, reasons, histograms, eval sums."""
    counts: dict[str, int] = {name: i for i, name in enumerate(SCALAR_COUNTS)}
    reasons = (*settings.reasons, "other")
    for code in reasons:
        counts[f"reason_{code}"] = len(counts)
    for name in EVALS:
        counts[f"eval_{name}"] = len(counts)
    sums: dict[str, int] = {name: i for i, name in enumerate(SCALAR_SUMS)}
    for name in EVALS:
        sums[f"eval_{name}"] = len(sums)
    histograms: dict[str, Histogram] = {}
    ranges = {name: np.linspace(r.lo, r.hi, r.bins + 1) for name, r in settings.signals.items()}
    # Latency and cost span decades: geometric bins keep relative error flat (~12%, ~18%).
    ranges["latency_ms"] = np.geomspace(1.0, 600_000.0, 121)
    ranges["cost"] = np.geomspace(1e-6, 10.0, 101)
    for name, edges in ranges.items():
        count_col = counts.setdefault(f"{name}_count", len(counts))
        sum_col = len(sums)
        sums[f"{name}_sum"] = sum_col
        sums[f"{name}_sumsq"] = sum_col + 1
        histograms[name] = Histogram(name, edges, 0, count_col, sum_col)
    offset = len(counts)
    for name, hist in list(histograms.items()):
        histograms[name] = Histogram(name, hist.edges, offset, hist.count_col, hist.sum_col)
        offset += hist.width
    return Layout(counts, sums, reasons, histograms, EVALS, offset, len(sums),
                  1 + len(settings.slice_dimensions))
