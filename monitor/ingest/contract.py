"""The wire contract: `rag-decision/1`, `rag-label/1` and `rag-feedback/1` as strict models.

The models are msgspec Structs rather than pydantic models because decoding is on the
hot path: measured here, pydantic per event caps a pipeline at ~22k traces/s while
msgspec decodes and validates the same trace in C at ~60k/s. The constraints below are
docs/contract.md, field by field; `ingest` turns their errors into reason codes.

The models forbid unknown fields so that the fast path can trust a clean decode: a
message with any field outside the contract (a content field such as `question`, or
a harmless extra) takes ingest's slow path, which drops content fields (counted) and
ignores the other unknown fields, as the contract says, before decoding again.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Final, Literal, get_args

import msgspec
from msgspec import Meta, Struct

__all__ = [
    "COMPONENT_NAMES",
    "CONTENT_FIELDS",
    "DECISIONS",
    "DECISION_SCHEMA",
    "FEEDBACK_SCHEMA",
    "IMPORTANCES",
    "KNOWN_REASONS",
    "LABEL_SCHEMA",
    "OTEL_SPAN_ID_FORMAT",
    "OTEL_TRACE_ID_FORMAT",
    "SELF_CHECKS",
    "TRACE_ID_FORMAT",
    "VERDICTS",
    "Check",
    "Claim",
    "Components",
    "Decision",
    "Event",
    "Feedback",
    "Importance",
    "Label",
    "Otel",
    "Requirements",
    "Retrieval",
    "SelfCheck",
    "System",
    "Trace",
    "Usage",
    "Verdict",
    "to_json",
]

DECISION_SCHEMA: Final = "rag-decision/1"
LABEL_SCHEMA: Final = "rag-label/1"
FEEDBACK_SCHEMA: Final = "rag-feedback/1"

# The contract's closed vocabularies, each spelled once: the models use the Literals, the
# layout's columns and the compiled fold the tuples read from them.
Decision = Literal["answer", "partial", "abstain"]
Importance = Literal["critical", "normal"]
Verdict = Literal["supported", "unsupported", "contradicted"]
SelfCheck = Literal["pass", "reject", "skipped"]
DECISIONS: Final[tuple[Decision, ...]] = get_args(Decision)
IMPORTANCES: Final[tuple[Importance, ...]] = get_args(Importance)
VERDICTS: Final[tuple[Verdict, ...]] = get_args(Verdict)
SELF_CHECKS: Final[tuple[SelfCheck, ...]] = get_args(SelfCheck)
KNOWN_REASONS: Final = (
    "weak_retrieval",
    "missing_query_constraints",
    "conflicting_sources",
    "critical_claim_unsupported",
    "insufficient_evidence",
    "version_mismatch",
)
# Raw user content must never be stored, logged or exported; dropped at any depth.
CONTENT_FIELDS: Final = frozenset(
    {"question", "answer", "text", "content", "prompt", "completion", "messages"}
)

# Identifier formats, checked in ingest (and in C by the compiled admission), not by a
# `Meta(pattern=...)`: msgspec calls Python's `re` for a pattern, measured 0.7 us of a
# 5 us trace decode here. The models bound the lengths; a bad length or format is the
# same rejection either way (`bad_trace_id`; `out_of_range` for the OpenTelemetry ids).
TRACE_ID_FORMAT: Final = r"[A-Za-z0-9._:-]{1,128}"
OTEL_TRACE_ID_FORMAT: Final = r"[0-9a-f]{32}"
OTEL_SPAN_ID_FORMAT: Final = r"[0-9a-f]{16}"
TraceId = Annotated[str, Meta(min_length=1, max_length=128)]
ShortText = Annotated[str, Meta(min_length=1, max_length=128)]
# Slice values become Prometheus label values: bounded, and (checked in ingest: a control
# character needs a backslash escape in JSON, so only such messages are scanned) printable.
SliceValue = Annotated[str, Meta(min_length=1, max_length=64)]
# The code format [a-z0-9_]{1,64} is checked in ingest, where known codes skip the regex.
ReasonCode = Annotated[str, Meta(min_length=1, max_length=64)]
Count = Annotated[int, Meta(ge=0, le=2**53)]
NonNegative = Annotated[float, Meta(ge=0.0)]
UnitScore = Annotated[float, Meta(ge=0.0, le=1.0)]


class Otel(Struct, frozen=True, gc=False, forbid_unknown_fields=True):
    trace_id: Annotated[str, Meta(min_length=32, max_length=32)] | None = None
    span_id: Annotated[str, Meta(min_length=16, max_length=16)] | None = None


# The version components of `System` whose change makes the gate calibration stale, in
# the order of `System.components()` (ragmon_reference_info's labels).
COMPONENT_NAMES: Final = ("model", "embedding_model", "index_version", "reranker",
                          "prompt_version", "gate_config")
Components = tuple[str | None, ...]  # a System's components, in that order


class System(Struct, frozen=True, gc=False, forbid_unknown_fields=True):
    release: Annotated[str, Meta(min_length=1, max_length=64)]
    app: SliceValue = "default"
    model: ShortText | None = None
    embedding_model: ShortText | None = None
    index_version: ShortText | None = None
    reranker: ShortText | None = None
    prompt_version: ShortText | None = None
    gate_config: ShortText | None = None

    def components(self) -> Components:
        """The version components (`COMPONENT_NAMES`), as a tuple: this runs per trace."""
        return (self.model, self.embedding_model, self.index_version,
                self.reranker, self.prompt_version, self.gate_config)


class Retrieval(Struct, frozen=True, gc=False, forbid_unknown_fields=True):
    chunk_ids: list[Annotated[str, Meta(max_length=256)]] = []
    top_k: Count | None = None


class Claim(Struct, frozen=True, gc=False, forbid_unknown_fields=True):
    importance: Importance
    verdict: Verdict
    id: Annotated[str, Meta(max_length=128)] | None = None
    entailment: float | None = None
    evidence: list[Annotated[str, Meta(max_length=256)]] = []
    rendered: bool = True


class Requirements(Struct, frozen=True, gc=False, forbid_unknown_fields=True):
    expected: list[ShortText] = []
    covered: list[ShortText] = []
    critical: list[ShortText] = []
    rubric: ShortText | None = None


class Check(Struct, frozen=True, gc=False, forbid_unknown_fields=True):
    citation: bool | None = None
    verbatim: bool | None = None
    self_check: SelfCheck | None = None


class Usage(Struct, frozen=True, gc=False, forbid_unknown_fields=True):
    latency_ms: NonNegative | None = None
    input_tokens: Count | None = None
    output_tokens: Count | None = None
    model_calls: Count | None = None
    cost: NonNegative | None = None


class Trace(Struct, frozen=True, gc=False, forbid_unknown_fields=True,
            tag_field="schema", tag=DECISION_SCHEMA):
    """One decision of the gate for one user request."""

    trace_id: TraceId
    ts: datetime
    system: System
    decision: Decision
    reason: ReasonCode | None = None
    otel: Otel | None = None
    slice: dict[Annotated[str, Meta(max_length=64)], SliceValue] = {}
    query_tokens: Count | None = None
    cluster: ShortText | None = None
    rule: ShortText | None = None
    signals: dict[Annotated[str, Meta(max_length=64)], float] = {}
    retrieval: Retrieval | None = None
    claims: list[Claim] = []
    requirements: Requirements | None = None
    checks: Check | None = None
    usage: Usage | None = None
    evals: dict[Annotated[str, Meta(max_length=64)], UnitScore] = {}


class Label(Struct, frozen=True, gc=False, forbid_unknown_fields=True,
            tag_field="schema", tag=LABEL_SCHEMA):
    """A later human or judge verdict on one trace."""

    trace_id: TraceId
    ts: datetime
    source: Literal["human", "judge"]
    answerable: bool | None = None
    correct: bool | None = None
    unsupported_critical: bool | None = None


class Feedback(Struct, frozen=True, gc=False, forbid_unknown_fields=True,
               tag_field="schema", tag=FEEDBACK_SCHEMA):
    """A user's thumbs up (1) or down (-1) on one trace."""

    trace_id: TraceId
    ts: datetime
    score: Literal[1, -1]


Event = Trace | Label | Feedback

_encoder = msgspec.json.Encoder()


def to_json(event: Event) -> bytes:
    """Serialise an event to its wire form (the inverse of `ingest.parse`)."""
    return _encoder.encode(event)
