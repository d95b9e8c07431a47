"""Bytes in, a valid event or a rejection with a stable reason out; content fields dropped.

`parse` never raises on bad data. The fast path is one msgspec decode of the raw bytes;
messages that may hold content fields (or unicode escapes that could spell one) or that
msgspec cannot read take a slow path through Python's json module, which strips content
fields at any depth and recognises NaN/Infinity so they are rejected as `non_finite`
rather than `not_json`.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Final, NamedTuple

import msgspec

from monitor.contract import CONTENT_FIELDS, Event, Feedback, Label, Trace

__all__ = [
    "REASONS", "Accepted", "Cap", "Rejection", "Slicer", "parse", "query_length", "strip_content",
]

REASONS: Final = (
    "not_json",
    "not_object",
    "unknown_schema",
    "unexpected_schema",
    "missing_field",
    "wrong_type",
    "invalid_value",
    "non_finite",
    "out_of_range",
    "reason_required",
    "bad_trace_id",
    "bad_timestamp",
    "bad_slice_value",
    "too_large",
)

_CONTENT_KEY = re.compile(
    rb'"(?:' + b"|".join(sorted(f.encode() for f in CONTENT_FIELDS)) + rb')"\s*:'
)
_ESCAPE = b"\\u"
_DECODER: Final = msgspec.json.Decoder(Trace | Label | Feedback)
_ENCODER: Final = msgspec.json.Encoder()
_DROPPED_MARK = b'..."[content fields dropped]"'


class Accepted(NamedTuple):
    event: Event
    content_fields_dropped: int


class Rejection(NamedTuple):
    reason: str
    detail: str
    payload: bytes  # the message with content fields removed, for the dead-letter record
    content_fields_dropped: int


def parse(raw: bytes, max_bytes: int = 256 * 1024,
          expect: type[Event] | None = None) -> Accepted | Rejection:
    """Decode and validate one message. `expect` narrows it to one event type (a topic's)."""
    if len(raw) > max_bytes:
        return _reject_unparsed("too_large", f"{len(raw)} bytes > limit {max_bytes}", raw)
    if _ESCAPE in raw or _CONTENT_KEY.search(raw):
        return _parse_slow(raw, expect)
    try:
        event = _DECODER.decode(raw)
    except msgspec.ValidationError as exc:
        return Rejection(_classify(str(exc)), str(exc), raw, 0)
    except msgspec.DecodeError:
        return _parse_slow(raw, expect)
    except RecursionError:
        return _reject_unparsed("not_json", "nesting too deep", raw)
    return _check(event, 0, raw, expect)


def strip_content(obj: Any) -> tuple[Any, int]:
    """A copy of a JSON value without content fields at any depth, and how many were dropped."""
    dropped = 0
    root: list[Any] = [None]
    # Iterative walk: adversarial nesting must not exhaust the Python stack.
    stack: list[tuple[Any, Any, Any]] = [(obj, root, 0)]
    while stack:
        value, parent, key = stack.pop()
        if isinstance(value, dict):
            # Keys are placed now, values filled as the walk reaches them: order is kept.
            copy: dict[str, Any] = {k: None for k in value if k not in CONTENT_FIELDS}
            dropped += len(value) - len(copy)
            stack.extend((value[k], copy, k) for k in copy)
            parent[key] = copy
        elif isinstance(value, list):
            items: list[Any] = [None] * len(value)
            stack.extend((v, items, i) for i, v in enumerate(value))
            parent[key] = items
        else:
            parent[key] = value
    return root[0], dropped


def _parse_slow(raw: bytes, expect: type[Event] | None) -> Accepted | Rejection:
    try:
        obj = json.loads(raw)
    except RecursionError:
        return _reject_unparsed("not_json", "nesting too deep", raw)
    except (ValueError, TypeError) as exc:
        return _reject_unparsed("not_json", str(exc)[:200], raw)
    clean, dropped = strip_content(obj)
    payload = b""
    try:
        if _has_non_finite(clean):
            payload = json.dumps(clean, allow_nan=True).encode()
            return Rejection("non_finite", "NaN or Infinity in a number field", payload, dropped)
        payload = _ENCODER.encode(clean)
        event = _DECODER.decode(payload)
    except msgspec.ValidationError as exc:
        return Rejection(_classify(str(exc)), str(exc), payload, dropped)
    except RecursionError:
        return Rejection("not_json", "nesting too deep", payload, dropped)
    except msgspec.DecodeError as exc:  # pragma: no cover - re-encoded JSON is valid JSON
        return Rejection("not_json", str(exc), payload, dropped)
    return _check(event, dropped, payload, expect)


def _check(event: Event, dropped: int, payload: bytes,
           expect: type[Event] | None) -> Accepted | Rejection:
    """Rules the models cannot express: a zone on `ts`, a reason on abstain, the topic's type."""
    if expect is not None and not isinstance(event, expect):
        detail = f"expected {expect.__struct_config__.tag}, got {type(event).__struct_config__.tag}"
        return Rejection("unexpected_schema", detail, payload, dropped)
    if event.ts.tzinfo is None:
        return Rejection("bad_timestamp", "ts has no time zone (RFC 3339 needs one)",
                         payload, dropped)
    if isinstance(event, Trace) and event.decision == "abstain" and event.reason is None:
        return Rejection("reason_required", "decision abstain needs a reason", payload, dropped)
    return Accepted(event, dropped)


def _classify(message: str) -> str:
    """Map a msgspec validation message to a stable reason code."""
    if message.startswith("Object missing required field"):
        return "missing_field"
    at = message.rpartition(" - at `")[2] if " - at `" in message else ""
    if not at:
        return "not_object" if message.startswith("Expected `object`") else "wrong_type"
    if at.startswith("$.schema"):
        return "unknown_schema"
    if at.startswith("$.trace_id"):
        return "bad_trace_id"
    if at.startswith("$.ts"):
        return "bad_timestamp"
    if at.startswith("$.slice"):
        return "bad_slice_value"
    if message.startswith("Number out of range"):
        return "non_finite"  # a float literal beyond double range would become inf
    if message.startswith("Invalid enum value"):
        return "invalid_value"
    if message.startswith("Expected `") and (
        ", got `" in message or "`, got" in message
    ):
        return "wrong_type"
    return "out_of_range"


def _has_non_finite(obj: Any) -> bool:
    stack = [obj]
    while stack:
        value = stack.pop()
        if isinstance(value, float):
            if not math.isfinite(value):
                return True
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return False


def _reject_unparsed(reason: str, detail: str, raw: bytes) -> Rejection:
    """A rejection for bytes we could not parse: cut at the first content key, if any."""
    match = _CONTENT_KEY.search(raw)
    if match is None and _ESCAPE in raw:
        match = re.search(rb'"[^"]*\\u', raw)
    if match is None:
        return Rejection(reason, detail, raw, 0)
    dropped = max(1, len(_CONTENT_KEY.findall(raw)))
    return Rejection(reason, detail, raw[: match.start()] + _DROPPED_MARK, dropped)


class Cap:
    """Admits the first `limit` distinct values of a label; later ones become `other`.

    This is the cardinality budget at its source: an attacker sending 10^5 distinct
    slice values raises `overflowed`, not the number of cells or exported series.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.admitted: set[str] = set()
        self.overflowed = 0

    def __call__(self, value: str) -> str:
        if value in self.admitted:
            return value
        if len(self.admitted) < self.limit:
            self.admitted.add(value)
            return value
        self.overflowed += 1
        return "other"


def query_length(tokens: int) -> str:
    """The derived slice dimension `query_length` (CONTRACT.md)."""
    return "short" if tokens <= 5 else "medium" if tokens <= 15 else "long"


class Slicer:
    """The (release, ((dimension, value), ...)) key of a trace: configured, capped, derived."""

    def __init__(self, dimensions: tuple[str, ...], values_max: int, releases_max: int) -> None:
        self.dimensions = dimensions
        self.releases = Cap(releases_max)
        self.values = {dim: Cap(values_max) for dim in dimensions}

    def keys(self, trace: Trace) -> tuple[str, tuple[tuple[str, str], ...]]:
        pairs = []
        for dim in self.dimensions:
            if dim == "query_length" and "query_length" not in trace.slice:
                if trace.query_tokens is None:
                    continue
                value = query_length(trace.query_tokens)
            else:
                raw = trace.slice.get(dim)
                if raw is None:
                    continue
                value = self.values[dim](raw)
            pairs.append((dim, value))
        return self.releases(trace.system.release), tuple(pairs)

    @property
    def overflowed(self) -> int:
        return self.releases.overflowed + sum(cap.overflowed for cap in self.values.values())
