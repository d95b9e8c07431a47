"""The one fold both the streaming worker and the offline commands run.

raw bytes -> ingest (parse, drop content) -> dedupe -> lateness -> slice -> encode ->
window tables; labels and feedback -> join -> deltas into the trace's window. Closed
windows are merged into running totals. The pipeline holds no I/O: callers feed it
batches and route what it returns (dead letters) wherever their transport wants.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable
from datetime import datetime
from operator import itemgetter
from typing import Final, Literal, NamedTuple

from monitor.aggregate.admission import Admit, admit_python
from monitor.aggregate.compiled import ADMISSION, FOLD
from monitor.aggregate.dedupe import Seen
from monitor.aggregate.fold import Folder
from monitor.aggregate.joins import Delta, Joiner, TraceRef
from monitor.aggregate.layout import Layout, from_settings
from monitor.aggregate.table import TOTAL, CellKey, Exemplar, Table
from monitor.aggregate.windows import Windows
from monitor.ingest.contract import Components, Feedback, Label
from monitor.ingest.parse import Accepted, Rejection, parse
from monitor.ingest.slices import Cap, Slicer, Slicing
from monitor.settings import Settings

__all__ = ["CLOCK_RANK", "INPUT_COUNTERS", "RECENT_CLOSED", "Closed", "Counters", "EventKind",
           "Pipeline", "slicer_of"]

# What a pipeline folds: decision traces, labels, user feedback (one input topic each).
EventKind = Literal["decisions", "labels", "feedback"]

_SLICINGS_CACHED: Final = 10_000
# The input's own clock (`Pipeline.feed` without a clock) is the CLOCK_RANK-th newest
# event time of a batch (1% of a batch over 800; more than half of one under 16): fewer
# bad clocks than that cannot move it.
CLOCK_RANK: Final = 8
# Closed windows a pipeline keeps (and checkpoints after every batch) for stage two
# (monitor/worker/merge.py), which reads checkpoints about once a second: windows close far
# slower unless a backlog of old traffic is read.
RECENT_CLOSED: Final = 4
INPUT_COUNTERS: Final = (
    "read", "valid", "rejected", "duplicates", "late", "folded", "content_fields_dropped",
)



class Closed(NamedTuple):
    """A closed window and what an alarm on it needs: the version components seen per
    release, and the last trace per cell (as the slicing `(release, ())` for the release
    total and `(release, ((dimension, value),))` for a slice)."""

    start: int
    table: Table
    components: dict[str, set[Components]]
    last: dict[Slicing, Exemplar]


class Counters(NamedTuple):
    """A pipeline's input counters: messages by outcome, rejections by reason, and label /
    feedback events by outcome (read, valid, rejected, joined, expired, waiting)."""

    input: dict[str, int]
    rejected: dict[str, int]
    events: dict[str, dict[str, int]]

    @staticmethod
    def total(many: Iterable[Counters]) -> Counters:
        inputs: Counter[str] = Counter()
        rejected: Counter[str] = Counter()
        events: dict[str, Counter[str]] = {}
        for counters in many:
            inputs.update(counters.input)
            rejected.update(counters.rejected)
            for kind, counts in counters.events.items():
                events.setdefault(kind, Counter()).update(counts)
        return Counters(dict(inputs), dict(rejected),
                        {kind: dict(counts) for kind, counts in events.items()})


def slicer_of(settings: Settings) -> Slicer:
    """The slicer `settings` describe (one per worker: its partitions share it)."""
    return Slicer(settings.slice_dimensions, settings.slice_values_max,
                  settings.releases_max, settings.release_idle_seconds,
                  settings.slice_values_allowed)


class Pipeline:
    """Stateful fold of decision traces, labels and feedback into window statistics."""

    def __init__(self, settings: Settings, slicer: Slicer | None = None,
                 admit_missing: Cap | None = None, compiled: bool = True) -> None:
        """`slicer` and `admit_missing` may be shared by the pipelines of one worker (one per
        partition) so that every partition maps the same label values to `other`.
        `compiled=False` runs the pure-Python admission and fold (the references) even
        where the compiled ones are built."""
        # The admission loop: compiled where built and asked for, else the reference.
        self._admit: Admit = ADMISSION.admit if compiled and ADMISSION else admit_python
        self.settings = settings
        self.layout: Layout = from_settings(settings)
        self.slicer = slicer or slicer_of(settings)
        self.admit_missing = admit_missing or Cap(settings.missing_ids_max)
        self.seen: Seen[TraceRef] = Seen(settings.trace_retention_seconds,
                                         settings.trace_retention_max)
        self.windows = Windows(self.layout, settings.window_seconds,
                               settings.allowed_lateness_seconds)
        self.folder = Folder(self.layout, self.admit_missing, compiled and FOLD is not None)
        self.joiner = Joiner(self.layout, settings.pending_retention_seconds,
                             settings.pending_max)
        self.totals = Table.empty(self.layout)
        self.input: Counter[str] = Counter({name: 0 for name in INPUT_COUNTERS})
        self.events: dict[str, Counter[str]] = {
            kind: Counter({name: 0 for name in ("read", "valid", "rejected")})
            for kind in ("labels", "feedback")
        }
        self.rejected_by_reason: Counter[str] = Counter()
        # Per open window, the version components seen per (capped) release: a change
        # makes the release's reference stale.
        self.components: dict[int, dict[str, set[Components]]] = {}
        # Per open window, the last trace (input position, trace_id, ts) of each row of its
        # table: what an alarm on that window's cells points to.
        self.last_traces: dict[int, list[Exemplar | None]] = {}
        # The last RECENT_CLOSED closed windows by start, oldest first; windows closed ever.
        self.recent: dict[int, Closed] = {}
        self.closed_count = 0
        # The latest OpenTelemetry trace id per (cell, decision), with its time and
        # top_score: exported as exemplars so a metric links to traces in Tempo/Jaeger.
        # Bounded by the cells (capped label values) times the decisions.
        self.exemplars: dict[tuple[CellKey, str], tuple[str, float, float | None]] = {}
        self._cell_keys: dict[Slicing, tuple[CellKey, ...]] = {}
        # First sightings since the caller last drained it (None: not kept). The worker
        # checkpoints them, so de-duplication and label joins survive a restart.
        self.journal: list[tuple[str, float, TraceRef]] | None = None
        # The reference clock of the future check when the caller gives none (replay,
        # backtest): the input's own robust time, which only moves forward.
        self.clock = float("-inf")
        self._newest_kept: list[float] = []  # event times of the newest traces kept

    def feed(self, raws: Iterable[bytes],
             clock: float | None = None) -> list[tuple[int, Rejection]]:
        """Fold a batch of decision traces; return dead letters (rejected or late) by index.

        A trace dated more than `max_future_seconds` after the reference clock is
        rejected (`future_timestamp`) and never moves the watermark. The worker gives its
        ingest clock (`clock`, epoch seconds); without one, the clock is the input's own:
        the CLOCK_RANK-th newest event time of this batch (traces ahead of the clock so
        far are set aside until it is known), never going back. (So after a pause in
        the input longer than `max_future_seconds`, traces that resume in the last few
        lines of a batch, fewer than CLOCK_RANK, are refused as future: dead-lettered
        and counted, never silently.) One pass per message does only what decides its
        fate (`monitor/aggregate/admission.py`); the kept traces are folded a chunk at a
        time."""
        dead: list[tuple[int, Rejection]] = []
        deltas: list[Delta] = []
        batch = raws if isinstance(raws, list) else list(raws)
        ahead = self.settings.max_future_seconds
        if clock is not None:
            read, dropped = self._admit(self, batch, dead, deltas, clock + ahead, None)
        else:
            read, dropped = self._admit_on_own_clock(batch, dead, deltas)
        count = self.input
        rejected = sum(1 for _, r in dead if r.reason != "late")
        count["read"] += read
        count["rejected"] += rejected
        count["valid"] += read - rejected
        count["content_fields_dropped"] += dropped
        self._apply(deltas)
        self._expire()
        return dead

    def _admit_on_own_clock(self, batch: list[bytes], dead: list[tuple[int, Rejection]],
                            deltas: list[Delta]) -> tuple[int, int]:
        """Admit against the input's own clock: first what is not ahead of the clock so
        far, then, once the batch's own time is known, what was set aside."""
        ahead = self.settings.max_future_seconds
        if self.clock == float("-inf"):  # the first batch: its time read off its bytes
            self.clock = _rank(_stated_times(batch), [])
        aside: list[tuple[int, float]] = []
        folded = self.input["folded"]
        read, dropped = self._admit(self, batch, dead, deltas, self.clock + ahead, aside)
        # The batch's own time, with the newest traces kept before it (so a last, small
        # batch holding a bad clock is judged against the ones before it).
        kept = self._kept_times(self.input["folded"] - folded)
        self.clock = max(self.clock, _rank([*kept, *(ts for _, ts in aside)],
                                           self._newest_kept))
        if aside:
            later: list[tuple[int, Rejection]] = []
            folded = self.input["folded"]
            more, more_dropped = self._admit(self, [batch[i] for i, _ in aside], later, deltas,
                                             self.clock + ahead, None)
            kept += self._kept_times(self.input["folded"] - folded)
            dead.extend((aside[j][0], rejection) for j, rejection in later)
            dead.sort(key=lambda item: item[0])
            read, dropped = read + more, dropped + more_dropped
        self._newest_kept = sorted([*kept, *self._newest_kept], reverse=True)[:CLOCK_RANK]
        return read, dropped

    def _kept_times(self, n: int) -> list[float]:
        """Event times of the last `n` traces kept (first sightings, newest first)."""
        return list(map(itemgetter(0), itertools.islice(reversed(self.seen.order), n)))

    def feed_events(self, raws: Iterable[bytes],
                    kind: Literal["labels", "feedback"]) -> list[tuple[int, Rejection]]:
        """Fold label (`kind="labels"`) or feedback (`"feedback"`) messages."""
        expect = Label if kind == "labels" else Feedback
        count = self.events[kind]
        dead: list[tuple[int, Rejection]] = []
        deltas: list[Delta] = []
        for index, raw in enumerate(raws):
            count["read"] += 1
            result = parse(raw, self.settings.max_message_bytes, expect)
            self.input["content_fields_dropped"] += result.content_fields_dropped
            if isinstance(result, Rejection):
                count["rejected"] += 1
                dead.append((index, result))
                continue
            count["valid"] += 1
            assert isinstance(result, Accepted)
            event = result.event
            assert isinstance(event, Label | Feedback)
            deltas.extend(self.joiner.on_event(event, self.seen))
        self._apply(deltas)
        return dead

    def set_apart(self, kind: EventKind) -> None:
        """Count one message of `kind` ("decisions", "labels", "feedback") whose fold
        raised as read and rejected (`worker_error`; its caller dead-letters it)."""
        if kind == "decisions":
            self.input.update(read=1, rejected=1)
            self.rejected_by_reason["worker_error"] += 1
        else:
            self.events[kind].update(read=1, rejected=1)

    def cells_of(self, slicing: Slicing) -> tuple[CellKey, ...]:
        """The cells a slicing feeds: its release total and one per slice pair."""
        keys = self._cell_keys.get(slicing)
        if keys is None:
            if len(self._cell_keys) >= _SLICINGS_CACHED:
                self._cell_keys.clear()
            release, pairs = slicing
            keys = self._cell_keys[slicing] = (
                (release, TOTAL, TOTAL), *((release, d, v) for d, v in pairs))
        return keys

    def counters(self) -> Counters:
        waiting = self.joiner.waiting()
        events = {kind: {**counts, "joined": self.joiner.joined[kind],
                         "expired": self.joiner.expired[kind], "waiting": waiting[kind]}
                  for kind, counts in self.events.items()}
        return Counters(dict(self.input), dict(self.rejected_by_reason), events)

    def merged(self) -> Table:
        """Everything folded so far, closed and open windows alike, as one table."""
        table = self.totals
        for _, window in sorted(self.windows.open.items()):
            table = table.merge(window)
        return table

    def close_ready(self, final: bool = False) -> list[Closed]:
        """Close windows past the lateness (all of them if `final`), merge them into totals;
        the last RECENT_CLOSED of them stay in `recent` (checkpointed for stage two)."""
        done = self.windows.close_all() if final else self.windows.close_ready()
        closed = [Closed(start, table, self.components.pop(start, {}),
                         _per_cell(table, self.last_traces.pop(start, [])))
                  for start, table in done]
        for window in closed:
            self.totals = self.totals.merge(window.table)
            self.recent[window.start] = window
        if closed:
            self.slicer.refresh(_volumes(self.layout, [w.table for w in closed]),
                                self.windows.watermark)
        self.closed_count += len(closed)
        for start in sorted(self.recent)[:-RECENT_CLOSED]:
            del self.recent[start]
        return closed

    def _apply(self, deltas: list[Delta]) -> None:
        for delta in deltas:
            table = self.windows.open.get(delta.window_start, self.totals)
            rows = table.rows_of([delta.slicing])[0]
            table.add_columns([int(r) for r in rows if r >= 0], delta.cols, delta.sign)

    def _expire(self) -> None:
        watermark = self.windows.watermark
        self.seen.expire(watermark)
        self.joiner.expire(watermark)
        self.joiner.forget(self.seen.refs)


def _volumes(layout: Layout, tables: list[Table]) -> Counter[tuple[str | None, str]]:
    """Traces per (None, release) and (dimension, value) in `tables` (admission by
    recent traffic, `Slicer.refresh`)."""
    col = layout.counts["traces"]
    volumes: Counter[tuple[str | None, str]] = Counter()
    for table in tables:
        counts = table.counts
        for row, (release, dim, value) in enumerate(table.keys):
            n = int(counts[row, col])
            if n:
                volumes[(None, release) if dim == TOTAL else (dim, value)] += n
    return volumes


def _rank(times: list[float], before: list[float]) -> float:
    """The input's own time: the CLOCK_RANK-th newest of `times` and the newest kept
    `before` (1% of them over 800; more than half of them under 16); -inf for none."""
    sample = [*times, *before]
    if not sample:
        return float("-inf")
    rank = (max(CLOCK_RANK, len(sample) // 100) if len(sample) >= 2 * CLOCK_RANK
            else (len(sample) + 1) // 2)
    # (sorted, not heapq.nlargest: a batch's times are nearly in order, which sorts in
    # C in about one pass; nlargest loops over them in Python)
    return sorted(sample, reverse=True)[rank - 1]


def _stated_times(batch: list[bytes]) -> list[float]:
    """The event times a batch's messages state (`"ts"` read off the bytes, no decode;
    unreadable ones left out): the clock before the first batch is admitted."""
    times = []
    for raw in batch:
        at = raw.find(b'"ts"')
        start = raw.find(b'"', raw.find(b":", at) + 1) + 1 if at >= 0 else 0
        end = raw.find(b'"', start) if start > 0 else -1
        try:
            stamp = datetime.fromisoformat(raw[start:end].decode())
        except (ValueError, UnicodeDecodeError):
            continue
        if stamp.tzinfo is not None:
            times.append(stamp.timestamp())
    return times


def _per_cell(table: Table, last: list[Exemplar | None]) -> dict[Slicing, Exemplar]:
    """The last trace of every cell of a window, keyed as the slicing `(release, ())` for
    the release total and `(release, ((dimension, value),))` for a slice."""
    found: dict[Slicing, Exemplar] = {}
    for (release, dimension, value), exemplar in zip(table.keys, last, strict=False):
        if exemplar is not None:
            key = (release, ()) if dimension == TOTAL else (release, ((dimension, value),))
            found[key] = exemplar
    return found
