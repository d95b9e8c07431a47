"""Spans and fragments made by hand, as `monitor/ingest/otlp.py` decodes them, for the
span buffer's tests (its clock, bounds and marks) where real instrumentation would only
add noise."""

from __future__ import annotations

from typing import Any

from monitor.ingest.otlp import Fragment, Span


def a_span(span_id: str, parent: str, end_s: float, **attrs: Any) -> Span:
    """A span of service `svc`, release `r1`, 0.1 s long, ending at `end_s`."""
    return Span(span_id, parent, int((end_s - 0.1) * 1e9), int(end_s * 1e9), "svc", "r1", attrs)


def a_fragment(trace: str, offset: int, *spans: Span) -> Fragment:
    """The spans of trace `trace` in the message at `offset` of otlp_spans/0."""
    return Fragment(trace, ("otlp_spans", 0, offset), list(spans), spans_read=len(spans),
                    end=max(span.end for span in spans))
