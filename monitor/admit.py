"""Admission of a batch of decision messages: what decides each one's fate, in one pass.

Per message: parse (ingest), duplicate check, lateness, slicing, first sighting (and
the journal), then into a chunk that the pipeline folds every `CHUNK_TRACES` traces.
This is the per-message part of `Pipeline.feed`; `pipe` is that Pipeline (typed `Any`:
the pipeline imports this module, not the other way round).

`admit` is the compiled version (`monitor/_admit.pyx`, built by `pip install`) when
there is one, else `admit_python`, which is the reference: tests/test_admit.py checks
both leave a pipeline in the same state. The compiled one runs the common case (a
clean decision, first seen, in time, slicing cached) in C and hands everything else to
the same Python code as here (`ingest.parse`, `Slicer.keys`, `Joiner.on_trace`).
"""

from __future__ import annotations

from typing import Any, Final

from monitor.contract import Trace, to_json
from monitor.ingest import Rejection, parse
from monitor.labels import Delta, TraceRef

__all__ = ["CHUNK_TRACES", "COMPILED", "admit", "admit_python"]

# Kept traces are folded in chunks of this many: small enough that the decoded traces
# stay in cache between parsing and folding: reading a thousand decoded traces (a few MB)
# field by field after parsing them all measured ~2x slower here, parsing included.
CHUNK_TRACES: Final = 64


def admit_python(pipe: Any, raws: list[bytes], dead: list[tuple[int, Rejection]],
                 deltas: list[Delta]) -> tuple[int, int]:
    """Admit `raws` into `pipe`: rejected and late messages go to `dead` (by index),
    label joins they complete to `deltas`; returns (messages read, content fields
    dropped). Duplicates and late traces are counted in `pipe.input`."""
    windows, seen, count, joiner = pipe.windows, pipe.seen, pipe.input, pipe.joiner
    refs, keys, max_bytes = seen.refs, pipe.slicer.keys, pipe.settings.max_message_bytes
    size, lateness = windows.window_seconds, windows.lateness_seconds
    watermark = windows.watermark
    journal = pipe.journal
    chunk: list[tuple[int, Trace, Any, Any]] = []
    dropped = 0
    base = count["read"]
    for index, raw in enumerate(raws):
        result = parse(raw, max_bytes, Trace)
        dropped += result.content_fields_dropped
        if isinstance(result, Rejection):
            pipe.rejected_by_reason[result.reason] += 1
            dead.append((index, result))
            continue
        trace = result.event
        assert isinstance(trace, Trace)
        trace_id = trace.trace_id
        if trace_id in refs:
            count["duplicates"] += 1
            continue
        ts = trace.ts.timestamp()
        # Windows.start_of, is_late and observe, inline: this loop runs per message.
        start = int(ts // size) * size
        if start + size <= watermark - lateness:
            count["late"] += 1
            detail = f"window closed at watermark {watermark:.0f}"
            dead.append((index, Rejection("late", detail, to_json(trace), 0)))
            continue
        if ts > watermark:
            watermark = windows.watermark = ts
        slicing = keys(trace)
        ref = TraceRef(start, slicing, trace.decision)
        seen.first(trace_id, ts, ref)
        if journal is not None:
            journal.append((trace_id, ts, ref))
        chunk.append((start, trace, slicing, (base + index, trace_id, ts)))
        if len(chunk) == CHUNK_TRACES:
            pipe.fold_chunk(chunk)
            chunk = []
        if joiner.pending:
            deltas.extend(joiner.on_trace(trace_id, ref))
    pipe.fold_chunk(chunk)
    return len(raws), dropped


# Imported last: the compiled module reads CHUNK_TRACES from this one.
try:
    from monitor._admit import admit  # type: ignore[import-not-found, unused-ignore]
except ImportError:  # no C compiler at install time
    admit = admit_python
COMPILED = admit is not admit_python
