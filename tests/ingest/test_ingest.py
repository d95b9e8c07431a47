"""Ingest: every example accounted for, content fields dropped, reason codes stable."""

from __future__ import annotations

import json

import msgspec
import pytest
from conftest import lines
from hypothesis import given, settings
from strategies import traces

from monitor.ingest.contract import Feedback, Label, Trace, to_json
from monitor.ingest.parse import REJECTION_REASONS, Accepted, Rejection, parse
from monitor.ingest.slices import Cap, Slicer, query_length

BAD_REASONS = [
    "not_json", "missing_field", "invalid_value", "non_finite", "reason_required",
    "bad_trace_id", "bad_timestamp", "unknown_schema", "out_of_range", "not_object",
]


def test_bad_examples_are_rejected_with_their_reasons(examples):
    results = [parse(raw) for raw in lines(examples / "bad-traces.jsonl")]
    assert [r.reason for r in results[:10] if isinstance(r, Rejection)] == BAD_REASONS
    assert all(r.reason in REJECTION_REASONS for r in results[:10])
    valid = results[10]
    assert isinstance(valid, Accepted)
    assert valid.content_fields_dropped == 2
    assert b"password" not in to_json(valid.event)


def test_good_examples_are_accepted(examples):
    for kind, name in ((Trace, "traces.jsonl"), (Label, "labels.jsonl"),
                       (Feedback, "feedback.jsonl")):
        for raw in lines(examples / name):
            result = parse(raw, expect=kind)
            assert isinstance(result, Accepted), result
            assert isinstance(result.event, kind)


def test_content_fields_are_dropped_at_any_depth():
    raw = json.dumps({
        "schema": "rag-decision/1", "trace_id": "t1", "ts": "2026-11-29T10:00:00Z",
        "system": {"release": "r", "prompt": "system prompt"}, "decision": "answer",
        "claims": [{"importance": "critical", "verdict": "supported", "text": "claim text"}],
        "messages": [{"role": "user", "content": "hi"}], "answer": "secret answer",
    }).encode()
    result = parse(raw)
    assert isinstance(result, Accepted)
    assert result.content_fields_dropped == 4
    assert b"secret" not in to_json(result.event)


def test_rejected_payload_has_no_content():
    raw = (b'{"schema":"rag-decision/1","trace_id":"t 1","ts":"2026-11-29T10:00:00Z",'
           b'"system":{"release":"r"},"decision":"answer","question":"my password is hunter2"}')
    result = parse(raw)
    assert isinstance(result, Rejection) and result.reason == "bad_trace_id"
    assert b"hunter2" not in result.payload and result.content_fields_dropped == 1
    broken = b'{"trace_id": "x", "question": "my password is hunter2", '
    result = parse(broken)
    assert result.reason == "not_json" and b"hunter2" not in result.payload


def test_escaped_content_keys_are_dropped_too():
    raw = (b'{"schema":"rag-decision/1","trace_id":"t1","ts":"2026-11-29T10:00:00Z",'
           b'"system":{"release":"r"},"decision":"answer","\\u0071uestion":"hunter2"}')
    result = parse(raw)
    assert isinstance(result, Accepted) and result.content_fields_dropped == 1


@pytest.mark.parametrize(("raw", "reason"), ids=lambda v: str(v)[:30], argvalues=[
    (b"x" * 300_000, "too_large"),
    (b'{"schema":"rag-decision/1","trace_id":"t","ts":"2026-11-29T10:00:00",'
     b'"system":{"release":"r"},"decision":"answer"}', "bad_timestamp"),
    (b'{"trace_id":"t","ts":"2026-11-29T10:00:00Z","system":{"release":"r"},'
     b'"decision":"answer"}', "missing_field"),
    (b'{"schema":"rag-decision/1","trace_id":"t","ts":"2026-11-29T10:00:00Z",'
     b'"system":{"release":"r"},"decision":"answer","signals":{"top_score":1e999}}',
     "non_finite"),
    (b'{"schema":"rag-decision/1","trace_id":"t","ts":"2026-11-29T10:00:00Z",'
     b'"system":{"release":"r"},"decision":"answer","signals":{"top_score":"high"}}',
     "wrong_type"),
    (b'{"schema":"rag-decision/1","trace_id":"t","ts":"2026-11-29T10:00:00Z",'
     b'"system":{"release":"r"},"decision":"answer","slice":{"language":"e\\nn"}}',
     "bad_slice_value"),
    (b'{"schema":"rag-decision/1","trace_id":"t","ts":"2026-11-29T10:00:00Z",'
     b'"system":{"release":"r"},"decision":"answer","evals":{"faithfulness":1.5}}',
     "out_of_range"),
    (b'{"schema":"rag-decision/1","trace_id":"t\\n","ts":"2026-11-29T10:00:00Z",'
     b'"system":{"release":"r"},"decision":"answer"}', "bad_trace_id"),
    (b'{"schema":"rag-decision/1","trace_id":"' + b"t" * 129 + b'","ts":"2026-11-29T10:00:00Z",'
     b'"system":{"release":"r"},"decision":"answer"}', "bad_trace_id"),
    (b'{"schema":"rag-label/1","trace_id":"t/1","ts":"2026-11-29T10:00:00Z",'
     b'"source":"human"}', "bad_trace_id"),
    (b'{"schema":"rag-decision/1","trace_id":"t","ts":"2026-11-29T10:00:00Z",'
     b'"system":{"release":"r"},"decision":"answer","otel":{"span_id":"00F067AA0BA902B7"}}',
     "out_of_range"),
    (b'{"a":' * 50_000, "not_json"),
    (b'[' * 100_000, "not_json"),
    (b'\xff\xfe', "bad_encoding"),
    (b'"just a string"', "not_object"),
    (b'{"schema":["rag-decision/1"],"trace_id":"t","ts":"2026-11-29T10:00:00Z",'
     b'"system":{"release":"r"},"decision":"answer","text":"x"}', "unknown_schema"),
])
def test_reasons(raw, reason):
    result = parse(raw)
    assert isinstance(result, Rejection)
    assert result.reason == reason, result


def test_topic_expects_its_schema(examples):
    label = lines(examples / "labels.jsonl")[0]
    result = parse(label, expect=Trace)
    assert isinstance(result, Rejection) and result.reason == "unexpected_schema"


@given(traces())
@settings(max_examples=300)
def test_parse_serialise_parse_is_identity(trace):
    first = parse(json.dumps(trace).encode())
    assert isinstance(first, Accepted), first
    second = parse(to_json(first.event))
    assert isinstance(second, Accepted)
    assert second.event == first.event
    assert msgspec.json.decode(to_json(second.event))["schema"] == "rag-decision/1"


def test_slicer_caps_values_and_derives_query_length(examples):
    slicer = Slicer(("language", "query_length"), values_max=2, releases_max=1)
    trace = parse(lines(examples / "traces.jsonl")[0]).event
    assert slicer.keys(trace) == ("2026.11.3", (("language", "ru"), ("query_length", "long")))
    cap = Cap(2)
    assert [cap(v) for v in ("a", "b", "c", "a", "d")] == ["a", "b", "other", "a", "other"]
    assert cap.overflowed == 2
    assert [query_length(n) for n in (0, 5, 6, 15, 16)] == [
        "short", "short", "medium", "medium", "long"]


def test_unknown_fields_are_ignored_at_every_level():
    raw = (b'{"schema":"rag-decision/1","trace_id":"t1","ts":"2026-11-29T10:00:00Z",'
           b'"system":{"release":"r","region":"eu"},"decision":"answer","extra":{"x":1},'
           b'"claims":[{"importance":"critical","verdict":"supported","score2":0.5}]}')
    result = parse(raw)
    assert isinstance(result, Accepted) and result.content_fields_dropped == 0
    assert result.event.claims[0].verdict == "supported"


def test_content_key_in_a_free_form_map_is_dropped():
    raw = (b'{"schema":"rag-decision/1","trace_id":"t1","ts":"2026-11-29T10:00:00Z",'
           b'"system":{"release":"r"},"decision":"answer","slice":{"question":"pw hunter2"}}')
    result = parse(raw)
    assert isinstance(result, Accepted) and result.content_fields_dropped == 1
    assert result.event.slice == {}


def test_escaped_control_character_in_a_slice_value_is_rejected():
    raw = (b'{"schema":"rag-decision/1","trace_id":"t1","ts":"2026-11-29T10:00:00Z",'
           b'"system":{"release":"r"},"decision":"answer","slice":{"language":"e\\u0007n"}}')
    assert parse(raw).reason == "bad_slice_value"
    ok = raw.replace(b"e\\u0007n", b"\\u00e9n")  # an escaped, printable character is fine
    assert isinstance(parse(ok), Accepted)


def test_reason_code_format():
    base = (b'{"schema":"rag-decision/1","trace_id":"t1","ts":"2026-11-29T10:00:00Z",'
            b'"system":{"release":"r"},"decision":"abstain","reason":"%s"}')
    assert isinstance(parse(base % b"tenant_policy_2"), Accepted)
    assert parse(base % b"Bad Code").reason == "out_of_range"


def test_lone_surrogate_escapes_are_a_rejection_not_an_exception():
    def trace(**extra: object) -> bytes:
        event = {"schema": "rag-decision/1", "trace_id": "s1", "ts": "2026-11-29T10:00:00Z",
                 "system": {"release": "r1"}, "decision": "answer", **extra}
        return json.dumps(event).encode()  # ASCII: a lone surrogate stays an escape

    in_label = parse(trace(slice={"language": "d\ud800"}))
    assert isinstance(in_label, Rejection) and in_label.reason == "bad_unicode"
    assert b"\\ud800" in in_label.payload  # the dead letter keeps it readable, escaped
    in_key = parse(trace(slice={"\udfff": "x"}))
    assert isinstance(in_key, Rejection) and in_key.reason == "bad_unicode"
    in_content = parse(trace(question="\ud800 what is my password?"))
    assert isinstance(in_content, Accepted) and in_content.content_fields_dropped == 1
    assert isinstance(parse(trace(note="\ud83d")), Accepted)  # an ignored field
    assert isinstance(parse(json.dumps({"schema": "rag-label/1", "trace_id": "s1",
                                        "ts": "2026-11-29T10:00:00Z", "source": "human",
                                        "extra": "\ud800"}).encode()), Accepted)


@pytest.mark.parametrize("raw", [
    '{"schema":"rag-decision/1","question":"MARKER-41"'.encode("utf-16"),  # cut UTF-16
    '{"schema":"rag-decision/1","question":"MARKER-41"'.encode("utf-32"),
    b'{"schema":"rag-decision/1","question" "MARKER-41"}',  # a key without its colon
    b'{"schema":"rag-decision/1","qu\\u0065stion":"MARKER-41",',  # escaped key, cut
    b"\xef\xbb\xbf" + b'{"question":"MARKER-41" ',  # BOM, cut
    b'["MARKER-41", ' + b"1," * 10,  # not an object, cut
    b'{"question":"MARKER-41","pad":"' + b"x" * 300_000 + b'"}',  # too large
])
def test_unparsed_dead_letters_hold_no_bytes_of_the_message(raw):
    result = parse(raw)
    assert isinstance(result, Rejection)
    assert b"MARKER" not in result.payload
    summary = json.loads(result.payload)["unparsed"]
    assert summary["bytes"] == len(raw) and len(summary["sha256"]) == 64


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32",
                                      "utf-32-le", "utf-32-be"])
def test_json_not_in_utf8_is_refused_without_its_content(encoding):
    """RFC 8259: JSON between systems is UTF-8. Python's json would read UTF-16/32; ragmon
    refuses it (bad_encoding), and the dead letter holds only its size and hash."""
    event = {"schema": "rag-decision/1", "trace_id": "u16", "ts": "2026-11-29T10:00:00Z",
             "system": {"release": "r1"}, "decision": "answer", "question": "MARKER-42"}
    result = parse(json.dumps(event).encode(encoding))
    assert isinstance(result, Rejection) and result.reason == "bad_encoding"
    assert b"MARKER" not in result.payload and b"unparsed" in result.payload


def test_a_utf8_byte_order_mark_is_ignored_and_encoded_surrogates_refused():
    event = {"schema": "rag-decision/1", "trace_id": "bom", "ts": "2026-11-29T10:00:00Z",
             "system": {"release": "r1"}, "decision": "answer"}
    assert isinstance(parse(b"\xef\xbb\xbf" + json.dumps(event).encode()), Accepted)
    surrogate = json.dumps({**event, "question": "q"}).encode().replace(b'"q"', b'"\xed\xa0\x80"')
    result = parse(surrogate)
    assert isinstance(result, Rejection) and result.reason == "bad_encoding"
