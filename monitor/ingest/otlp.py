"""OTLP trace messages in, content-free span fragments out (the `otlp` intake's first step).

A message is an `otlp_proto` `TracesData` (the same bytes as an
`ExportTraceServiceRequest`) or an `otlp_json` one, told apart by its first byte: JSON
opens with `{`, a non-empty protobuf with a field tag (`0x0a`, `resource_spans`). Each
OTel trace in it becomes one `Fragment`: the spans of that trace in that message, each
with only the attributes and events the decision mapping reads (docs/otlp.md, "What is
read"). Everything else is left behind here, before any buffer,
checkpoint, log line or dead letter; attributes that carry content (`input.value`,
`gen_ai.input.messages`, document contents, ...) are counted as they are dropped.

`decode` never raises on bad bytes: it returns a `NotOtlp` with a reason and a detail
that quotes nothing of the message.
"""

from __future__ import annotations

import binascii
import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Final, NamedTuple, TypeAlias

import msgspec
from google.protobuf.message import DecodeError
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

from monitor.ingest import otlp_values as read
from monitor.ingest.contract import CONTENT_FIELDS
from monitor.ingest.native import load
from monitor.ingest.otlp_values import Value, documents

if TYPE_CHECKING:  # mypy reads its stub (`_otlp_wire.pyi`) ...
    from monitor.ingest import _otlp_wire as WIRE
else:  # ... and at run time it is None where it was not built
    WIRE = load("monitor.ingest._otlp_wire")

__all__ = ["MAX_MESSAGE_BYTES", "WIRE", "Decoded", "Fragment", "NotOtlp", "Span", "decode"]

# The Collector's Kafka exporter's default `max_message_bytes`: a limit of its own,
# not the 256 KiB of a decision message.
MAX_MESSAGE_BYTES: Final = 1_000_000

# Attributes read by the mapping, by exact name (besides every `rag.*`).
_KEPT: Final = frozenset({
    "openinference.span.kind", "gen_ai.operation.name",
    "gen_ai.response.model", "gen_ai.request.model", "gen_ai.data_source.id",
    "gen_ai.request.top_k", "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens",
    "llm.model_name", "llm.token_count.prompt", "llm.token_count.completion",
    "llm.cost.total", "llm.prompt_template.version", "embedding.model_name",
    "reranker.model_name", "reranker.top_k",
    "gen_ai.evaluation.name", "gen_ai.evaluation.score.value",  # evaluation events
})
_DOCUMENT = re.compile(r"(?:retrieval|reranker\.output)\.documents\.(\d+)\.document\.(\w+)")
_EVALUATION = re.compile(r"evaluations\.(\d+)\.evaluation\.(name|score)")
# Attributes that carry content (docs/otlp.md), dropped and counted: by exact name, by
# prefix, and any name whose last part is a content word (`*.content`, `rag.answer`).
_CONTENT_NAMES: Final = frozenset({
    "input.value", "output.value", "gen_ai.input.messages", "gen_ai.output.messages",
    "gen_ai.system_instructions", "gen_ai.retrieval.query.text", "gen_ai.prompt",
    "gen_ai.completion", "llm.prompt_template.template", "llm.prompt_template.variables",
    "metadata",
})
_CONTENT_PREFIXES: Final = ("llm.input_messages.", "llm.output_messages.", "llm.prompts.",
                            "llm.tools.", "gen_ai.prompt.", "gen_ai.completion.")
_CONTENT_LAST: Final = CONTENT_FIELDS | {"metadata", "query"}
_USED_KINDS: Final = frozenset({"LLM", "RETRIEVER", "EMBEDDING", "RERANKER"})
# OTLP span flags: whether the parent's context is known to be remote, and that it is.
REMOTE_PARENT: Final = 0x100 | 0x200
# Events read by the mapping; the rest (logs, exceptions with their messages) are dropped.
EVENTS: Final = frozenset({"rag.claim", "gen_ai.evaluation.result"})


_KEEP, _CONTENT, _IGNORE, _ROW, _GENAI_DOCS = "keep", "content", "ignore", "row", "genai_docs"
Route: TypeAlias = tuple[Any, ...]
_ROUTES: dict[str, Route] = {}  # per attribute key seen: what `_Gather.keep` does with it
_ROUTES_MAX: Final = 100_000


def _route(key: str) -> Route:
    """What to do with an attribute named `key` (cached: keys repeat across spans)."""
    if key.startswith("rag.") or key in _KEPT:
        route: Route = (_CONTENT,) if _is_content(key) else (_KEEP,)
    elif (found := _DOCUMENT.fullmatch(key)) is not None:
        # Every numbered document counts (OpenInference's LangChain documents have only
        # content and metadata); only its id and score are kept.
        at = {"id": 0, "score": 1}.get(found[2])
        route = (_ROW, "docs", int(found[1]), at, at is None and _is_content(key))
    elif (found := _EVALUATION.fullmatch(key)) is not None:
        route = (_ROW, "evals", int(found[1]), 0 if found[2] == "name" else 1, False)
    elif key == "gen_ai.retrieval.documents":
        route = (_GENAI_DOCS,)
    else:
        route = (_CONTENT,) if _is_content(key) else (_IGNORE,)
    if len(_ROUTES) < _ROUTES_MAX:  # a producer inventing keys cannot grow it forever
        _ROUTES[key] = route
    return route


class Span(msgspec.Struct, array_like=True, gc=False):
    """One span as the mapping needs it: ids, times, the resource's service name and
    version, kept attributes, documents (id, score) in order, and kept events."""

    span_id: str
    parent: str                 # "" for a root span
    start: int                  # unix nanoseconds
    end: int
    service: str | None
    version: str | None
    attrs: dict[str, Value]
    docs: list[tuple[str | None, float | None]] = []
    evals: list[tuple[str | None, float | None]] = []  # OpenInference evaluations.N
    events: list[tuple[str, dict[str, Value]]] = []
    # Its parent is in another service (the OTLP span flags say the parent context came
    # from a remote caller): this service's local root.
    remote: bool = False

    def root(self) -> bool:
        """The trace's root span, or this service's part of it (a remote parent)."""
        return not self.parent or self.remote


class Fragment(msgspec.Struct, array_like=True, gc=False):
    """The spans of one OTel trace found in one message, and where that message was:
    `(topic, partition, offset)`, or `(file, 0, line number)` offline."""

    trace_id: str               # 32 lowercase hex chars
    source: tuple[str, int, int]
    spans: list[Span]           # those the mapping can use (see `_Gather.add`)
    spans_read: int = 0         # all of the trace's spans in the message
    dropped: int = 0            # content attributes left behind
    end: int = 0                # the newest end time of all those spans (unix ns)


class Decoded(NamedTuple):
    fragments: list[Fragment]
    spans: int
    content_fields_dropped: int


class NotOtlp(NamedTuple):
    """A message that is not OTLP trace data: why (a rejection reason), and a detail that
    quotes none of its bytes."""

    reason: str
    detail: str


def decode(raw: bytes, source: tuple[str, int, int],
           max_bytes: int = MAX_MESSAGE_BYTES, wire: bool = True) -> Decoded | NotOtlp:
    """The fragments of one `otlp_proto` or `otlp_json` message. An `otlp_proto` one is
    scanned by the compiled reader where it is built (`wire`; False: the reference,
    protobuf's parse and a walk of its objects; both give the same fragments). A message
    whose reading raises is refused alone (`worker_error`: a bug, not the input), so that
    it cannot stop the intake at every retry."""
    try:
        return _decode(raw, source, max_bytes, wire)
    except Exception as exc:
        return NotOtlp("worker_error", f"{type(exc).__name__} while reading the message (a "
                       "bug in ragmon: please report it with the source offset)")


def _decode(raw: bytes, source: tuple[str, int, int], max_bytes: int,
            wire: bool) -> Decoded | NotOtlp:
    if len(raw) > max_bytes:
        return NotOtlp("too_large", f"{len(raw)} bytes > limit {max_bytes}")
    gather = _Gather(source)
    if raw.lstrip()[:1] == b"{":
        try:
            document = msgspec.json.decode(raw)
        except msgspec.DecodeError:
            return NotOtlp("not_otlp", "otlp_json: not JSON")
        except RecursionError:  # msgspec's own limit
            return NotOtlp("not_otlp", "otlp_json: nested deeper than it can be read")
        if not isinstance(document, dict) or not isinstance(document.get("resourceSpans"), list):
            return NotOtlp("not_otlp", "otlp_json: no resourceSpans array")
        try:
            _walk_json(document, gather)
        except (TypeError, ValueError, AttributeError, KeyError, binascii.Error) as exc:
            return NotOtlp("not_otlp", f"otlp_json: not trace data ({type(exc).__name__})")
    elif wire and WIRE is not None:
        try:
            found = WIRE.spans(raw, _ROUTES, _route, (_IGNORE, _CONTENT, _KEEP, _ROW), EVENTS,
                               documents, Span)
        except UnicodeDecodeError:
            return NotOtlp("not_otlp", "otlp_proto: not a TracesData message")
        except ValueError as exc:
            return NotOtlp("not_otlp", f"otlp_proto: {exc}")
        for trace_id, span, dropped in found:
            gather.dropped += dropped
            gather.add(trace_id, span, dropped)
    else:
        data = TracesData()
        try:
            data.ParseFromString(raw)
        except (DecodeError, RuntimeError):
            return NotOtlp("not_otlp", "otlp_proto: not a TracesData message")
        try:
            _walk_proto(data, gather)
        except ValueError as exc:
            return NotOtlp("not_otlp", f"otlp_proto: {exc}")
    return Decoded(list(gather.by_trace.values()), gather.spans, gather.dropped)


class _Gather:
    """Spans of one message, grouped by trace as they are walked."""

    def __init__(self, source: tuple[str, int, int]) -> None:
        self.source = source
        self.by_trace: dict[str, Fragment] = {}
        self.spans = 0
        self.dropped = 0

    def add(self, trace_id: str, span: Span, dropped: int) -> None:
        """Count `span` in its trace's fragment; keep it if the mapping can use it (a
        root or local root; documents, evaluations, kept events; a kept attribute other
        than the span kind of a chain, tool or agent)."""
        fragment = self.by_trace.get(trace_id)
        if fragment is None:
            fragment = self.by_trace[trace_id] = Fragment(trace_id, self.source, [])
        fragment.spans_read += 1
        fragment.dropped += dropped
        fragment.end = max(fragment.end, span.end)
        self.spans += 1
        attrs = span.attrs
        kind = attrs.get("openinference.span.kind", "CHAIN")  # any value type may come
        if (span.root() or span.docs or span.evals or span.events or len(attrs) > 1
                or (isinstance(kind, str) and kind.upper() in _USED_KINDS)):
            fragment.spans.append(span)

    def keep(self, pairs: Iterable[tuple[str, Any]], span: Span,
             value_of: Callable[[Any], Value]) -> None:
        """Put the attributes the mapping reads into `span`; count content dropped.
        `pairs` are (key, raw value): a value is converted (`value_of`) only if kept."""
        attrs = span.attrs
        for key, raw in pairs:
            route = _ROUTES.get(key)
            if route is None:
                route = _route(key)
            kind = route[0]
            if kind is _IGNORE:
                continue
            if kind is _CONTENT:
                self.dropped += 1
            elif kind is _KEEP:
                attrs[key] = value_of(raw)
            elif kind is _ROW:  # a numbered document or evaluation field
                _, rows, index, at, content = route
                read.put_row(span.docs if rows == "docs" else span.evals, index, at,
                             value_of(raw) if at is not None else "")
                self.dropped += content
            else:  # gen_ai.retrieval.documents
                found, dropped = documents(value_of(raw))
                span.docs.extend(found)
                self.dropped += dropped


def _walk_json(document: Any, gather: _Gather) -> None:
    for resource_spans in document.get("resourceSpans") or ():
        resource = read.json_attributes((resource_spans.get("resource") or {}).get("attributes"))
        service, version = read.service_of(resource)
        scopes = (resource_spans.get("scopeSpans")
                  or resource_spans.get("instrumentationLibrarySpans") or ())
        for scope in scopes:
            for raw in scope.get("spans") or ():
                before = gather.dropped
                span = Span(read.json_id(raw.get("spanId"), 16),
                            read.json_id(raw.get("parentSpanId"), 16),
                            read.json_int(raw.get("startTimeUnixNano") or 0, 0, 2**64),
                            read.json_int(raw.get("endTimeUnixNano") or 0, 0, 2**64),
                            service, version, {})
                gather.keep(read.json_pairs(raw.get("attributes")), span, read.json_value)
                for event in raw.get("events") or ():
                    name = event.get("name") or ""
                    if name in EVENTS:
                        kept = Span("", "", 0, 0, None, None, {})
                        gather.keep(read.json_pairs(event.get("attributes")), kept, read.json_value)
                        span.events.append((name, kept.attrs))
                    else:
                        gather.dropped += _content_count(k for k, _ in read.json_pairs(
                            event.get("attributes")))
                trace_id = read.json_id(raw.get("traceId"), 32)
                if len(trace_id) != 32 or len(span.span_id) != 16:
                    raise ValueError("a span without a trace id or span id")
                flags = read.json_int(raw.get("flags") or 0, 0, 2**32)
                span.remote = bool(span.parent) and flags & REMOTE_PARENT == REMOTE_PARENT
                gather.add(trace_id, span, gather.dropped - before)


def _walk_proto(data: TracesData, gather: _Gather) -> None:
    for resource_spans in data.resource_spans:
        resource = read.proto_attributes(resource_spans.resource.attributes)
        service, version = read.service_of(resource)
        for scope in resource_spans.scope_spans:
            for raw in scope.spans:
                if len(raw.trace_id) != 16 or len(raw.span_id) != 8:
                    raise ValueError("a span without a 16-byte trace id or 8-byte span id")
                before = gather.dropped
                span = Span(raw.span_id.hex(), raw.parent_span_id.hex(),
                            raw.start_time_unix_nano, raw.end_time_unix_nano,
                            service, version, {})
                gather.keep(((kv.key, kv.value) for kv in raw.attributes), span, read.proto_value)
                for event in raw.events:
                    if event.name in EVENTS:
                        kept = Span("", "", 0, 0, None, None, {})
                        gather.keep(((kv.key, kv.value) for kv in event.attributes), kept,
                                    read.proto_value)
                        span.events.append((event.name, kept.attrs))
                    else:
                        gather.dropped += _content_count(kv.key for kv in event.attributes)
                span.remote = bool(span.parent) and raw.flags & REMOTE_PARENT == REMOTE_PARENT
                gather.add(raw.trace_id.hex(), span, gather.dropped - before)


def _is_content(key: str) -> bool:
    return (key in _CONTENT_NAMES or key.startswith(_CONTENT_PREFIXES)
            or key.rpartition(".")[2] in _CONTENT_LAST)


def _content_count(keys: Iterable[str]) -> int:
    return sum(1 for key in keys if (_ROUTES.get(key) or _route(key))[0] is _CONTENT)
