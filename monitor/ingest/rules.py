"""The acceptance rules the models do not check, in one place.

msgspec checks types, enums, required fields and ranges while it decodes (`contract.py`);
what it cannot say is here: identifier formats, a zone on `ts`, the reason code's rule.
`ingest.parse` and the compiled admission (`monitor/aggregate/_admission.pyx`) both call
`problem`: a rule added here holds on both paths, and a message the compiled path finds
a problem with is handed to `ingest.parse`, which words the rejection.
"""

from __future__ import annotations

import re
from typing import Final

from monitor.ingest.contract import (
    KNOWN_REASONS,
    OTEL_SPAN_ID_FORMAT,
    OTEL_TRACE_ID_FORMAT,
    TRACE_ID_FORMAT,
    Event,
    Trace,
)

__all__ = ["REASON_CODE", "problem"]

REASON_CODE: Final = re.compile(r"[a-z0-9_]{1,64}")
_TRACE_ID: Final = re.compile(TRACE_ID_FORMAT).fullmatch
_OTEL_TRACE_ID: Final = re.compile(OTEL_TRACE_ID_FORMAT).fullmatch
_OTEL_SPAN_ID: Final = re.compile(OTEL_SPAN_ID_FORMAT).fullmatch
_CODE: Final = REASON_CODE.fullmatch
_KNOWN_REASONS: Final = frozenset(KNOWN_REASONS)


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
        elif reason not in _KNOWN_REASONS and _CODE(reason) is None:
            return "out_of_range", f"reason {reason!r} is not [a-z0-9_]{{1,64}}"
    return None
