"""Files of `otlp_json` lines (the Collector's `file` exporter) read as decision messages:
`ragmon replay --otlp` and `ragmon backtest --otlp`, through the worker's own intake
(`monitor/ingest/spans.py`). The source of each decision is the line that brought its
decision span; a line that is not OTLP and a trace whose decision breaks the contract
become dead-letter records (reason, detail, file and line: never content)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from monitor.ingest.otlp import NotOtlp
from monitor.ingest.parse import payload_form
from monitor.ingest.spans import Assembled, SpanIntake
from monitor.offline.files import batches
from monitor.offline.progress import Progress

__all__ = ["decision_batches", "summary_of"]

DeadRecord = dict[str, Any]


def decision_batches(intake: SpanIntake, paths: list[str], progress: Progress,
                     dead: Callable[[DeadRecord], None]) -> Iterator[tuple[list[int], list[bytes]]]:
    """(source line numbers, decision messages) for each batch of lines of `paths`, and
    the rest once every file is read (traces still waiting are taken as they stand)."""
    for path in paths:
        for numbers, lines in batches(path, progress):
            for number, line in zip(numbers, lines, strict=True):
                found = intake.read(line, (path, 0, number))
                if isinstance(found, NotOtlp):
                    dead({"reason": found.reason, "detail": found.detail, "source": path,
                          "line": number, "payload_form": "omitted", "payload": ""})
                else:
                    intake.merge(found.fragments)
            yield _split(intake.take(), dead)
    yield _split(intake.take(final=True), dead)


def _split(assembled: list[Assembled],
           dead: Callable[[DeadRecord], None]) -> tuple[list[int], list[bytes]]:
    numbers, raws = [], []
    for item in assembled:
        source, line = (item.source[0], item.source[2]) if item.source else ("", 0)
        if item.rejection is not None:
            dead({"reason": item.rejection.reason, "detail": item.rejection.detail,
                  "source": source, "line": line, "otel_trace_id": item.trace_id,
                  # assembled from kept attributes only: no content to withhold
                  "payload_form": payload_form(item.rejection.payload),
                  "payload": item.rejection.payload.decode("utf-8", errors="replace")})
        elif item.raw is not None:
            numbers.append(line)
            raws.append(item.raw)
    return numbers, raws


def summary_of(intake: SpanIntake) -> dict[str, Any]:
    """The intake's counters, as the summary's `otlp` section (the worker exports the
    same as `ragmon_otlp_*`)."""
    counts = intake.buffer.counts
    return {
        "messages": dict(intake.messages),
        "spans": {key[len("spans_"):]: n for key, n in counts.items() if key.startswith("spans_")},
        "traces": {key[len("traces_"):]: n for key, n in counts.items()
                   if key.startswith("traces_")},
        "content_fields_dropped": counts["content_fields_dropped"],
        "pending": len(intake.buffer),
    }
