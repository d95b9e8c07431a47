"""Turns a batch of traces into the column contributions the aggregation folds.

Per trace the Python work is a handful of list appends; binning of every histogram is
one vectorised `searchsorted` per batch. The result is sparse: (trace, column) pairs
for counts and (trace, column, value) triples for sums, plus named extras (missing
requirement ids, rubric versions) that do not fit a fixed layout.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple

import numpy as np

from monitor.contract import Feedback, Label, Trace
from monitor.layout import Histogram, Layout

__all__ = [
    "Contributions", "Encoder", "encode", "feedback_columns", "label_columns",
]

_ANSWERED = frozenset({"answer", "partial"})


class Contributions(NamedTuple):
    count_trace: np.ndarray  # int64, one entry per +1
    count_col: np.ndarray
    sum_trace: np.ndarray
    sum_col: np.ndarray
    sum_value: np.ndarray    # float64
    extras: list[tuple[int, str, str]]  # (trace, kind, name): +1 each


class Encoder:
    """Accumulates one batch's contributions a trace at a time.

    Appending right after parsing lets each trace object be freed at once: holding a
    thousand decoded traces until the end of a batch measured ~2x slower here (the
    allocator keeps returning and re-faulting arenas).
    """

    def __init__(self, layout: Layout, admit_missing: Callable[[str], str]) -> None:
        col = layout.counts
        self.layout = layout
        self.admit_missing = admit_missing
        self.n = 0
        self.ct: list[int] = []
        self.cc: list[int] = []
        self.st: list[int] = []
        self.sc: list[int] = []
        self.sv: list[float] = []
        self.extras: list[tuple[int, str, str]] = []
        self.hist: dict[str, tuple[list[int], list[float]]] = {
            name: ([], []) for name in layout.histograms
        }
        self._decision = {d: [col["traces"], col[f"decision_{d}"]]
                          for d in ("answer", "partial", "abstain")}
        self._reason = {code: layout.reason_column(code) for code in layout.reasons}
        self._claim = {(i, v): col[f"claims_{i}_{v}"] for i in ("critical", "normal")
                       for v in ("supported", "unsupported", "contradicted")}
        self._self_check = {v: col[f"self_check_{v}"] for v in ("pass", "reject", "skipped")}
        self._eval = {name: (col[f"eval_{name}"], layout.sums[f"eval_{name}"])
                      for name in layout.evals}
        self._col = col
        self._sums = layout.sums
        self._usage_cols = tuple(layout.sums[f"{name}_sum"]
                                 for name in ("input_tokens", "output_tokens", "model_calls"))

    def append(self, t: Trace) -> int:
        """Add one trace; returns its index in the batch."""
        i = self.n
        self.n += 1
        col = self._col
        cols = self._decision[t.decision].copy()
        if t.reason is not None:
            reason_col = self._reason.get(t.reason)
            cols.append(self._col["reason_other"] if reason_col is None else reason_col)
        signals = t.signals
        if t.claims:
            cols.append(col["claims_traces"])
            claim = self._claim
            supported = 0
            leak = False
            for c in t.claims:
                cols.append(claim[c.importance, c.verdict])
                if c.verdict == "supported":
                    supported += 1
                elif c.importance == "critical" and c.rendered:
                    leak = True
            # A gate leak (CONTRACT.md): answered with a rendered, unsupported critical claim.
            if leak and t.decision != "abstain":
                cols.append(col["gate_leaks"])
            if "supported_claim_ratio" not in signals:
                signals = {**signals, "supported_claim_ratio": supported / len(t.claims)}
        hist = self.hist
        for name, value in signals.items():
            target = hist.get(name)
            if target is not None:
                target[0].append(i)
                target[1].append(value)
        if t.requirements is not None and t.requirements.expected:
            self._requirements(i, t, cols)
        checks = t.checks
        if checks is not None:
            if checks.citation:
                cols.append(col["citation_true"])
                if checks.verbatim is False:
                    cols.append(col["citation_verbatim_false"])
            if checks.self_check is not None:
                cols.append(self._self_check[checks.self_check])
        if t.usage is not None:
            self._usage(i, t, cols)
        for name, value in t.evals.items():
            pair = self._eval.get(name)
            if pair is not None:
                cols.append(pair[0])
                self.st.append(i)
                self.sc.append(pair[1])
                self.sv.append(value)
        self.ct.extend([i] * len(cols))
        self.cc.extend(cols)
        return i

    def finish(self) -> Contributions:
        """The batch's contributions, with every histogram binned in one vectorised pass."""
        parts: list[tuple[np.ndarray, ...]] = [(
            np.asarray(self.ct, np.int64), np.asarray(self.cc, np.int64),
            np.asarray(self.st, np.int64), np.asarray(self.sc, np.int64),
            np.asarray(self.sv, np.float64))]
        for name, (idx, values) in self.hist.items():
            if idx:
                parts.append(_histogram(self.layout.histograms[name], idx, values))
        ct, cc, st, sc, sv = (np.concatenate(column) for column in zip(*parts, strict=True))
        return Contributions(ct, cc, st, sc, sv, self.extras)

    def _requirements(self, i: int, t: Trace, cols: list[int]) -> None:
        req = t.requirements
        assert req is not None
        col = self._col
        expected = set(req.expected)
        covered = set(req.covered)
        missing = expected - covered
        cols.append(col["requirements_traces"])
        if not missing:
            cols.append(col["requirements_all"])
        if req.critical and any(c not in covered for c in req.critical):
            cols.append(col["requirements_critical_missed"])
        self.st.append(i)
        self.sc.append(self._sums["coverage_sum"])
        self.sv.append((len(expected) - len(missing)) / len(expected))
        for name in sorted(missing):
            self.extras.append((i, "missing", self.admit_missing(name)))
        self.extras.append((i, "rubric", req.rubric or "unversioned"))

    def _usage(self, i: int, t: Trace, cols: list[int]) -> None:
        usage = t.usage
        assert usage is not None
        cols.append(self._col["usage_traces"])
        if usage.latency_ms is not None:
            self.hist["latency_ms"][0].append(i)
            self.hist["latency_ms"][1].append(usage.latency_ms)
        if usage.cost is not None:
            self.hist["cost"][0].append(i)
            self.hist["cost"][1].append(usage.cost)
        tokens_in, tokens_out, calls = self._usage_cols
        for sum_col, value in ((tokens_in, usage.input_tokens), (tokens_out, usage.output_tokens),
                               (calls, usage.model_calls)):
            if value is not None:
                self.st.append(i)
                self.sc.append(sum_col)
                self.sv.append(float(value))


def encode(traces: Iterable[Trace], layout: Layout,
           admit_missing: Callable[[str], str]) -> Contributions:
    """Contributions of a batch; `admit_missing` caps the vocabulary of missing ids."""
    encoder = Encoder(layout, admit_missing)
    for trace in traces:
        encoder.append(trace)
    return encoder.finish()


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


def _histogram(hist: Histogram, idx: list[int],
               values: list[float]) -> tuple[np.ndarray, ...]:
    """(count trace, count col, sum trace, sum col, sum value) of one histogram's values:
    +1 in the value's bin and in the count, the value into the sum, its square into sumsq."""
    trace = np.asarray(idx, np.int64)
    arr = np.asarray(values, np.float64)
    n = len(trace)
    with np.errstate(over="ignore"):  # absurd but valid values overflow to inf, by design
        squares = arr * arr
    return (
        np.concatenate([trace, trace]),
        np.concatenate([hist.columns(arr), np.full(n, hist.count_col, np.int64)]),
        np.concatenate([trace, trace]),
        np.concatenate([np.full(n, hist.sum_col, np.int64),
                        np.full(n, hist.sum_col + 1, np.int64)]),
        np.concatenate([arr, squares]),
    )
