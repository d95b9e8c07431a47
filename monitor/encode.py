"""Turns a batch of traces into the column contributions the aggregation folds.

Per trace the Python work is a handful of list appends; binning of every histogram is
one vectorised `searchsorted` per batch. The result is sparse: (trace, column) pairs
for counts and (trace, column, value) triples for sums, plus named extras (missing
requirement ids, rubric versions) that do not fit a fixed layout.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from monitor.contract import Feedback, Label, Trace
from monitor.layout import Histogram, Layout

__all__ = ["Contributions", "encode", "feedback_columns", "is_gate_leak", "label_columns"]

_ANSWERED = frozenset({"answer", "partial"})


class Contributions(NamedTuple):
    count_trace: np.ndarray  # int64, one entry per +1
    count_col: np.ndarray
    sum_trace: np.ndarray
    sum_col: np.ndarray
    sum_value: np.ndarray    # float64
    extras: list[tuple[int, str, str]]  # (trace, kind, name): +1 each


def is_gate_leak(trace: Trace) -> bool:
    """Answered with a rendered critical claim that is not supported (CONTRACT.md)."""
    return trace.decision in _ANSWERED and any(
        c.importance == "critical" and c.rendered and c.verdict != "supported"
        for c in trace.claims
    )


def encode(traces: Sequence[Trace], layout: Layout,
           admit_missing: Callable[[str], str]) -> Contributions:
    """Contributions of a batch; `admit_missing` caps the vocabulary of missing ids."""
    col = layout.counts
    ct: list[int] = []
    cc: list[int] = []
    st: list[int] = []
    sc: list[int] = []
    sv: list[float] = []
    extras: list[tuple[int, str, str]] = []
    hist_values: dict[str, tuple[list[int], list[float]]] = {
        name: ([], []) for name in layout.histograms
    }
    decision_cols = {d: col[f"decision_{d}"] for d in ("answer", "partial", "abstain")}
    traces_col = col["traces"]
    for i, t in enumerate(traces):
        cols = [traces_col, decision_cols[t.decision]]
        if t.reason is not None:
            cols.append(layout.reason_column(t.reason))
        signals = t.signals
        if t.claims:
            cols.extend(_claim_columns(t, col))
            if "supported_claim_ratio" not in signals:
                supported = sum(c.verdict == "supported" for c in t.claims)
                signals = {**signals, "supported_claim_ratio": supported / len(t.claims)}
        for name, value in signals.items():
            target = hist_values.get(name)
            if target is not None:
                target[0].append(i)
                target[1].append(value)
        if t.requirements is not None and t.requirements.expected:
            _requirements(i, t, col, cols, st, sc, sv, extras, layout, admit_missing)
        if t.checks is not None:
            cols.extend(_check_columns(t, col))
        if t.usage is not None:
            _usage(i, t, col, cols, st, sc, sv, hist_values, layout)
        for name, value in t.evals.items():
            eval_col = col.get(f"eval_{name}")
            if eval_col is not None:
                cols.append(eval_col)
                st.append(i)
                sc.append(layout.sums[f"eval_{name}"])
                sv.append(value)
        ct.extend([i] * len(cols))
        cc.extend(cols)
    for name, (idx, values) in hist_values.items():
        if idx:
            _histogram(layout.histograms[name], idx, values, ct, cc, st, sc, sv)
    return Contributions(np.asarray(ct, np.int64), np.asarray(cc, np.int64),
                         np.asarray(st, np.int64), np.asarray(sc, np.int64),
                         np.asarray(sv, np.float64), extras)


def label_columns(layout: Layout, decision: str, label: Label) -> list[int]:
    """Count columns one label adds to its trace's cells (see `layout.LABEL_COUNTS`)."""
    answered = decision in _ANSWERED
    names = ["labelled"]
    if answered and label.unsupported_critical is not None:
        names.append("answered_uc_known")
        if label.unsupported_critical:
            names.append("answered_uc_true")
    if not answered and label.answerable is not None:
        names.append("abstained_answerable_known")
        if label.answerable:
            names.append("abstained_answerable_true")
    if answered and label.correct is not None:
        names.append("answered_correct_known")
        if label.correct:
            names.append("answered_correct_true")
    if label.answerable is False:
        names.append("unanswerable")
        if answered:
            names.append("unanswerable_answered")
    if label.answerable is True:
        names.append("answerable")
        if answered and label.correct:
            names.append("answerable_answered_correct")
    return [layout.counts[f"label_{name}"] for name in names]


def feedback_columns(layout: Layout, feedback: Feedback) -> list[int]:
    return [layout.counts["feedback_up" if feedback.score > 0 else "feedback_down"]]


def _claim_columns(t: Trace, col: dict[str, int]) -> list[int]:
    cols = [col["claims_traces"]]
    cols.extend(col[f"claims_{c.importance}_{c.verdict}"] for c in t.claims)
    if is_gate_leak(t):
        cols.append(col["gate_leaks"])
    return cols


def _check_columns(t: Trace, col: dict[str, int]) -> list[int]:
    checks = t.checks
    assert checks is not None
    cols = []
    if checks.citation:
        cols.append(col["citation_true"])
        if checks.verbatim is False:
            cols.append(col["citation_verbatim_false"])
    if checks.self_check is not None:
        cols.append(col[f"self_check_{checks.self_check}"])
    return cols


def _requirements(i: int, t: Trace, col: dict[str, int], cols: list[int], st: list[int],
                  sc: list[int], sv: list[float], extras: list[tuple[int, str, str]],
                  layout: Layout, admit_missing: Callable[[str], str]) -> None:
    req = t.requirements
    assert req is not None
    expected = set(req.expected)
    covered = set(req.covered)
    missing = expected - covered
    cols.append(col["requirements_traces"])
    if not missing:
        cols.append(col["requirements_all"])
    if any(c not in covered for c in req.critical):
        cols.append(col["requirements_critical_missed"])
    st.append(i)
    sc.append(layout.sums["coverage_sum"])
    sv.append(len(expected & covered) / len(expected))
    for name in sorted(missing):
        extras.append((i, "missing", admit_missing(name)))
    extras.append((i, "rubric", req.rubric or "unversioned"))


def _usage(i: int, t: Trace, col: dict[str, int], cols: list[int], st: list[int],
           sc: list[int], sv: list[float],
           hist_values: dict[str, tuple[list[int], list[float]]], layout: Layout) -> None:
    usage = t.usage
    assert usage is not None
    cols.append(col["usage_traces"])
    if usage.latency_ms is not None:
        hist_values["latency_ms"][0].append(i)
        hist_values["latency_ms"][1].append(usage.latency_ms)
    if usage.cost is not None:
        hist_values["cost"][0].append(i)
        hist_values["cost"][1].append(usage.cost)
    for name in ("input_tokens", "output_tokens", "model_calls"):
        value = getattr(usage, name)
        if value is not None:
            st.append(i)
            sc.append(layout.sums[f"{name}_sum"])
            sv.append(float(value))


def _histogram(hist: Histogram, idx: list[int], values: list[float], ct: list[int],
               cc: list[int], st: list[int], sc: list[int], sv: list[float]) -> None:
    arr = np.asarray(values, np.float64)
    ct.extend(idx)
    cc.extend(hist.columns(arr).tolist())
    ct.extend(idx)
    cc.extend([hist.count_col] * len(idx))
    st.extend(idx)
    sc.extend([hist.sum_col] * len(idx))
    sv.extend(values)
    st.extend(idx)
    sc.extend([hist.sum_col + 1] * len(idx))
    with np.errstate(over="ignore"):  # absurd but valid values overflow to inf, by design
        sv.extend((arr * arr).tolist())
