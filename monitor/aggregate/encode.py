"""Turns a batch of traces into the column contributions the aggregation folds.

The batch is read column by column (one comprehension per field, one array per column)
and every histogram is binned by one vectorised `searchsorted`. The result is sparse:
(trace, column) pairs for counts and (trace, column, value) triples for sums, plus named
extras (missing requirement ids, rubric versions) that do not fit a fixed layout.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from monitor.aggregate.layout import Histogram, Layout
from monitor.ingest.contract import (
    DECISIONS,
    IMPORTANCES,
    SELF_CHECKS,
    VERDICTS,
    Feedback,
    Label,
    Trace,
)
from monitor.ingest.meaning import (
    gate_leak,
    label_outcomes,
    requirement_outcome,
    supported_claim_ratio,
    verbatim_failure,
)

__all__ = [
    "Contributions", "encode", "feedback_columns", "label_columns",
]

class Contributions(NamedTuple):
    count_trace: np.ndarray  # int64, one entry per +1
    count_col: np.ndarray
    sum_trace: np.ndarray
    sum_col: np.ndarray
    sum_value: np.ndarray    # float64
    extras: list[tuple[int, str, str]]  # (trace, kind, name): +1 each


class _Columns:
    """A batch's (trace, column) pairs for counts and (trace, column, value) for sums."""

    def __init__(self) -> None:
        self.ct: list[np.ndarray] = []
        self.cc: list[np.ndarray] = []
        self.st: list[np.ndarray] = []
        self.sc: list[np.ndarray] = []
        self.sv: list[np.ndarray] = []

    def count(self, traces: list[int] | np.ndarray, column: int | list[int]) -> None:
        """+1 in `column` (one for all, or one per trace) of each trace in `traces`."""
        idx = np.asarray(traces, np.int64)
        self.ct.append(idx)
        self.cc.append(np.full(len(idx), column, np.int64) if isinstance(column, int)
                       else np.asarray(column, np.int64))

    def add(self, traces: list[int], column: int, values: list[float]) -> None:
        """`values` into the sum `column` of each trace in `traces`."""
        idx = np.asarray(traces, np.int64)
        self.st.append(idx)
        self.sc.append(np.full(len(idx), column, np.int64))
        self.sv.append(np.asarray(values, np.float64))

    def histogram(self, hist: Histogram, traces: list[int], values: list[float]) -> None:
        """+1 in the value's bin and in the count, the value into the sum, its square into
        sumsq."""
        idx = np.asarray(traces, np.int64)
        arr = np.asarray(values, np.float64)
        with np.errstate(over="ignore"):  # absurd but valid values overflow to inf, by design
            squares = arr * arr
        self.ct += (idx, idx)
        self.cc += (hist.columns(arr), np.full(len(idx), hist.count_col, np.int64))
        self.st += (idx, idx)
        self.sc += (np.full(len(idx), hist.sum_col, np.int64),
                    np.full(len(idx), hist.sum_col + 1, np.int64))
        self.sv += (arr, squares)

    def finish(self, extras: list[tuple[int, str, str]]) -> Contributions:
        empty_i, empty_f = np.empty(0, np.int64), np.empty(0, np.float64)
        return Contributions(
            np.concatenate(self.ct) if self.ct else empty_i,
            np.concatenate(self.cc) if self.cc else empty_i,
            np.concatenate(self.st) if self.st else empty_i,
            np.concatenate(self.sc) if self.sc else empty_i,
            np.concatenate(self.sv) if self.sv else empty_f,
            extras)


def encode(traces: Sequence[Trace], layout: Layout,
           admit_missing: Callable[[str], str]) -> Contributions:
    """Contributions of a batch; `admit_missing` caps the vocabulary of missing ids.

    Column by column: each field is read for the whole batch by one comprehension and
    added as one array. This is the pure-Python fold (with `Table.add`); the compiled
    one (monitor/aggregate/_fold.pyx) does the same arithmetic per trace in C.
    """
    col = layout.counts
    out = _Columns()
    extras: list[tuple[int, str, str]] = []
    n = len(traces)
    everyone = np.arange(n, dtype=np.int64)
    out.count(everyone, col["traces"])
    decision = {d: col[f"decision_{d}"] for d in DECISIONS}
    out.count(everyone, [decision[t.decision] for t in traces])
    reason_col = {code: layout.reason_column(code) for code in layout.reasons}
    other = col["reason_other"]
    with_reason = [i for i, t in enumerate(traces) if t.reason is not None]
    out.count(with_reason, [reason_col.get(traces[i].reason, other)  # type: ignore[arg-type]
                            for i in with_reason])
    values: dict[str, tuple[list[int], list[float]]] = {
        name: ([], []) for name in layout.histograms}
    _claims(traces, layout, out, values.get("supported_claim_ratio"))
    signals = [t.signals for t in traces]
    for name, (idx, vals) in values.items():
        found = [i for i, s in enumerate(signals) if name in s]
        idx += found
        vals += [signals[i][name] for i in found]
    _requirements(traces, layout, out, extras, admit_missing)
    _checks(traces, layout, out)
    _usage(traces, layout, out, values)
    for name, (idx, vals) in values.items():
        if idx:
            out.histogram(layout.histograms[name], idx, vals)
    with_evals = [i for i, t in enumerate(traces) if t.evals]
    for name in layout.evals:
        idx = [i for i in with_evals if name in traces[i].evals]
        if idx:
            out.count(idx, col[f"eval_{name}"])
            out.add(idx, layout.sums[f"eval_{name}"], [traces[i].evals[name] for i in idx])
    return out.finish(extras)


def _claims(traces: Sequence[Trace], layout: Layout, out: _Columns,
            ratio: tuple[list[int], list[float]] | None) -> None:
    col = layout.counts
    claimed = [i for i, t in enumerate(traces) if t.claims]
    if not claimed:
        return
    out.count(claimed, col["claims_traces"])
    kind = {(i, v): col[f"claims_{i}_{v}"] for i in IMPORTANCES for v in VERDICTS}
    flat = [(i, c) for i in claimed for c in traces[i].claims]
    out.count([i for i, _ in flat], [kind[c.importance, c.verdict] for _, c in flat])
    out.count([i for i in claimed if gate_leak(traces[i])], col["gate_leaks"])
    if ratio is None:  # the signal is not configured
        return
    derive = [i for i in claimed if "supported_claim_ratio" not in traces[i].signals]
    ratio[0].extend(derive)
    ratio[1].extend(supported_claim_ratio(traces[i]) or 0.0 for i in derive)


def _requirements(traces: Sequence[Trace], layout: Layout, out: _Columns,
                  extras: list[tuple[int, str, str]],
                  admit_missing: Callable[[str], str]) -> None:
    col = layout.counts
    outcomes = [(i, t.requirements, requirement_outcome(t.requirements))
                for i, t in enumerate(traces)]
    with_req = [(i, req, found) for i, req, found in outcomes if found is not None]
    if not with_req:
        return
    out.count([i for i, _, _ in with_req], col["requirements_traces"])
    for i, req, found in with_req:
        assert req is not None
        extras.extend((i, "missing", admit_missing(name)) for name in found.missing)
        extras.append((i, "rubric", req.rubric or "unversioned"))
    out.count([i for i, _, found in with_req if found.all_required], col["requirements_all"])
    out.count([i for i, _, found in with_req if found.critical_missed],
              col["requirements_critical_missed"])
    out.add([i for i, _, _ in with_req], layout.sums["coverage_sum"],
            [found.coverage for _, _, found in with_req])


def _checks(traces: Sequence[Trace], layout: Layout, out: _Columns) -> None:
    col = layout.counts
    checks = [(i, t.checks) for i, t in enumerate(traces) if t.checks is not None]
    failed = [(i, verbatim_failure(c)) for i, c in checks]
    out.count([i for i, f in failed if f is not None], col["citation_true"])
    out.count([i for i, f in failed if f], col["citation_verbatim_false"])
    self_check = {v: col[f"self_check_{v}"] for v in SELF_CHECKS}
    judged = [(i, c.self_check) for i, c in checks
              if c.self_check is not None]
    out.count([i for i, _ in judged], [self_check[v] for _, v in judged])


def _usage(traces: Sequence[Trace], layout: Layout, out: _Columns,
           values: dict[str, tuple[list[int], list[float]]]) -> None:
    used = [(i, t.usage) for i, t in enumerate(traces) if t.usage is not None]
    if not used:
        return
    out.count([i for i, _ in used], layout.counts["usage_traces"])
    for name in ("latency_ms", "cost"):
        idx, vals = values[name]
        found = [(i, getattr(u, name)) for i, u in used if getattr(u, name) is not None]
        idx += [i for i, _ in found]
        vals += [v for _, v in found]
    for name in ("input_tokens", "output_tokens", "model_calls"):
        found = [(i, getattr(u, name)) for i, u in used if getattr(u, name) is not None]
        if found:
            out.add([i for i, _ in found], layout.sums[f"{name}_sum"],
                    [float(v) for _, v in found])


def label_columns(layout: Layout, decision: str, label: Label) -> list[int]:
    """Count columns one label adds to its trace's cells (`meaning.label_outcomes`)."""
    return [layout.counts[f"label_{name}"] for name in label_outcomes(decision, label)]


def feedback_columns(layout: Layout, feedback: Feedback) -> list[int]:
    return [layout.counts["feedback_up" if feedback.score > 0 else "feedback_down"]]
