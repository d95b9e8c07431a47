"""The compiled reading of `otlp_proto` messages (`monitor/ingest/_otlp_wire.pyx`) gives
what the reference gives (protobuf's own parse and a walk of its objects,
`decode(..., wire=False)`): the same fragments, counts and refusals, on messages of real
instrumentation, on every kind of value and event, and on mutants of them."""

from __future__ import annotations

import random
import struct

import pytest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, TracesData

from monitor.ingest.otlp import WIRE, Decoded, NotOtlp, decode
from tests.otel_apps import genai_app, langchain_app, messages

pytestmark = pytest.mark.skipif(WIRE is None, reason="the OTLP wire scanner is not built")
SOURCE = ("otlp_spans", 0, 3)


def both(raw: bytes) -> Decoded | NotOtlp:
    compiled, reference = decode(raw, SOURCE, wire=True), decode(raw, SOURCE, wire=False)
    assert compiled == reference
    return compiled


@pytest.fixture(scope="module")
def instrumented() -> list[bytes]:
    spans = genai_app(12)[0] + langchain_app(8)[0]
    return messages(spans, "otlp_proto", 25)


def test_messages_of_real_instrumentation_read_the_same(instrumented):
    for raw in instrumented:
        found = both(raw)
        assert isinstance(found, Decoded) and found.fragments and found.content_fields_dropped


def _kv(key: str, value: AnyValue) -> KeyValue:
    return KeyValue(key=key, value=value)


def _message(*spans: Span, resource: list[KeyValue] | None = None) -> TracesData:
    resource_spans = ResourceSpans(scope_spans=[ScopeSpans(spans=list(spans))])
    resource_spans.resource.attributes.extend(resource or [])
    return TracesData(resource_spans=[resource_spans])


def _span(span_id: bytes, parent: bytes = b"", **fields) -> Span:
    return Span(trace_id=b"\x01" * 16, span_id=span_id, parent_span_id=parent,
                start_time_unix_nano=10**18, end_time_unix_nano=10**18 + 5, **fields)


def test_every_kind_of_value_and_event_reads_the_same():
    strings = AnyValue(array_value=ArrayValue(values=[AnyValue(string_value="a"),
                                                      AnyValue(int_value=-3)]))
    nested = AnyValue(array_value=ArrayValue(values=[strings, AnyValue(bool_value=True)]))
    attributes = [
        _kv("rag.decision", AnyValue(string_value="answer")),
        _kv("rag.signals.top_score", AnyValue(double_value=0.75)),
        _kv("rag.signals.retrieved", AnyValue(int_value=-(2**63))),
        _kv("rag.slice.language", AnyValue(string_value="dé")),
        _kv("rag.partial", AnyValue(bool_value=False)),
        _kv("rag.sources", strings), _kv("rag.nested", nested),
        _kv("rag.kvlist", AnyValue(kvlist_value={"values": [_kv("x", AnyValue(int_value=1))]})),
        _kv("rag.bytes", AnyValue(bytes_value=b"\x00\xff")), _kv("rag.empty", AnyValue()),
        _kv("openinference.span.kind", AnyValue(string_value="RETRIEVER")),
        _kv("retrieval.documents.1.document.score", AnyValue(int_value=2)),
        _kv("retrieval.documents.0.document.id", AnyValue(string_value="d0")),
        _kv("retrieval.documents.0.document.content", AnyValue(string_value="secret")),
        _kv("retrieval.documents.1.document.id", AnyValue(double_value=1.5)),
        _kv("retrieval.documents.5000.document.id", AnyValue(string_value="far")),
        _kv("evaluations.0.evaluation.score", AnyValue(double_value=0.2)),
        _kv("gen_ai.retrieval.documents", AnyValue(
            string_value='[{"id": "g1", "score": 0.5, "content": "x"}, 3, {"id": 7}]')),
        _kv("input.value", AnyValue(string_value="the question")),
        _kv("llm.input_messages.0.message.content", AnyValue(string_value="hi")),
        _kv("some.other", AnyValue(string_value="ignored")),
    ]
    events = [
        Span.Event(name="gen_ai.evaluation.result", attributes=[
            _kv("gen_ai.evaluation.name", AnyValue(string_value="faithfulness")),
            _kv("gen_ai.evaluation.score.value", AnyValue(double_value=0.9)),
            _kv("retrieval.documents.0.document.content", AnyValue(string_value="c")),
            _kv("output.value", AnyValue(string_value="an answer"))]),
        Span.Event(name="exception", attributes=[
            _kv("exception.message", AnyValue(string_value="boom")),
            _kv("input.value", AnyValue(string_value="q"))]),
        Span.Event(name="rag.claim", attributes=[
            _kv("rag.claim.verdict", AnyValue(string_value="supported"))]),
    ]
    root = _span(b"\x02" * 8, attributes=attributes, events=events, name="gate")
    child = _span(b"\x03" * 8, parent=b"\x02" * 8,
                  attributes=[_kv("openinference.span.kind", AnyValue(string_value="CHAIN"))])
    resource = [_kv("service.name", AnyValue(string_value="svc")),
                _kv("service.version", AnyValue(int_value=3)),
                _kv("service.name", AnyValue(string_value="svc-2"))]
    found = both(_message(root, child, resource=resource).SerializeToString())
    assert isinstance(found, Decoded)
    (fragment,) = found.fragments
    assert fragment.spans[0].service == "svc-2" and fragment.spans[0].version is None
    assert fragment.spans[0].docs[:2] == [("d0", None), (None, 2.0)]
    assert [name for name, _ in fragment.spans[0].events] == ["gen_ai.evaluation.result",
                                                             "rag.claim"]


def _append(message: TracesData, raw: bytes) -> bytes:
    """Bytes appended inside the first span (its length prefix grown to match)."""
    span = message.resource_spans[0].scope_spans[0].spans[0].SerializeToString() + raw
    scope = b"\x12" + _varint(len(span)) + span
    resource_spans = b"\x12" + _varint(len(scope)) + scope
    return b"\x0a" + _varint(len(resource_spans)) + resource_spans


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out + bytes([value]))


@pytest.mark.parametrize("extra,accepted", [
    (b"\x28\x07", True),                                # name (a string) as a varint: unknown
    (b"\xfb\x06\x08\x01\xfc\x06", True),                # a group of an unknown field 111
    (b"\x2a\x02\xff\xfe", False),                       # a name that is not UTF-8
    (b"\x2a\x03\xed\xa0\x80", False),                   # a surrogate in UTF-8
    (b"\x2a\x02\xc0\x80", False),                       # an overlong form
    (b"\x7a\x03\x12\x01\xff", False),                   # a status message not UTF-8
    (b"\x6a\x02\x0a\x09", False),                       # a link cut short
    (b"\x39" + struct.pack("<Q", 7), True),             # start time given again
    (b"\x0c", False),                                   # an end-group tag alone
    (b"\x0a\x02\x01\x02", False),                       # a trace id of 2 bytes
])
def test_unread_parts_are_checked_as_protobuf_checks_them(extra, accepted):
    message = _message(_span(b"\x02" * 8))
    found = both(_append(message, extra))
    assert isinstance(found, Decoded) == accepted


def test_mutants_read_the_same(instrumented):
    rng = random.Random(5)
    outcomes = {True: 0, False: 0}
    for _ in range(4000):
        raw = bytearray(rng.choice(instrumented))
        where = rng.randrange(len(raw))
        match rng.randrange(3):
            case 0:
                raw[where] = rng.randrange(256)
            case 1:
                del raw[where:]
            case _:
                raw[where:where] = rng.randbytes(rng.randint(1, 4))
        outcomes[isinstance(both(bytes(raw)), Decoded)] += 1
    assert min(outcomes.values()) > 200  # both fates well represented
