"""The hot path of `Pipeline.feed`: admission of a batch of decision messages, and the
folding of the kept ones a chunk at a time.

`admit`, per message: parse (ingest), duplicate check, lateness, slicing, first
sighting (and the journal), then into a chunk that `fold_chunk` folds every
`CHUNK_TRACES` traces (the window tables, version components, last trace per cell,
OpenTelemetry exemplars). Both work on `Admitting`: the parts of a pipeline they read
and write (the pipeline imports this module, not the other way round); neither calls
back into the pipeline.

Both are compiled (`monitor/aggregate/_admission.pyx`, built by `pip install`) where
there is a C compiler; `admit_python` and `fold_chunk_python` are the reference, and
the pipeline chooses between them once (monitor/aggregate/compiled.py loads the compiled
module). tests/aggregate/test_admission.py checks both
leave a pipeline in the same state. The compiled
admission runs the common case (a clean decision, first seen, in time, slicing cached)
in C and hands everything else to the same Python code as here (`ingest.parse`,
`Slicer.keys`, `Joiner.on_trace`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Final, Protocol, TypeAlias

from monitor.aggregate.dedupe import Seen
from monitor.aggregate.joins import Delta, Joiner, TraceRef
from monitor.aggregate.table import CellKey, Exemplar, Table
from monitor.aggregate.windows import Windows
from monitor.ingest.contract import Components, System, Trace, to_json
from monitor.ingest.parse import Rejection, parse, unparsed_payload
from monitor.ingest.slices import Slicer, Slicing
from monitor.settings import Settings

__all__ = ["CHUNK_TRACES", "COMPONENTS_MAX", "Admit", "Admitting", "Folds", "Kept", "admit_python",
           "failed", "fold_chunk_python", "future"]

# Kept traces are folded in chunks of this many: small enough that the decoded traces
# stay in cache between parsing and folding: reading a thousand decoded traces (a few MB)
# field by field after parsing them all measured ~2x slower here, parsing included.
CHUNK_TRACES: Final = 64
COMPONENTS_MAX: Final = 64  # distinct version tuples remembered per release and window

# A kept trace on its way to the fold: (window start, trace, slicing, exemplar).
Kept: TypeAlias = "tuple[int, Trace, Slicing, Exemplar]"


class Folds(Protocol):
    """What admission asks of a pipeline's folder (`fold.Folder`): fold a window's chunk.
    Named here, not imported: fold.py loads the compiled modules, and `_admission` imports
    this module."""

    def fold(self, table: Table, traces: Sequence[Trace], slicings: Sequence[Slicing],
             exemplars: Sequence[Exemplar], last: list[Exemplar | None]
             ) -> list[tuple[int, ...]]: ...


class Admitting(Protocol):
    """What admission and the chunk fold read and write of a pipeline
    (`monitor.aggregate.pipeline.Pipeline` is one)."""

    settings: Settings
    windows: Windows
    seen: Seen[TraceRef]
    slicer: Slicer
    joiner: Joiner
    input: Counter[str]                       # messages by outcome
    rejected_by_reason: Counter[str]
    journal: list[tuple[str, float, TraceRef]] | None
    components: dict[int, dict[str, set[Components]]]
    last_traces: dict[int, list[Exemplar | None]]
    exemplars: dict[tuple[CellKey, str], tuple[str, float, float | None]]

    @property
    def folder(self) -> Folds: ...  # read only: a `fold.Folder` is one

    def cells_of(self, slicing: Slicing) -> tuple[CellKey, ...]: ...


# An admission loop, `admit_python` or the compiled `_admission.admit`: (pipeline, raw
# messages, dead letters out, label deltas out, future limit, set aside out or None) ->
# (read, dropped).
Admit = Callable[[Admitting, list[bytes], list[tuple[int, Rejection]], list[Delta], float,
                  list[tuple[int, float]] | None], tuple[int, int]]


def fold_chunk_python(pipe: Admitting, chunk: list[Kept]) -> None:
    """Fold a chunk of kept traces into their windows; note each window's version
    components, last trace per slicing and OpenTelemetry exemplars."""
    by_window: dict[int, list[Kept]] = {}
    for item in chunk:
        by_window.setdefault(item[0], []).append(item)
    for start, items in by_window.items():
        traces = [item[1] for item in items]
        slicings = [item[2] for item in items]
        exemplars = [item[3] for item in items]
        pipe.folder.fold(pipe.windows.table(start), traces, slicings, exemplars,
                         pipe.last_traces.setdefault(start, []))
        pipe.input["folded"] += len(traces)
        in_window = pipe.components.setdefault(start, {})
        # Consecutive traces of a release mostly share their versions: comparing with
        # the release's previous System is cheaper than hashing every one.
        latest: dict[str, System] = {}
        for slicing, trace in zip(slicings, traces, strict=True):
            release, system = slicing[0], trace.system
            if latest.get(release) == system:
                continue
            latest[release] = system
            seen_components = in_window.setdefault(release, set())
            if len(seen_components) < COMPONENTS_MAX:
                seen_components.add(system.components())
        traced = [i for i, t in enumerate(traces) if t.otel is not None and t.otel.trace_id]
        # The newest trace per (slicing, decision), applied oldest first: a cell shared
        # by several slicings (the release total) ends with the newest of all.
        newest = {(slicings[i], traces[i].decision): i for i in traced}
        for i in sorted(newest.values()):
            trace = traces[i]
            assert trace.otel is not None and trace.otel.trace_id is not None
            exemplar = (trace.otel.trace_id, exemplars[i][2], trace.signals.get("top_score"))
            for key in pipe.cells_of(slicings[i]):
                pipe.exemplars[(key, trace.decision)] = exemplar


def admit_python(pipe: Admitting, raws: list[bytes], dead: list[tuple[int, Rejection]],
                 deltas: list[Delta], limit: float,
                 aside: list[tuple[int, float]] | None) -> tuple[int, int]:
    """Admit `raws` into `pipe`: rejected and late messages go to `dead` (by index),
    label joins they complete to `deltas`; returns (messages read, content fields
    dropped). Duplicates and late traces are counted in `pipe.input`.

    A trace dated after `limit` (the reference clock plus `max_future_seconds`) is
    rejected as `future_timestamp`, or, with `aside`, set aside there as (index, event
    time) without being read or counted (the pipeline decides once it knows the batch's
    own time)."""
    windows, seen, count, joiner = pipe.windows, pipe.seen, pipe.input, pipe.joiner
    refs, keys, max_bytes = seen.refs, pipe.slicer.keys, pipe.settings.max_message_bytes
    size, lateness = windows.window_seconds, windows.lateness_seconds
    watermark = windows.watermark
    journal = pipe.journal
    chunk: list[Kept] = []
    dropped = 0
    base = count["read"]
    for index, raw in enumerate(raws):
        try:  # everything that decides a message's fate, before anything is written
            result = parse(raw, max_bytes, Trace)
            if isinstance(result, Rejection):
                dropped += result.content_fields_dropped
                pipe.rejected_by_reason[result.reason] += 1
                dead.append((index, result))
                continue
            trace = result.event
            assert isinstance(trace, Trace)
            ts = trace.ts.timestamp()
            if ts > limit:  # the clock-bounded watermark: a bad clock cannot move it
                if aside is not None:
                    aside.append((index, ts))
                    continue
                dropped += result.content_fields_dropped
                pipe.rejected_by_reason["future_timestamp"] += 1
                dead.append((index, future(trace, limit)))
                continue
            dropped += result.content_fields_dropped
            trace_id = trace.trace_id
            if trace_id in refs:
                count["duplicates"] += 1
                continue
            # The window rule of monitor/aggregate/windows.py, inline: this runs per message.
            start = int(ts // size) * size
            if start + size <= watermark - lateness:
                count["late"] += 1
                detail = f"window closed at watermark {watermark:.0f}"
                dead.append((index, Rejection("late", detail, to_json(trace), 0)))
                continue
            slicing = keys(trace)
            ref = TraceRef(start, slicing, trace.decision)
        except Exception as exc:  # a bug, not the input: this message alone is set apart
            pipe.rejected_by_reason["worker_error"] += 1
            dead.append((index, failed(raw, exc)))
            continue
        if ts > watermark:
            watermark = windows.watermark = ts
        seen.first(trace_id, ts, ref)
        if journal is not None:
            journal.append((trace_id, ts, ref))
        chunk.append((start, trace, slicing, (base + index, trace_id, ts)))
        if len(chunk) == CHUNK_TRACES:
            fold_chunk_python(pipe, chunk)
            chunk = []
        if joiner.pending:
            deltas.extend(joiner.on_trace(trace_id, ref))
    fold_chunk_python(pipe, chunk)
    return len(raws) - (len(aside) if aside else 0), dropped


def failed(raw: bytes, exc: Exception) -> Rejection:
    """The rejection of a message whose admission or fold raised (`worker_error`): the
    error's type only (its text could quote the message), the message as size and hash."""
    return Rejection("worker_error", f"{type(exc).__name__} while admitting or folding the "
                     "message (a bug in ragmon: please report it with the source offset)",
                     unparsed_payload(raw), 0)


def future(trace: Trace, limit: float) -> Rejection:
    """The rejection of a trace dated after `limit` (its content-stripped event)."""
    return Rejection("future_timestamp", f"ts is more than max_future_seconds ahead of the "
                     f"reference clock (limit {limit:.0f})", to_json(trace), 0)

