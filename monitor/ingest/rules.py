"""The acceptance rules the models do not check, in one place.

msgspec checks types, enums, required fields and ranges while it decodes (`contract.py`);
what it cannot say is here: identifier formats, a zone on `ts`, the reason code's rule.
`ingest.parse` and the compiled admission (`monitor/aggregate/_admission.pyx`) both call
`problem`: a rule added here holds on both paths, and a message the compiled path finds
a problem with is handed to `ingest.parse`, which words the rejection.
"""

from __future__ import annotations

import re
from typing import Final, NamedTuple

from monitor.ingest.contract import (
    KNOWN_REASONS,
    OTEL_SPAN_ID_FORMAT,
    OTEL_TRACE_ID_FORMAT,
    TRACE_ID_FORMAT,
    Event,
    Trace,
)

__all__ = [
    "KNOWN_REASON_SET",
    "OTEL_ID_CHARS",
    "REASON_CODE",
    "TRACE_ID_CHARS",
    "CharRule",
    "char_rule",
    "problem",
]

REASON_CODE: Final = re.compile(r"[a-z0-9_]{1,64}")
_TRACE_ID: Final = re.compile(TRACE_ID_FORMAT).fullmatch
_OTEL_TRACE_ID: Final = re.compile(OTEL_TRACE_ID_FORMAT).fullmatch
_OTEL_SPAN_ID: Final = re.compile(OTEL_SPAN_ID_FORMAT).fullmatch
_CODE: Final = REASON_CODE.fullmatch
KNOWN_REASON_SET: Final = frozenset(KNOWN_REASONS)


class CharRule(NamedTuple):
    """An identifier format `[class]{low,high}` (or `{n}`) as a table: `allowed[c]` is 1
    where the ASCII character c is in the class (no other character is)."""

    allowed: bytes
    low: int
    high: int


def char_rule(format_: str) -> CharRule | None:
    """The `CharRule` of an identifier format, read off the format itself (each ASCII
    character tried against its class), so that a compiled check follows the format;
    None for a format of another form (the compiled admission then leaves every
    identifier to `problem`)."""
    match = re.fullmatch(r"(\[.+\])\{(\d+)(?:,(\d+))?\}", format_)
    if match is None:
        return None
    member = re.compile(match.group(1)).fullmatch
    allowed = bytes(1 if member(chr(c)) else 0 for c in range(128))
    low = int(match.group(2))
    return CharRule(allowed, low, int(match.group(3) or low))


TRACE_ID_CHARS: Final = char_rule(TRACE_ID_FORMAT)
OTEL_ID_CHARS: Final = (char_rule(OTEL_TRACE_ID_FORMAT), char_rule(OTEL_SPAN_ID_FORMAT))


def problem(event: Event, expect: type[Event] | None = None) -> tuple[str, str] | None:
    """The first rule `event` breaks as (rejection reason, detail), or None; `expect`
    narrows it to one event type (a topic's). Runs once per accepted message: kept lean
    (~0.4 us here)."""
    if _TRACE_ID(event.trace_id) is None:
        return "bad_trace_id", f"trace_id is not {TRACE_ID_FORMAT}"
    trace = event if type(event) is Trace else None
    otel = None if trace is None else trace.otel
    if otel is not None:
        if otel.trace_id is not None and _OTEL_TRACE_ID(otel.trace_id) is None:
            return "out_of_range", f"otel.trace_id is not {OTEL_TRACE_ID_FORMAT}"
        if otel.span_id is not None and _OTEL_SPAN_ID(otel.span_id) is None:
            return "out_of_range", f"otel.span_id is not {OTEL_SPAN_ID_FORMAT}"
    if expect is not None and not isinstance(event, expect):
        return ("unexpected_schema", f"expected {expect.__struct_config__.tag}, "
                f"got {type(event).__struct_config__.tag}")
    if event.ts.tzinfo is None:
        return "bad_timestamp", "ts has no time zone (RFC 3339 needs one)"
    if trace is not None:
        reason = trace.reason
        if reason is None:
            if trace.decision == "abstain":
                return "reason_required", "decision abstain needs a reason"
        elif reason not in KNOWN_REASON_SET and _CODE(reason) is None:
            return "out_of_range", f"reason {reason!r} is not [a-z0-9_]{{1,64}}"
    return None
