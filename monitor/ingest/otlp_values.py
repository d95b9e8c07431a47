"""Attribute values as OTLP writes them, read into what the `otlp` intake's mapping keeps
(`monitor/ingest/otlp.py` walks the messages; these read their parts): protobuf's
`AnyValue` and OTLP/JSON's value objects, ids and integers in the ranges of their
protobuf fields, the resource's service, numbered rows of documents and evaluations, and
GenAI's `gen_ai.retrieval.documents`."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Final, TypeAlias

if TYPE_CHECKING:
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue

__all__ = ["ARRAY_DEPTH", "Value", "documents", "json_attributes", "json_id", "json_int",
           "json_pairs", "json_value", "number", "proto_attributes", "proto_value", "put_row",
           "service_of", "text"]

Value: TypeAlias = str | bool | int | float | list[Any]


def documents(value: Value) -> tuple[list[tuple[str | None, float | None]], int]:
    """GenAI `gen_ai.retrieval.documents`: a JSON array of `{"id", "score"}`, and how many
    other fields its documents had (a document's content...: left behind, counted)."""
    try:
        parsed = json.loads(value) if isinstance(value, str) else value
    except ValueError:
        return [], 0
    found: list[tuple[str | None, float | None]] = []
    dropped = 0
    for document in parsed if isinstance(parsed, list) else ():
        if isinstance(document, dict):
            dropped += sum(1 for key in document if key not in ("id", "score"))
            found.append((text(document.get("id")), number(document.get("score"))))
    return found, dropped


def proto_attributes(pairs: Any) -> Iterator[tuple[str, Value]]:
    for pair in pairs:
        yield pair.key, proto_value(pair.value)


def proto_value(value: AnyValue) -> Value:
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return value.string_value
    if kind == "int_value":
        return value.int_value
    if kind == "double_value":
        return value.double_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "array_value":
        return [proto_value(item) for item in value.array_value.values]
    return ""  # kvlist and bytes values: nothing the mapping reads


def json_attributes(pairs: Any) -> Iterator[tuple[str, Value]]:
    for key, value in json_pairs(pairs):
        yield key, json_value(value)


def json_pairs(pairs: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    for pair in pairs or ():
        yield pair["key"], pair.get("value") or {}


# Arrays in arrays: the deepest a span attribute's value is read in `otlp_proto`
# (protobuf's limit of 100 nested messages; checked against its parse), and in OTLP/JSON.
ARRAY_DEPTH: Final = 47


def json_value(value: dict[str, Any], depth: int = 0) -> Value:
    if "stringValue" in value:
        return str(value["stringValue"])
    if "intValue" in value:
        return json_int(value["intValue"], -(2**63), 2**63)  # a string in OTLP/JSON
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "arrayValue" in value:
        if depth == ARRAY_DEPTH:
            raise ValueError("arrays nested deeper than protobuf reads them")
        return [json_value(item, depth + 1)
                for item in (value["arrayValue"] or {}).get("values") or ()]
    return ""


def json_int(value: Any, low: int, high: int) -> int:
    """An OTLP/JSON integer (a string or a number) in [low, high): the range of its
    protobuf field (int64 values, fixed64 times), as protobuf's JSON mapping reads it;
    beyond it the message is not OTLP (and no later step has to hold a wider int)."""
    number = int(value)
    if not low <= number < high:
        raise ValueError("an integer out of its field's range")
    return number


def json_id(value: Any, length: int) -> str:
    """A trace or span id of OTLP/JSON: hex (the spec), or base64 (protobuf's own JSON
    mapping, which some clients write); "" when absent."""
    if not value:
        return ""
    if not isinstance(value, str):
        raise TypeError("an id that is not a string")
    if len(value) == length and re.fullmatch(r"[0-9a-fA-F]+", value):
        return value.lower()
    decoded = base64.b64decode(value, validate=True)
    if len(decoded) * 2 != length:
        raise ValueError("an id of the wrong length")
    return decoded.hex()


def service_of(resource: Iterable[tuple[str, Value]]) -> tuple[str | None, str | None]:
    found = dict(resource)
    name, version = found.get("service.name"), found.get("service.version")
    return (name if isinstance(name, str) else None,
            version if isinstance(version, str) else None)


def put_row(rows: list[tuple[Any, Any]], index: int, at: int | None, value: Value) -> None:
    """Set field `at` (None: no field, the row only) of row `index` (documents and
    evaluations come as numbered keys)."""
    if index > 1000:  # a numbered key no instrumentor writes: not worth a row each
        return
    while len(rows) <= index:
        rows.append((None, None))
    first, second = rows[index]
    if at == 0:
        rows[index] = (text(value), second)
    elif at == 1:
        rows[index] = (first, number(value))


def text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def number(value: Any) -> float | None:
    """A number as a float; None for anything else, and for an integer beyond a float's
    range (a score in `gen_ai.retrieval.documents`' JSON may be any integer)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        return float(value)
    except OverflowError:
        return None
