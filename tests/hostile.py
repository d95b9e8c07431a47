"""A corpus of hostile decision messages, written here from the categories of RFC 8259's
edge cases and of a public JSON parsing test suite (JSONTestSuite's y_/n_/i_ families:
structure, numbers, strings and escapes, encodings, nesting), applied to a valid trace.

`corpus()` returns (name, bytes) pairs; every one must become a valid event or a
rejection with a reason, the same on both admission paths (tests/ingest/test_hostile.py). It
ends with `public()`: the 340 files of JSONTestSuite itself (tests/data, MIT), each as a
whole message and as the value of a content field of a valid trace.
Content markers (`MARKER`) sit in a content field of many cases: they must never reach a
dead letter, a metric or a state record.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

MARKER = "QWERTYSECRETMARKER"

BASE: dict[str, Any] = {
    "schema": "rag-decision/1", "trace_id": "hostile-0", "ts": "2026-11-29T10:00:00Z",
    "system": {"release": "2026.11.3", "model": "m"}, "slice": {"language": "en"},
    "signals": {"top_score": 0.7}, "decision": "answer",
    "question": f"what is the {MARKER}?", "answer": f"the {MARKER} is here",
}


def _doc(i: int, **changes: Any) -> dict[str, Any]:
    doc = {**BASE, "trace_id": f"hostile-{i}", **changes}
    return {k: v for k, v in doc.items() if v is not _DROP}


_DROP = object()


def _dumps(doc: Any, **kw: Any) -> bytes:
    return json.dumps(doc, **kw).encode("utf-8", "surrogatepass")


def corpus() -> list[tuple[str, bytes]]:
    cases: list[tuple[str, bytes]] = []
    good = _dumps(_doc(0))
    add = cases.append
    # Structure (n_structure_*, i_structure_*): empty, whitespace, truncation, garbage.
    for name, raw in (("empty", b""), ("space", b" "), ("whitespace", b" \t\r\n "),
                      ("nul", b"\x00"), ("nuls", b"\x00" * 64), ("null", b"null"),
                      ("true", b"true"), ("number", b"1"), ("string", b'"x"'),
                      ("array", b"[]"), ("array of trace", b"[" + good + b"]"),
                      ("object", b"{}"), ("two objects", good + good),
                      ("trailing comma", good[:-1] + b",}"), ("comment", b"/*c*/" + good),
                      ("single quotes", good.replace(b'"', b"'")),
                      ("unclosed", good[:-1]), ("only open", b"{"), ("only close", b"}"),
                      ("trailing garbage", good + b"x"), ("trailing nul", good + b"\x00"),
                      ("leading nul", b"\x00" + good), ("bare key", b'{schema:"x"}'),
                      ("missing colon", good.replace(b'"question":', b'"question" ', 1)),
                      ("missing comma", good.replace(b', "answer"', b' "answer"', 1)),
                      ("colon only", b":"), ("lone brackets", b"[{]}"),
                      ("keyless", b'{"":1}'), ("uncut tail", good + b" \n\t "),
                      ("crlf", good.replace(b", ", b",\r\n"))):
        add((f"structure: {name}", raw))
    for cut in range(0, len(good), max(1, len(good) // 40)):
        add((f"structure: truncated at {cut}", good[:cut]))
    # Numbers (n_number_*, i_number_*).
    for i, literal in enumerate(("NaN", "-NaN", "Infinity", "-Infinity", "1e400", "-1e400",
                                 "01", "-01", "1.", ".5", "+1", "0x10", "1e", "1e+",
                                 "-", "--1", "1_0", "0.0000000000000000000001", "-0",
                                 "-0.0", "1E308", "4.9e-324", "2.5e-324", "1" * 5000,
                                 "-" + "9" * 5000, "1." + "0" * 5000, "1e" + "9" * 30,
                                 "123456789012345678901234567890", "true", "null", '"0.5"')):
        add((f"number: top_score {literal[:20]}", _dumps(_doc(i)).replace(
            b'"top_score": 0.7', b'"top_score": ' + literal.encode(), 1)))
        add((f"number: query_tokens {literal[:20]}", _dumps(_doc(i)).replace(
            b'"decision"', b'"query_tokens": ' + literal.encode() + b', "decision"', 1)))
    # Strings and escapes (n_string_*, y_string_*, i_string_*), in a used field (release),
    # an id, a slice value, a content field and an ignored field.
    escapes = ("\\ud800", "\\udfff", "\\ud83d", "\\udc00\\ud800", "\\ud83d\\ude00",
               "\\u0000", "\\u001f", "\\u007f", "\\uffff", "\\ufeff", "\\ufffe",
               "\\u00e9", "\\/", "\\\\", '\\"', "\\b\\f\\n\\r\\t", "\\x41", "\\u12",
               "\\u", "\\a", "\\'", "\\U0001F600", "\\uD800\\uD800", "\\uDBFF\\uDFFF")
    for i, esc in enumerate(escapes):
        for field, template in (("release", b'"release": "r%s"'),
                                ("trace_id", b'"trace_id": "h%s"'),
                                ("slice value", b'"language": "e%s"'),
                                ("content", b'"question": "q%s ' + MARKER.encode() + b'"'),
                                ("ignored", b'"note": "n%s"')):
            doc = _doc(100 + i, note="n")
            raw = _dumps(doc)
            target = {"release": b'"release": "2026.11.3"',
                      "trace_id": b'"trace_id": "hostile-%d"' % (100 + i),
                      "slice value": b'"language": "en"',
                      "content": b'"question": "what is the ' + MARKER.encode() + b'?"',
                      "ignored": b'"note": "n"'}[field]
            add((f"escape {esc} in {field}", raw.replace(target, template % esc.encode(), 1)))
    for i, text in enumerate(("\x00", "\x1f", "\x7f", "\u2028", "\ufeff", "\U0001f600", "é",
                              " " * 65, "", "x" * 65, "x" * 10_000)):
        add((f"raw string {i} in release", _dumps(_doc(200 + i, system={"release": text}),
                                                  ensure_ascii=False)))
        add((f"raw string {i} in slice", _dumps(_doc(220 + i, slice={"language": text}),
                                                ensure_ascii=False)))
    # Encodings (n_string_invalid_utf8*, i_string_UTF-16*, y_string_utf8, BOMs).
    for name, raw in (("utf-8 bom", b"\xef\xbb\xbf" + good),
                      ("utf-16le bom", b"\xff\xfe" + good.decode().encode("utf-16-le")),
                      ("utf-16be bom", b"\xfe\xff" + good.decode().encode("utf-16-be")),
                      ("utf-16le", good.decode().encode("utf-16-le")),
                      ("utf-16be", good.decode().encode("utf-16-be")),
                      ("utf-32le", good.decode().encode("utf-32-le")),
                      ("utf-32be", good.decode().encode("utf-32-be")),
                      ("utf-32 bom", good.decode().encode("utf-32")),
                      ("latin-1", _dumps(_doc(300, system={"release": "caf\xe9"}),
                                         ensure_ascii=False).decode().encode("latin-1")),
                      ("cp1252 quote", good.replace(b'"en"', b'"\x93en\x94"'))):
        add((f"encoding: {name}", raw))
    invalid_utf8 = (b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80", b"\xf0\x80\x80\x80",
                    b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xf4\x90\x80\x80", b"\xf8\x88\x80\x80\x80",
                    b"\xfc\x84\x80\x80\x80\x80", b"\x80", b"\xbf", b"\xc3", b"\xe2\x82",
                    b"\xf0\x9f\x98", b"\xfe", b"\xff", b"\xc3\x28", b"\xa0\xa1")
    for bad in invalid_utf8:
        add((f"invalid utf-8 {bad.hex()} in release",
             good.replace(b'"2026.11.3"', b'"2026' + bad + b'"', 1)))
        add((f"invalid utf-8 {bad.hex()} in content",
             good.replace(MARKER.encode(), MARKER.encode() + bad, 1)))
        add((f"invalid utf-8 {bad.hex()} outside strings", good[:-1] + bad + b"}"))
    # Nesting (n_structure_100000_opening_arrays, i_structure_500_nested_arrays), at the
    # top, inside a content field, an ignored field, a free-form map and a slice.
    for depth in (10, 100, 500, 1_000, 10_000, 100_000):
        add((f"nesting {depth} at top", b"[" * depth + b"]" * depth))
        add((f"nesting {depth} unclosed", b"[" * depth))
        add((f"nesting {depth} objects", b'{"a":' * depth + b"1" + b"}" * depth))
        deep = b"[" * depth + b'"' + MARKER.encode() + b'"' + b"]" * depth
        for field, anchor in (("content", b'"question": '), ("ignored", b'"note": '),
                              ("signals", b'"signals": {"deep": '), ("slice", b'"slice": {"x": ')):
            doc = _dumps(_doc(400 + depth % 97, note=0))
            if field == "content":
                raw = doc.replace(b'"question": "what is the ' + MARKER.encode() + b'?"',
                                  anchor + deep, 1)
            elif field == "ignored":
                raw = doc.replace(b'"note": 0', anchor + deep, 1)
            elif field == "signals":
                raw = doc.replace(b'"signals": {', anchor + deep + b", ", 1)
            else:
                raw = doc.replace(b'"slice": {', anchor + deep + b", ", 1)
            add((f"nesting {depth} in {field}", raw))
    # Keys: duplicates (i_object_*: last wins, as JSON parsers commonly do), escaped names,
    # content keys in every free-form map, unknown keys at every level.
    dup = good[:-1] + b', "decision": "abstain", "reason": "weak_retrieval"}'
    add(("duplicate decision", dup))
    add(("duplicate trace_id", good[:-1] + b', "trace_id": "dup-2"}'))
    add(("duplicate schema", good[:-1] + b', "schema": "rag-label/1"}'))
    add(("escaped key schema", good.replace(b'"schema"', b'"\\u0073chema"', 1)))
    add(("escaped key question", good.replace(b'"question"', b'"\\u0071uestion"', 1)))
    add(("key with nul", good.replace(b'"question"', b'"question\\u0000"', 1)))
    for where in ("signals", "evals", "slice", "system", "retrieval", "usage"):
        doc = _doc(500, evals={"f": 0.5}, retrieval={"chunk_ids": []}, usage={"cost": 0.1})
        part = dict(doc[where])
        part["answer"] = MARKER
        add((f"content key in {where}", _dumps({**doc, where: part})))
        part = dict(doc[where])
        part["unknown_field"] = 1
        add((f"unknown key in {where}", _dumps({**doc, where: part})))
    # Big and repeated values.
    add(("huge content", _dumps(_doc(600, question=MARKER * 20_000))))
    add(("many claims", _dumps(_doc(601, claims=[{"importance": "normal",
                                                  "verdict": "supported"}] * 5_000))))
    add(("many slice keys", _dumps(_doc(602, slice={f"k{i}": "v" for i in range(5_000)}))))
    add(("many signals", _dumps(_doc(603, signals={f"s{i}": 0.5 for i in range(5_000)}))))
    add(("long trace_id", _dumps(_doc(604, trace_id="t" * 100_000))))
    add(("ts far future", _dumps(_doc(605, ts="9999-12-31T23:59:59Z"))))
    add(("ts far past", _dumps(_doc(606, ts="0001-01-01T00:00:00Z"))))
    add(("ts year 0", _dumps(_doc(607, ts="0000-01-01T00:00:00Z"))))
    add(("ts leap second", _dumps(_doc(608, ts="2026-12-31T23:59:60Z"))))
    add(("ts no zone", _dumps(_doc(609, ts="2026-11-29T10:00:00"))))
    add(("ts number", _dumps(_doc(610, ts=1764410400))))
    add(("ts offset", _dumps(_doc(611, ts="2026-11-29T11:00:00+01:00"))))
    add(("ts lowercase", _dumps(_doc(612, ts="2026-11-29t10:00:00z"))))
    add(("ts space", _dumps(_doc(613, ts="2026-11-29 10:00:00Z"))))
    add(("ts nanoseconds", _dumps(_doc(614, ts="2026-11-29T10:00:00.123456789Z"))))
    add(("decision missing", _dumps(_doc(615, decision=_DROP))))
    add(("schema missing", _dumps(_doc(616, schema=_DROP))))
    add(("system null", _dumps(_doc(617, system=None))))
    add(("slice list", _dumps(_doc(618, slice=["en"]))))
    return cases + public()


SUITE = Path(__file__).parent / "data" / "json-test-suite.json.gz"


def suite() -> list[tuple[str, str]]:
    """JSONTestSuite's test_parsing and test_transform files (name, text): y_ must be
    accepted as JSON, n_ rejected, i_ either (tests/data/json-test-suite.LICENSE)."""
    with gzip.open(SUITE, "rt", encoding="utf-8") as file:
        data = json.load(file)
    return [(case["name"], case["input"]) for case in data["parsing"] + data["transform"]]


def public() -> list[tuple[str, bytes]]:
    """Every file of the suite as a whole message and as the `question` of a valid trace
    (whose `answer` holds the marker)."""
    cases = []
    for i, (name, text) in enumerate(suite()):
        raw = text.encode("utf-8", "surrogatepass")
        cases.append((f"suite whole: {name}", raw))
        inside = _dumps(_doc(10_000 + i, question=_DROP))
        cases.append((f"suite in question: {name}",
                      inside.replace(b'"answer":', b'"question": ' + raw + b', "answer":', 1)))
    return cases
