"""One row per trace: the columns that offline comparisons and gate replays read.

`ragmon report` and `ragmon calibrate` need per-trace values (to resample clusters, to
replay the gate), not window statistics. A `Frame` holds them as numpy columns, built
from the same validated traces as everything else (rejected lines are counted by
reason, never silently skipped), with labels joined by trace_id under the stream's
rules: a human label beats a judge label, a later label of the same source beats an
earlier one. What a trace and its label mean (gate leak, coverage, label outcomes, ...) is
read from `monitor/ingest/meaning.py`, as the stream reads it. Unknown booleans are -1,
missing numbers NaN.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import numpy as np

from monitor.aggregate.joins import replaces
from monitor.ingest.contract import COMPONENT_NAMES, DECISIONS, Label, Trace
from monitor.ingest.meaning import (
    LABEL_OUTCOMES,
    gate_leak,
    label_outcomes,
    requirement_outcome,
    supported_claim_ratio,
    verbatim_failure,
)
from monitor.ingest.parse import Rejection, parse
from monitor.ingest.slices import query_length

__all__ = ["UNKNOWN", "Frame", "Loaded", "load"]

E = TypeVar("E", Trace, Label)
UNKNOWN: Final = -1
_CHUNK: Final = 10_000
SIGNALS: Final = ("top_score", "query_coverage", "supported_claim_ratio", "critical_support")
_SELF_CHECK = {"pass": 1, "reject": 0}


@dataclass
class Frame:
    """Columns of equal length, one row per valid, de-duplicated trace."""

    release: np.ndarray                  # str
    cluster: np.ndarray                  # str: the cluster field, else the trace id
    slices: dict[str, np.ndarray]        # dimension -> str ("" when absent)
    decision: np.ndarray                 # int8 index into DECISIONS
    reason: np.ndarray                   # str ("" when none)
    signals: dict[str, np.ndarray]       # float, NaN when absent
    critical_contradiction: np.ndarray   # bool: a critical claim is contradicted
    claims_unsupported: np.ndarray       # int8: a critical claim is not supported (-1 no claims)
    gate_leak: np.ndarray                # bool
    coverage: np.ndarray                 # float, NaN without requirements
    all_required: np.ndarray             # int8
    critical_missed: np.ndarray          # int8
    verbatim_failure: np.ndarray         # int8, -1 unless citation given
    self_check_pass: np.ndarray          # int8, -1 unless pass/reject
    latency_ms: np.ndarray               # float
    cost: np.ndarray                     # float
    answerable: np.ndarray               # int8 label
    correct: np.ndarray                  # int8 label
    unsupported_critical: np.ndarray     # int8 label
    outcomes: dict[str, np.ndarray]      # label outcome (meaning.LABEL_OUTCOMES) -> bool

    def __len__(self) -> int:
        return len(self.release)

    def take(self, mask: np.ndarray) -> Frame:
        """The rows where `mask` holds (a boolean array or indices)."""
        def pick(column: np.ndarray) -> np.ndarray:
            return np.asarray(column[mask])
        columns: dict[str, Any] = {
            name: ({k: pick(v) for k, v in value.items()} if isinstance(value, dict)
                   else pick(value))
            for name, value in vars(self).items()}
        return Frame(**columns)

    @classmethod
    def concat(cls, parts: list[Frame]) -> Frame:
        """The rows of `parts`, in order (all built with the same dimensions)."""
        first = vars(parts[0])
        columns: dict[str, Any] = {
            name: ({k: np.concatenate([vars(p)[name][k] for p in parts]) for k in value}
                   if isinstance(value, dict)
                   else np.concatenate([vars(p)[name] for p in parts]))
            for name, value in first.items()}
        return cls(**columns)

    @property
    def answered(self) -> np.ndarray:
        return np.asarray(self.decision != DECISIONS.index("abstain"))

    @property
    def labelled(self) -> np.ndarray:
        return np.asarray((self.answerable != UNKNOWN) | (self.correct != UNKNOWN)
                          | (self.unsupported_critical != UNKNOWN))


@dataclass
class Loaded:
    """A frame and what reading it met."""

    frame: Frame
    read: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    duplicates: int = 0
    labels_read: int = 0
    labels_rejected: Counter[str] = field(default_factory=Counter)
    labels_unmatched: int = 0
    # release -> version component -> value -> traces (what changed between releases)
    versions: dict[str, dict[str, Counter[str]]] = field(default_factory=dict)
    rubrics: dict[str, Counter[str]] = field(default_factory=dict)  # release -> rubric


def load(trace_lines: Iterable[bytes], label_lines: Iterable[bytes] = (),
         dimensions: tuple[str, ...] = ()) -> Loaded:
    """Parse traces and labels (any order), join them, and build the columns."""
    rows: dict[str, int] = {}  # trace id -> row: de-duplication and the label join
    rejected: Counter[str] = Counter()
    duplicates = 0
    versions: dict[str, dict[str, Counter[str]]] = {}
    rubrics: dict[str, Counter[str]] = {}
    parts: list[Frame] = []
    chunk: list[Trace] = []  # traces become columns in chunks: decoded traces are large
    for t in _valid(trace_lines, Trace, rejected):
        if t.trace_id in rows:
            duplicates += 1
            continue
        rows[t.trace_id] = len(rows)
        chunk.append(t)
        _count_versions(t, versions, rubrics)
        if len(chunk) >= _CHUNK:
            parts.append(_columns(chunk, dimensions))
            chunk = []
    parts.append(_columns(chunk, dimensions))
    frame = Frame.concat(parts)
    read = len(rows) + duplicates + sum(rejected.values())
    labels: dict[str, Label] = {}
    labels_rejected: Counter[str] = Counter()
    labels_valid = 0
    for label in _valid(label_lines, Label, labels_rejected):
        labels_valid += 1
        old = labels.get(label.trace_id)
        if old is None or replaces(label, old):
            labels[label.trace_id] = label
    unmatched = 0
    for trace_id, label in labels.items():
        row = rows.get(trace_id)
        if row is None:
            unmatched += 1
            continue
        frame.answerable[row] = _flag(label.answerable)
        frame.correct[row] = _flag(label.correct)
        frame.unsupported_critical[row] = _flag(label.unsupported_critical)
        for name in label_outcomes(DECISIONS[frame.decision[row]], label):
            frame.outcomes[name][row] = True
    labels_read = labels_valid + sum(labels_rejected.values())
    return Loaded(frame, read, rejected, duplicates, labels_read, labels_rejected, unmatched,
                  versions, rubrics)


def _count_versions(t: Trace, versions: dict[str, dict[str, Counter[str]]],
                    rubrics: dict[str, Counter[str]]) -> None:
    release = t.system.release
    by_name = versions.setdefault(release, {name: Counter() for name in COMPONENT_NAMES})
    for name, value in zip(COMPONENT_NAMES, t.system.components(), strict=True):
        if value is not None:
            by_name[name][value] += 1
    if t.requirements is not None and t.requirements.rubric is not None:
        rubrics.setdefault(release, Counter())[t.requirements.rubric] += 1


def _valid(lines: Iterable[bytes], expect: type[E], rejected: Counter[str]) -> Iterator[E]:
    """The valid events of `expect` among non-blank lines; rejections counted by reason."""
    for raw in lines:
        if raw.strip():
            parsed = parse(raw, expect=expect)
            if isinstance(parsed, Rejection):
                rejected[parsed.reason] += 1
            else:
                yield parsed.event  # type: ignore[misc]


def _flag(value: bool | None) -> int:
    return UNKNOWN if value is None else int(value)


def _columns(traces: list[Trace], dimensions: tuple[str, ...]) -> Frame:
    """The columns of `traces` (labels unknown: `load` joins them afterwards)."""
    n = len(traces)
    ints = {name: np.full(n, UNKNOWN, dtype=np.int8) for name in (
        "claims_unsupported", "all_required", "critical_missed", "verbatim_failure",
        "self_check_pass", "answerable", "correct", "unsupported_critical")}
    floats = {name: np.full(n, np.nan) for name in ("coverage", "latency_ms", "cost")}
    signals = {name: np.full(n, np.nan) for name in SIGNALS}
    decision = np.empty(n, dtype=np.int8)
    contradiction = np.zeros(n, dtype=bool)
    leak = np.zeros(n, dtype=bool)
    dimensions = tuple(d for d in dimensions if d != "query_length")  # derived below
    slices: dict[str, list[str]] = {dim: [] for dim in (*dimensions, "query_length")}
    release, cluster, reason = [], [], []
    for i, t in enumerate(traces):
        release.append(t.system.release)
        cluster.append(t.cluster or t.trace_id)
        reason.append(t.reason or "")
        decision[i] = DECISIONS.index(t.decision)
        for dim in dimensions:
            slices[dim].append(t.slice.get(dim, ""))
        slices["query_length"].append(
            "" if t.query_tokens is None else query_length(t.query_tokens))
        for name, value in t.signals.items():
            if name in signals:
                signals[name][i] = value
        ratio = supported_claim_ratio(t)
        signals["supported_claim_ratio"][i] = np.nan if ratio is None else ratio
        critical = [c for c in t.claims if c.importance == "critical"]
        contradiction[i] = any(c.verdict == "contradicted" for c in critical)
        if t.claims:
            ints["claims_unsupported"][i] = any(c.verdict != "supported" for c in critical)
        leak[i] = gate_leak(t)
        requirements = requirement_outcome(t.requirements)
        if requirements is not None:
            floats["coverage"][i] = requirements.coverage
            ints["all_required"][i] = requirements.all_required
            ints["critical_missed"][i] = requirements.critical_missed
        failure = verbatim_failure(t.checks)
        if failure is not None:
            ints["verbatim_failure"][i] = failure
        if t.checks is not None and t.checks.self_check in _SELF_CHECK:
            ints["self_check_pass"][i] = _SELF_CHECK[t.checks.self_check]
        if t.usage is not None:
            for name in ("latency_ms", "cost"):
                value = getattr(t.usage, name)
                if value is not None:
                    floats[name][i] = value
    return Frame(
        release=np.array(release, dtype=object), cluster=np.array(cluster, dtype=object),
        slices={dim: np.array(values, dtype=object) for dim, values in slices.items()},
        decision=decision, reason=np.array(reason, dtype=object), signals=signals,
        critical_contradiction=contradiction, gate_leak=leak,
        outcomes={name: np.zeros(n, dtype=bool) for name in LABEL_OUTCOMES}, **ints, **floats)

