"""Derived quantities of CONTRACT.md, computed on read from one cell's counts and sums.

Every rate is a ratio of two counters and is `None` when its denominator is zero (no
data is not the same as a rate of zero). Quantiles come from the fixed-range
histograms by linear interpolation inside the bin that crosses the rank, so their
resolution is one bin width; means are exact (sum / count).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from monitor.aggregate.layout import Histogram, Layout
from monitor.aggregate.table import Cell
from monitor.ingest.contract import DECISIONS
from monitor.ingest.meaning import LABEL_RATES

__all__ = ["quantile", "ratio", "summarize"]

def ratio(numerator: float, denominator: float) -> float | None:
    return None if denominator <= 0 else float(numerator) / float(denominator)


def quantile(hist: Histogram, counts: np.ndarray, q: float) -> float | None:
    """The q-quantile of the values binned in `counts[hist.offset : + hist.width]`."""
    bins = counts[hist.offset : hist.offset + hist.width]
    total = int(bins.sum())
    if total == 0:
        return None
    rank = q * total
    cumulative = np.cumsum(bins)
    i = int(np.searchsorted(cumulative, rank, side="left"))
    edges = hist.edges
    if i == 0:
        return float(edges[0])  # underflow: all we know is "below the range"
    if i >= len(edges):
        return float(edges[-1])
    lo, hi = float(edges[i - 1]), float(edges[i])
    before = float(cumulative[i - 1])
    inside = float(bins[i])
    return lo + (hi - lo) * ((rank - before) / inside if inside else 0.5)


def summarize(cell: Cell, layout: Layout) -> dict[str, Any]:
    """The replay summary's per-cell object `M` (docs: Reference, "The summary JSON")."""
    c = {name: int(cell.counts[i]) for name, i in layout.counts.items()}
    s = {name: float(cell.sums[i]) for name, i in layout.sums.items()}
    traces = c["traces"]
    decisions = {d: c[f"decision_{d}"] for d in DECISIONS}
    return {
        "traces": traces,
        "decisions": decisions,
        "answer_coverage": ratio(decisions["answer"] + decisions["partial"], traces),
        "full_answer_rate": ratio(decisions["answer"], traces),
        "abstention_rate": ratio(decisions["abstain"], traces),
        "reasons": {code: c[f"reason_{code}"] for code in layout.reasons},
        "critical_claim_unsupported_rate": ratio(
            c.get("reason_critical_claim_unsupported", 0), traces),
        "gate_leaks": c["gate_leaks"],
        "claims": {kind: c[f"claims_{kind}"] for kind in _claim_kinds(layout)},
        "requirements": _requirements(c, s, cell.extras),
        "checks": {
            "verbatim_failure_rate": ratio(c["citation_verbatim_false"], c["citation_true"]),
            "self_check_reject_rate": ratio(
                c["self_check_reject"], c["self_check_pass"] + c["self_check_reject"]),
        },
        "signals": {
            name: _distribution(hist, cell)
            for name, hist in layout.histograms.items()
            if name not in ("latency_ms", "cost")
        },
        "usage": _usage(layout, cell, c, s),
        "evals": {
            name: {"count": c[f"eval_{name}"],
                   "mean": ratio(s[f"eval_{name}"], c[f"eval_{name}"])}
            for name in layout.evals
        },
        "labels": _labels(c),
        "feedback": {"up": c["feedback_up"], "down": c["feedback_down"]},
    }


def _claim_kinds(layout: Layout) -> list[str]:
    return [name[len("claims_"):] for name in layout.counts
            if name.startswith("claims_") and name != "claims_traces"]


def _requirements(c: dict[str, int], s: dict[str, float],
                  extras: dict[tuple[str, str], int]) -> dict[str, Any]:
    n = c["requirements_traces"]
    missing = {name: v for (kind, name), v in extras.items() if kind == "missing" and v}
    rubrics = {name: v for (kind, name), v in extras.items() if kind == "rubric" and v}
    return {
        "traces": n,
        "coverage_mean": ratio(s["coverage_sum"], n),
        "all_required_share": ratio(c["requirements_all"], n),
        "critical_missed": c["requirements_critical_missed"],
        "missing": dict(sorted(missing.items(), key=lambda kv: (-kv[1], kv[0]))),
        "rubrics": rubrics,
        # Coverage of different rubric versions is not comparable: say so, never hide it.
        "comparable": len(rubrics) <= 1,
    }


def _distribution(hist: Histogram, cell: Cell) -> dict[str, Any]:
    n = int(cell.counts[hist.count_col])
    return {
        "count": n,
        "mean": ratio(float(cell.sums[hist.sum_col]), n),
        "p50": quantile(hist, cell.counts, 0.5),
        "p95": quantile(hist, cell.counts, 0.95),
    }


def _usage(layout: Layout, cell: Cell, c: dict[str, int], s: dict[str, float]) -> dict[str, Any]:
    latency = layout.histograms["latency_ms"]
    return {
        "traces": c["usage_traces"],
        "latency_ms_p50": quantile(latency, cell.counts, 0.5),
        "latency_ms_p95": quantile(latency, cell.counts, 0.95),
        "latency_ms_mean": ratio(s["latency_ms_sum"], c["latency_ms_count"]),
        "cost_total": s["cost_sum"],
        "cost_mean": ratio(s["cost_sum"], c["cost_count"]),
        "input_tokens_total": int(s["input_tokens_sum"]),
        "output_tokens_total": int(s["output_tokens_sum"]),
    }


def _labels(c: dict[str, int]) -> dict[str, Any]:
    rates = {name: ratio(c[f"label_{num}"], c[f"label_{den}"])
             for name, (num, den) in LABEL_RATES.items()}
    return {"labelled": c["label_labelled"], **rates}
