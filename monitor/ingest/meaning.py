"""What one trace and its label mean: the contract's per-trace rules, written once.

docs/contract.md, "Derived quantities": answered, gate leak, supported claim ratio,
requirement coverage, citation verbatim failure, and the label outcomes every label rate
is a ratio of. Every Python path reads them here: the pure-Python fold
(`aggregate/encode.py`) and the label join (`aggregate/joins.py`) behind the stream and
`ragmon replay`, the summary's and the metrics' label rates (`LABEL_RATES`), and the
per-trace frame behind `ragmon report` and `ragmon calibrate` (`offline/frame.py`,
`offline/compare.py`). The compiled fold (`aggregate/_fold.pyx`) spells the same rules
in C, but for requirement coverage, which it reads here once per distinct requirements
block; tests/ingest/test_meaning.py checks that the stream, the replay summary and the report
agree on every rule, compiled and pure Python.
"""

from __future__ import annotations

from typing import Final, NamedTuple

from monitor.ingest.contract import Check, Label, Requirements, Trace

__all__ = ["ANSWERED", "LABEL_OUTCOMES", "LABEL_RATES", "RequirementOutcome", "gate_leak",
           "label_outcomes", "requirement_outcome", "supported_claim_ratio",
           "verbatim_failure"]

ANSWERED: Final = frozenset({"answer", "partial"})  # the decisions that answer


def gate_leak(trace: Trace) -> bool:
    """Answered (answer or partial) holding a rendered critical claim whose verdict is not
    `supported`: the gate promises zero."""
    return trace.decision in ANSWERED and any(
        c.importance == "critical" and c.rendered and c.verdict != "supported"
        for c in trace.claims)


def supported_claim_ratio(trace: Trace) -> float | None:
    """`signals.supported_claim_ratio` if given, else supported claims / all claims;
    None without either."""
    value = trace.signals.get("supported_claim_ratio")
    if value is not None or not trace.claims:
        return value
    return sum(c.verdict == "supported" for c in trace.claims) / len(trace.claims)


class RequirementOutcome(NamedTuple):
    coverage: float          # |expected ∩ covered| / |expected|
    all_required: bool       # expected ⊆ covered
    critical_missed: bool    # some id in `critical` is not covered
    missing: list[str]       # expected − covered, sorted


def requirement_outcome(requirements: Requirements | None) -> RequirementOutcome | None:
    """A trace's requirement coverage; None when it expects nothing."""
    if requirements is None or not requirements.expected:
        return None
    expected, covered = set(requirements.expected), set(requirements.covered)
    missing = sorted(expected - covered)
    return RequirementOutcome((len(expected) - len(missing)) / len(expected), not missing,
                              any(c not in covered for c in requirements.critical), missing)


def verbatim_failure(checks: Check | None) -> bool | None:
    """A cited answer whose citation is not verbatim; None unless `citation` is true."""
    if checks is None or not checks.citation:
        return None
    return checks.verbatim is False


# Label outcomes, named <population>_<outcome>; each label rate is a ratio of two.
LABEL_OUTCOMES: Final = (
    "labelled",
    "answered_uc_known", "answered_uc_true",            # unsupported answer rate
    "abstained_answerable_known", "abstained_answerable_true",  # false abstention rate
    "answered_correct_known", "answered_correct_true",  # selective accuracy
    "unanswerable", "unanswerable_answered",            # unsupported answering on unanswerable
    "answerable", "answerable_answered_correct",        # correct on answerable
)
# The label-based rates: name -> (numerator, denominator) label outcomes.
LABEL_RATES: Final = {
    "unsupported_answer_rate": ("answered_uc_true", "answered_uc_known"),
    "false_abstention_rate": ("abstained_answerable_true", "abstained_answerable_known"),
    "selective_accuracy": ("answered_correct_true", "answered_correct_known"),
    "unsupported_answering_on_unanswerable": ("unanswerable_answered", "unanswerable"),
    "correct_on_answerable": ("answerable_answered_correct", "answerable"),
}


def label_outcomes(decision: str, label: Label) -> list[str]:
    """The outcomes (`LABEL_OUTCOMES`) a label of a trace with `decision` counts in: each of
    its booleans is optional, and a rate's denominator holds only the labels that state
    the flag it reads."""
    answered = decision in ANSWERED
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
    return names
