"""An attribute the mapping reads may come with any value type an OTLP producer can write
(a string, a number, a bool, an array, a kvlist, bytes, nothing): the intake then assembles
or rejects the trace, counted, and never stops. Before session 48 an array-valued
`openinference.span.kind` raised TypeError while decoding and an array-valued
`gen_ai.operation.name` while assembling: the worker retried that batch forever
(`wiring.retrying`) and, holding the batch lock, folded nothing else meanwhile."""

from __future__ import annotations

import json
import math

import msgspec
import pytest
from google.protobuf.json_format import MessageToJson
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, TracesData

from monitor.ingest.otlp import _KEPT, WIRE, NotOtlp, decode
from monitor.ingest.otlp_values import ARRAY_DEPTH
from monitor.ingest.spans import SpanIntake
from monitor.settings import load

# Every attribute read by name (`otlp._KEPT`, the rag.* the contract names, the numbered
# documents and evaluations): each is given every kind of value below.
KEYS = sorted(_KEPT | {
    "rag.decision", "rag.reason", "rag.release", "rag.trace_id", "rag.app", "rag.model",
    "rag.signals.top_score", "rag.slice.language", "rag.usage.input_tokens",
    "rag.evals.faithfulness", "rag.requirements.expected", "rag.checks.citation",
    "retrieval.documents.0.document.id", "retrieval.documents.0.document.score",
    "evaluations.0.evaluation.name", "evaluations.0.evaluation.score",
    "gen_ai.retrieval.documents",
})
VALUES = {
    "string": AnyValue(string_value="LLM"), "operation": AnyValue(string_value="chat"),
    "empty string": AnyValue(string_value=""), "int": AnyValue(int_value=-7),
    "double": AnyValue(double_value=0.5), "nan": AnyValue(double_value=math.nan),
    "bool": AnyValue(bool_value=True),
    "array": AnyValue(array_value=ArrayValue(values=[AnyValue(string_value="LLM")])),
    "mixed array": AnyValue(array_value=ArrayValue(values=[AnyValue(int_value=1),
                                                           AnyValue(string_value="a")])),
    "empty array": AnyValue(array_value=ArrayValue()),
    "kvlist": AnyValue(kvlist_value=KeyValueList(values=[
        KeyValue(key="k", value=AnyValue(string_value="v"))])),
    "bytes": AnyValue(bytes_value=b"\x00\xff"), "nothing": AnyValue(),
}
CASES = [(key, kind) for key in KEYS for kind in VALUES]


def _trace(number: int, key: str, value: AnyValue) -> list[Span]:
    """A decision trace with `key` = `value` on its gate (root) span, on a child span
    where it is the only attribute, and on an evaluation event of a retriever span."""
    trace_id = number.to_bytes(16, "big")
    gate = Span(trace_id=trace_id, span_id=b"\x01" * 8, name="gate",
                start_time_unix_nano=10**18, end_time_unix_nano=10**18 + 9)
    gate.attributes.extend([KeyValue(key="rag.decision", value=AnyValue(string_value="answer")),
                            KeyValue(key="rag.reason", value=AnyValue(string_value="ok")),
                            KeyValue(key="rag.release", value=AnyValue(string_value="r1")),
                            KeyValue(key=key, value=value)])
    alone = Span(trace_id=trace_id, span_id=b"\x02" * 8, parent_span_id=b"\x01" * 8,
                 start_time_unix_nano=10**18 + 1, end_time_unix_nano=10**18 + 2)
    alone.attributes.append(KeyValue(key=key, value=value))
    retriever = Span(trace_id=trace_id, span_id=b"\x03" * 8, parent_span_id=b"\x01" * 8,
                     start_time_unix_nano=10**18 + 3, end_time_unix_nano=10**18 + 4)
    retriever.attributes.extend([
        KeyValue(key="openinference.span.kind", value=AnyValue(string_value="RETRIEVER")),
        KeyValue(key="retrieval.documents.0.document.score", value=AnyValue(double_value=0.8))])
    event = retriever.events.add(name="gen_ai.evaluation.result")
    event.attributes.extend([
        KeyValue(key="gen_ai.evaluation.name", value=AnyValue(string_value="faithfulness")),
        KeyValue(key=key, value=value)])
    return [gate, alone, retriever]


def _messages(encoding: str) -> list[bytes]:
    spans = [span for number, (key, kind) in enumerate(CASES, 1)
             for span in _trace(number, key, VALUES[kind])]
    out = []
    for start in range(0, len(spans), 200):  # the exporter's default batch
        data = TracesData(resource_spans=[ResourceSpans(
            scope_spans=[ScopeSpans(spans=spans[start:start + 200])])])
        out.append(data.SerializeToString() if encoding == "otlp_proto"
                   else MessageToJson(data, indent=None).encode())
    return out


@pytest.mark.parametrize("encoding", ["otlp_proto", "otlp_json"])
def test_any_value_type_of_a_read_attribute_is_assembled_or_rejected(encoding):
    intake = SpanIntake(load(None))
    taken = []
    for offset, raw in enumerate(_messages(encoding)):
        found = intake.read(raw, ("otlp_spans", 0, offset))
        assert not isinstance(found, NotOtlp), found
        if encoding == "otlp_proto" and WIRE is not None:  # the reference reads the same
            reference = decode(raw, ("otlp_spans", 0, offset), wire=False)
            assert msgspec.msgpack.encode(reference) == msgspec.msgpack.encode(found)  # NaN
        intake.merge(found.fragments)
        taken += intake.take()
    taken += intake.take(final=True)
    counts = intake.buffer.counts
    assert len(taken) == len(CASES)
    assert counts["traces_assembled"] + counts["traces_rejected"] == len(CASES)
    assert counts["spans_read"] == 3 * len(CASES)
    # The values that are no attribute value of the contract are refused with its reasons;
    # a trace whose read attributes all have the expected types is assembled.
    by_case = dict(zip(CASES, sorted(taken, key=lambda a: int(a.trace_id, 16)), strict=True))
    assert by_case[("gen_ai.operation.name", "array")].raw is not None
    assert by_case[("openinference.span.kind", "array")].raw is not None
    assert by_case[("rag.decision", "array")].rejection is not None


def test_a_failure_while_reading_or_assembling_sets_apart_that_message_or_trace_only(
        monkeypatch):
    """A bug met by one message or one trace (provoked here: no input of the test above
    reaches one any more) refuses it alone as `worker_error`; the rest assembles."""
    import monitor.ingest.otlp as otlp
    import monitor.ingest.spans as spans

    raws = _messages("otlp_proto")
    in_first = {int(f.trace_id, 16) for f in decode(raws[0], ("s", 0, 0)).fragments}
    real_add, real_assemble = otlp._Gather.add, spans.assemble
    last = len(CASES)

    def add_failing_in_the_first_message(gather, trace_id, span, dropped):
        if gather.source[2] == 0:
            raise KeyError("the text of an error, which could quote input")
        real_add(gather, trace_id, span, dropped)

    def assemble_failing_on_the_last_trace(trace_id, found):
        if int(trace_id, 16) == last:
            raise ZeroDivisionError
        return real_assemble(trace_id, found)

    monkeypatch.setattr(otlp._Gather, "add", add_failing_in_the_first_message)
    monkeypatch.setattr(spans, "assemble", assemble_failing_on_the_last_trace)
    intake = SpanIntake(load(None))
    refused = []
    for offset, raw in enumerate(raws):
        found = intake.read(raw, ("otlp_spans", 0, offset))
        if isinstance(found, NotOtlp):
            refused.append((offset, found))
        else:
            intake.merge(found.fragments)
    taken = intake.take(final=True)
    ((offset, message),) = refused
    assert offset == 0 and message.reason == "worker_error"
    assert message.detail.startswith("KeyError while reading the message")
    assert "quote" not in message.detail  # the error's type, never its text
    assert intake.messages["rejected"] == 1
    # The first message's traces are lost with it only in part: those it split with the
    # second message come as incomplete from the spans of the second.
    assert {int(a.trace_id, 16) for a in taken} >= set(range(1, last + 1)) - in_first
    failed = [a for a in taken if a.rejection is not None and a.rejection.reason == "worker_error"]
    assert [int(a.trace_id, 16) for a in failed] == [last]
    assert failed[0].raw is None and failed[0].rejection.payload == b""
    assert intake.buffer.counts["traces_rejected"] == sum(a.rejection is not None for a in taken)


def _json_span(**fields: object) -> bytes:
    span = {"traceId": "a" * 32, "spanId": "b" * 16, "startTimeUnixNano": "1000",
            "endTimeUnixNano": "2000", "attributes": [
                {"key": "rag.decision", "value": {"stringValue": "answer"}},
                {"key": "rag.release", "value": {"stringValue": "r1"}}]}
    span.update(fields)
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}).encode()


@pytest.mark.parametrize("fields", [
    {"startTimeUnixNano": "9" * 30}, {"endTimeUnixNano": str(2**64)},
    {"startTimeUnixNano": "-1"},
    {"attributes": [{"key": "rag.signals.retrieved", "value": {"intValue": str(2**63)}}]},
    {"attributes": [{"key": "rag.signals.retrieved", "value": {"intValue": -(2**63) - 1}}]},
])
def test_otlp_json_integers_beyond_their_fields_range_are_not_otlp(fields):
    """Beyond int64 (values) or uint64 (times), as protobuf's JSON mapping refuses them:
    before session 48 they were read, and a spans record or a checkpoint could not hold
    them (OverflowError in the worker, retried forever)."""
    found = decode(_json_span(**fields), ("otlp_spans", 0, 1))
    assert isinstance(found, NotOtlp) and found.reason == "not_otlp", found


def test_the_limits_of_the_fields_ranges_are_read_and_held():
    raw = _json_span(endTimeUnixNano=str(2**64 - 1), attributes=[
        {"key": "rag.decision", "value": {"stringValue": "answer"}},
        {"key": "rag.signals.low", "value": {"intValue": str(-(2**63))}},
        {"key": "gen_ai.retrieval.documents",
         "value": {"stringValue": '[{"id": "d", "score": ' + "9" * 400 + "}]"}}])
    found = decode(raw, ("otlp_spans", 0, 1))
    assert not isinstance(found, NotOtlp), found
    intake = SpanIntake(load(None))
    intake.merge(found.fragments)
    msgspec.msgpack.encode(found.fragments)  # a spans record holds them
    (taken,) = intake.take(final=True)
    intake.buffer.to_bytes()
    assert taken.rejection is not None or taken.raw is not None
    (span,) = found.fragments[0].spans
    assert span.docs == [("d", None)]  # a score beyond a float's range is no score


@pytest.mark.parametrize("encoding", ["otlp_proto", "otlp_json"])
def test_arrays_nested_as_deep_as_protobuf_reads_them_and_no_deeper(encoding):
    """Both encodings read arrays in arrays to `ARRAY_DEPTH` and refuse one more level
    as not OTLP (in OTLP/JSON a deeper value raised RecursionError before session 48)."""
    read = []
    for depth in (ARRAY_DEPTH, ARRAY_DEPTH + 1, 5000):
        value = AnyValue(string_value="x")
        if encoding == "otlp_json" and depth == 5000:  # beyond what protobuf can build
            nested = '{"arrayValue": {"values": [' * depth + '{"stringValue": "x"}' + \
                     "]}}" * depth
            raw = _json_span().replace(b'"attributes": [', b'"attributes": [{"key": '
                                       b'"rag.x", "value": ' + nested.encode() + b"}, ")
        elif depth == 5000:
            continue
        else:
            for _ in range(depth):
                value = AnyValue(array_value=ArrayValue(values=[value]))
            (span,) = _trace(1, "rag.x", value)[:1]
            data = TracesData(resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(
                spans=[span])])])
            raw = (data.SerializeToString() if encoding == "otlp_proto"
                   else MessageToJson(data, indent=None).encode())
        found = decode(raw, ("otlp_spans", 0, depth))
        read.append(getattr(found, "reason", "read"))
    assert read[:2] == ["read", "not_otlp"] and set(read[2:]) <= {"not_otlp"}
