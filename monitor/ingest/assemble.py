"""One OTel trace's spans -> one `rag-decision/1` message (docs/otlp.md, "What is
read"): the mapping, first match wins.

The result is the JSON bytes a producer would have sent to the decisions topic, and it
goes through exactly the same parse, validation, de-duplication and fold: a `rag.decision`
of `maybe` or a trace without a release is rejected there, with the contract's reasons.
Only what `monitor/ingest/otlp.py` kept reaches here, so content never does.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, Final

import msgspec

from monitor.ingest.otlp import Span
from monitor.ingest.otlp_values import Value

__all__ = ["assemble", "decision_span", "span_attributes"]

_ENCODE: Final = msgspec.json.Encoder().encode
_LLM_OPERATIONS: Final = frozenset({"chat", "text_completion", "generate_content"})
_SYSTEM: Final = ("model", "embedding_model", "index_version", "reranker", "prompt_version",
                  "gate_config")
_TOP: Final = ("query_tokens", "cluster", "decision", "reason", "rule")
_LLM_MODELS: Final = ("gen_ai.response.model", "gen_ai.request.model", "llm.model_name")
_EMBEDDING_MODELS: Final = ("gen_ai.request.model", "embedding.model_name")


def decision_span(spans: Iterable[Span]) -> Span | None:
    """The span carrying `rag.decision` (the last to end, if several do)."""
    found = [span for span in spans if "rag.decision" in span.attrs]
    return max(found, key=lambda span: span.end) if found else None


def assemble(trace_id: str, spans: list[Span]) -> bytes | None:
    """The decision message of an OTel trace, or None when no span carries `rag.decision`."""
    decision = decision_span(spans)
    if decision is None:
        return None
    ordered = sorted(spans, key=_start)
    # rag.* attributes: the decision span's first, then the others' by start time.
    rag: dict[str, Value] = {}
    for span in [*reversed(ordered), decision]:  # later writes win: the decision span last
        for key, value in span.attrs.items():
            if key.startswith("rag."):
                rag[key] = value
    groups = _groups(rag)
    by_kind: dict[str | None, list[Span]] = {"LLM": [], "RETRIEVER": [], "EMBEDDING": []}
    roots = []
    for span in ordered:
        by_kind.setdefault(_kind(span), []).append(span)
        if span.root():  # the trace's root, or this service's part of it
            roots.append(span)
    llms, retrievals, embeddings = by_kind["LLM"], by_kind["RETRIEVER"], by_kind["EMBEDDING"]
    message: dict[str, Any] = {
        "schema": "rag-decision/1",
        "trace_id": rag.get("rag.trace_id", trace_id),
        "ts": _rfc3339(decision.end),
        "otel": {"trace_id": trace_id, "span_id": decision.span_id},
    }
    system = {"app": rag.get("rag.app", decision.service),
              "release": rag.get("rag.release", decision.version)}
    system["model"] = rag.get("rag.model", _first_of(llms, _LLM_MODELS))
    system["embedding_model"] = rag.get("rag.embedding_model",
                                        _first_of(embeddings, _EMBEDDING_MODELS))
    system["index_version"] = rag.get("rag.index_version",
                                      _first_of(retrievals, ("gen_ai.data_source.id",)))
    system["reranker"] = rag.get("rag.reranker", _first_of(ordered, ("reranker.model_name",)))
    system["prompt_version"] = rag.get("rag.prompt_version",
                                       _first_of(ordered, ("llm.prompt_template.version",)))
    system["gate_config"] = rag.get("rag.gate_config")
    message["system"] = {key: value for key, value in system.items() if value is not None}
    for name in _TOP:
        if f"rag.{name}" in rag:
            message[name] = rag[f"rag.{name}"]
    if "slice" in groups:
        message["slice"] = groups["slice"]
    signals = groups.get("signals", {})
    last = retrievals[-1] if retrievals else None
    scores = [score for _, score in last.docs if score is not None] if last else []
    if "top_score" not in signals and scores:
        signals["top_score"] = max(scores)
    if signals:
        message["signals"] = signals
    if last is not None:
        top_k = _first_of((last,), ("gen_ai.request.top_k", "reranker.top_k"))
        message["retrieval"] = {
            "chunk_ids": [doc_id for doc_id, _ in last.docs if doc_id is not None],
            "top_k": top_k if top_k is not None else len(last.docs)}
    claims = [_claim(attrs) for span in ordered for name, attrs in span.events
              if name == "rag.claim"]
    if claims:
        message["claims"] = claims
    for group, names in (("requirements", ("expected", "covered", "critical", "rubric")),
                         ("checks", ("citation", "verbatim", "self_check"))):
        found = {name: rag[f"rag.{group}.{name}"] for name in names if f"rag.{group}.{name}" in rag}
        if found:
            message[group] = found
    message["usage"] = _usage(groups, llms, roots[0] if roots else decision)
    evals = _evals(ordered)
    evals.update(groups.get("evals", {}))
    if evals:
        message["evals"] = evals
    raw = _ENCODE(message)
    if b"null" in raw:  # a NaN or infinity (msgspec writes null): written as JSON's
        raw = json.dumps(message, separators=(",", ":"), allow_nan=True).encode()  # NaN,
    return raw  # which the contract's validation rejects as `non_finite`


def _kind(span: Span) -> str | None:
    """LLM, RETRIEVER, EMBEDDING, RERANKER (OpenInference's names) or None."""
    kind = span.attrs.get("openinference.span.kind")
    if isinstance(kind, str) and kind:
        return kind.upper()
    operation = span.attrs.get("gen_ai.operation.name")  # any value type may come
    if isinstance(operation, str) and operation in _LLM_OPERATIONS:
        return "LLM"
    if operation == "embeddings":
        return "EMBEDDING"
    if operation == "retrieval" or span.docs:
        return "RETRIEVER"
    return None


def _groups(rag: dict[str, Value]) -> dict[str, dict[str, Value]]:
    """`rag.<group>.<name>` attributes as `{group: {name: value}}`, in their order."""
    found: dict[str, dict[str, Value]] = {}
    for key, value in rag.items():
        group, dot, name = key[4:].partition(".")
        if dot:
            found.setdefault(group, {})[name] = value
    return found


def _start(span: Span) -> int:
    return span.start


def _claim(attrs: dict[str, Value]) -> dict[str, Value]:
    return {key[len("rag.claim."):]: value for key, value in attrs.items()
            if key.startswith("rag.claim.")}


def span_attributes(event: dict[str, Any]) -> tuple[dict[str, Value], list[dict[str, Value]]]:
    """The inverse of `assemble` for one decision (a `rag-decision/1` object): the span
    attributes the intake reads it back from, and one `rag.claim` event's attributes per
    claim. Values that are not attribute values (None, maps inside lists) are left out."""
    attributes: dict[str, Value] = {}

    def put(name: str, value: Any) -> None:
        if isinstance(value, str | bool | int | float):
            attributes[name] = value
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            attributes[name] = list(value)

    put("rag.trace_id", event.get("trace_id"))
    for name in _TOP:
        put(f"rag.{name}", event.get(name))
    for name, value in (event.get("system") or {}).items():
        put(f"rag.{name}", value)
    for group in ("slice", "signals", "evals", "requirements", "checks", "usage"):
        for name, value in (event.get(group) or {}).items():
            put(f"rag.{group}.{name}", value)
    claims = [{f"rag.claim.{key}": value for key, value in claim.items()
               if isinstance(value, str | bool | int | float)
               or (isinstance(value, list) and all(isinstance(v, str) for v in value))}
              for claim in event.get("claims") or () if isinstance(claim, dict)]
    return attributes, claims


def _usage(groups: dict[str, dict[str, Value]], llms: list[Span],
           timed: Span) -> dict[str, Value]:
    """`rag.usage.<field>` first (what the SDK sets), else from the LLM and root spans."""
    usage: dict[str, Value] = {"latency_ms": max(timed.end - timed.start, 0) / 1e6}
    for field, names in (("input_tokens", ("gen_ai.usage.input_tokens", "llm.token_count.prompt")),
                         ("output_tokens", ("gen_ai.usage.output_tokens",
                                            "llm.token_count.completion"))):
        counts = [_first_of((span,), names) for span in llms]
        if any(count is not None for count in counts):
            usage[field] = sum(count for count in counts if isinstance(count, int | float))
    if llms:
        usage["model_calls"] = len(llms)
    costs = [span.attrs["llm.cost.total"] for span in llms if "llm.cost.total" in span.attrs]
    if costs:
        usage["cost"] = sum(cost for cost in costs if isinstance(cost, int | float))
    usage.update(groups.get("usage", {}))
    return usage


def _evals(spans: list[Span]) -> dict[str, Value]:
    """GenAI `gen_ai.evaluation.result` events and OpenInference `evaluations.N`."""
    found: dict[str, Value] = {}
    for span in spans:
        for name, score in span.evals:
            if name is not None and score is not None:
                found[name] = score
        for event, attrs in span.events:
            named, value = attrs.get("gen_ai.evaluation.name"), attrs.get(
                "gen_ai.evaluation.score.value")
            if event == "gen_ai.evaluation.result" and isinstance(named, str) and value is not None:
                found[named] = value
    return found


def _first_of(spans: Iterable[Span], names: tuple[str, ...]) -> Any:
    """The first of the spans' attributes `names` (span by span) that is set and not ""."""
    for span in spans:
        attrs = span.attrs
        for name in names:
            value = attrs.get(name)
            if value is not None and value != "":
                return value
    return None


def _rfc3339(unix_nanos: int) -> str:
    micros = unix_nanos // 1000
    if micros >= _EXACT_MICROS:  # as a float of seconds, rounded to the microsecond
        stamp = datetime.fromtimestamp(micros / 1e6, UTC)
        return stamp.isoformat(timespec="microseconds").replace("+00:00", "Z")
    seconds, micro = divmod(micros, 1_000_000)
    return f"{_second(seconds)}.{micro:06d}Z"


# Below 2**32 s (2106) a float of seconds keeps every microsecond, so the two forms agree
# (tests/ingest/test_assemble.py); the whole second's text is cached (spans come in order).
_EXACT_MICROS: Final = 2**32 * 1_000_000


@functools.lru_cache(maxsize=4096)
def _second(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).replace(tzinfo=None).isoformat()
