"""Spans gathered per OTel trace until the trace can be assembled into one decision.

A trace is *ready* once its decision span (the one carrying `rag.decision`) and its root
span have arrived and `grace_seconds` have passed on the buffer's clock since its newest
span ended; a trace still waiting `timeout_seconds` after it was first seen is taken as
it stands (`incomplete`, or `no_decision` when no span carries `rag.decision`). The
clock is the input's own: the newest span end time seen (`SpanBuffer.due` may be given
a later one, e.g. the worker's while its input is quiet). So a backlog read hours late
assembles exactly as it would have live, and a replay of the same spans gives the same
decisions.

A buffer fed through the spans topic (`monitor/worker/spans.py`) gets its spans from
every partition of `otlp_topic`, read at their own paces: in a backlog one partition may
be read minutes of span time ahead of another, and its spans alone would move the clock
past traces whose other spans wait unread in the slower one. So its forwarders send
`Marks` with its spans: for each OTLP partition, the newest span end forwarded and
whether it is read to its end. Such a buffer judges traces by its clock held back to the
slowest partition not read to its end (a watermark; "read to its end" holds while its
forwarder repeats it, `SpanBuffer.heard`): nothing is taken, nor timed out,
while a partition that may still hold its spans is behind, nor before the first marks
and until every partition has been heard of.

Bounded: at most `max_traces` traces wait (beyond that the oldest incomplete one is
evicted, counted; a complete one is never evicted, it is taken before its grace)
and at most `max_spans` spans are kept per trace (more are counted, not kept, except up
to `ESSENTIAL_MAX` decision and root spans: without them a trace has no decision). A
fragment seen twice (the same source message, redelivered) is merged once, and so is a
span sent again in another message (the same span id in its trace: an exporter's retry),
counted `duplicate`; spans of a trace already taken within the last `timeout_seconds`
are counted `late` and dropped.
Counters (`counts`) say where every span and every trace went.
"""

from __future__ import annotations

import heapq
import time
from collections import Counter, deque
from typing import Final, NamedTuple

import lz4.frame
import msgspec

from monitor.ingest.otlp import Fragment, Span

__all__ = ["SPAN_OUTCOMES", "TRACE_OUTCOMES", "Marks", "Ready", "SpanBuffer", "latest_end"]

# How long a forwarder's word that a partition is read to its end holds against newer
# words of other forwarders (each repeats its own every second): see `SpanBuffer.heard`.
TRUST_SECONDS: Final = 3.0
# A host whose clock runs ahead (a VM without NTP) must not move a clock on: trusted, one
# span dated a day ahead moved a buffer's clock a day on, and every other trace in it was
# taken as soon as its decision and root span came, without waiting for its other spans
# (24 late spans of 20 traces, tests/ingest/test_otlp_senders.py). So a span's end moves a
# clock at most to the wall clock plus AHEAD_SECONDS (hosts agree within it), and a
# buffer's clock moves to the median of the last RECENT fragments' ends, not their
# newest: a few traces far ahead among the others move it not at all (in a backlog read
# an hour late, the wall clock alone would not hold them). While spans stream in, the
# clock lags the newest end by half the time the last RECENT fragments span (~2 s at one
# trace a second, nothing at high rates); once the input is quiet, `quiet` moves it on to
# the newest end seen, so a trace of a service with little traffic waits no longer than
# before. The forwarders' marks say the median the same way (`spans.forward`). The skewed
# trace's own decision keeps its time (beyond `max_future_seconds`, refused downstream
# as `future_timestamp`).
AHEAD_SECONDS: Final = 1.0
RECENT: Final = 5
# Spans kept beyond `max_spans` in one trace if they carry its decision or are a root.
ESSENTIAL_MAX: Final = 8
TRACE_OUTCOMES: Final = ("assembled", "incomplete", "no_decision", "rejected", "evicted")
SPAN_OUTCOMES: Final = ("read", "kept", "duplicate", "late", "over_limit")


def latest_end() -> float:
    """The latest span end (unix s) a clock may move to now (`AHEAD_SECONDS`)."""
    return time.time() + AHEAD_SECONDS


class Pending(msgspec.Struct, array_like=True, gc=False):
    first: float                             # the buffer's clock when first seen
    newest: float                            # the newest end time of its spans
    sources: list[tuple[str, int, int]]      # the fragments merged, by source message
    spans: list[Span]
    decision: bool
    root: bool
    decision_source: tuple[str, int, int] | None = None  # the message of its decision span
    local_root: bool = False    # a span whose parent is remote (in a calling service)


class Marks(msgspec.Struct, array_like=True, gc=False):
    """What a forwarder says of the OTLP partitions it reads, after forwarding a batch:
    the topic's partition count, and for each partition it reads, the newest span end it
    has forwarded from it (unix ns; 0 before any) and whether it has read it to its end."""

    partitions: int
    read: list[tuple[int, int, bool]]
    sent: float = 0.0  # when (unix s; 0: not said, records before session 49)


class _State(msgspec.Struct, array_like=True):
    clock: float
    pending: dict[str, Pending]
    done: dict[str, float]
    counts: dict[str, int]
    sources: int = 0                                  # partitions of otlp_topic (Marks)
    marks: dict[int, tuple[float, bool]] = {}         # partition -> newest (s), at end
    heard: dict[int, float] = {}                      # partition -> its marks' `sent`
    recent: list[float] = []                          # the last fragments' ends
    newest: float = float("-inf")                     # the newest fragment end seen


class Ready(NamedTuple):
    """A trace taken from the buffer: its spans, whether it was complete, and the source
    of the message that brought its decision span (None without one)."""

    trace_id: str
    spans: list[Span]
    complete: bool
    source: tuple[str, int, int] | None


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(_State)


def _essential(spans: list[Span], room: int) -> list[Span]:
    """Of the spans beyond a trace's limit, those without which it has no decision or
    no root, up to `room`: an agent's trace of hundreds of LLM calls reached the limit
    before its gate's span ended, and its decision was lost (counted `no_decision`)."""
    found = [span for span in spans if "rag.decision" in span.attrs or span.root()]
    return found[:max(room, 0)]


def _new_spans(merged: list[Span], spans: list[Span]) -> list[Span]:
    """`spans` without those whose span id is already merged in their trace, or given
    twice: an exporter that sends a request again (a retry after a timeout, a persistent
    queue replayed after a restart) writes the same spans in a new message, and merged
    twice they doubled a decision's token counts, model calls and claims."""
    if not merged and len(spans) < 2:
        return spans
    seen = {span.span_id for span in merged}
    fresh = []
    for span in spans:
        if span.span_id not in seen:
            seen.add(span.span_id)
            fresh.append(span)
    return fresh


class SpanBuffer:
    def __init__(self, grace_seconds: float, timeout_seconds: float, max_traces: int,
                 max_spans: int, marked: bool = False) -> None:
        self.grace = grace_seconds
        # Fed through the spans topic: judged by marks only, so nothing is taken before
        # the first marks come (they ride on a forwarded batch's last record to each
        # partition; its fragments may come a fetch earlier, and by the buffer's own
        # clock alone traces were taken without spans still unread in a slower OTLP
        # partition: 29 late spans in 60k requests on Apache Kafka, session 49).
        self.marked = marked
        # A partition's "read to its end" holds only while its forwarder still says so:
        # forwarders repeat their marks every second, and a partition whose last word is
        # `TRUST_SECONDS` older than the newest word heard from any forwarder (its
        # forwarder killed, the partition unread until a rebalance gives it to another)
        # holds the clock at its newest span again. Trusted for good, its spans were
        # unread while quiet buffers took their traces: 59 late spans when one of two
        # workers was killed (Apache Kafka, session 49). Forwarders' clocks are compared
        # with each other's only (by the time each said it, `Marks.sent`).
        self.heard: dict[int, float] = {}       # partition -> its last marks' `sent`
        self.timeout = timeout_seconds
        self.max_traces = max_traces
        self.max_spans = max_spans
        self.clock = float("-inf")
        self.recent: deque[float] = deque(maxlen=RECENT)  # the last fragments' ends
        self.newest = float("-inf")             # the newest fragment end seen
        self.sources = 0                        # 0: no marks (one source, read in order)
        self.marks: dict[int, tuple[float, bool]] = {}
        self.pending: dict[str, Pending] = {}   # oldest first
        self.done: dict[str, float] = {}        # taken recently: trace id -> clock
        self.counts: Counter[str] = Counter(
            {f"{kind}_{name}": 0 for kind, names in (("traces", TRACE_OUTCOMES),
                                                     ("spans", SPAN_OUTCOMES)) for name in names}
            | {"content_fields_dropped": 0})
        self._complete: set[str] = set()       # pending with decision and root spans
        # (newest span end, trace id) of complete traces, soonest first; an entry whose
        # trace got a newer span since is pushed again when popped.
        self._soonest: list[tuple[float, str]] = []
        self._early: list[Ready] = []          # complete, taken at the bound: due next

    def __len__(self) -> int:
        return len(self.pending)

    def add(self, fragment: Fragment) -> list[Ready]:
        """Merge one fragment; the traces evicted to stay within bounds."""
        count, spans_read = self.counts, fragment.spans_read
        trace_id = fragment.trace_id
        pending = self.pending.get(trace_id)
        if pending is not None and fragment.source in pending.sources:
            count["spans_duplicate"] += spans_read
            return []
        count["spans_read"] += spans_read
        count["content_fields_dropped"] += fragment.dropped
        if trace_id in self.done:
            count["spans_late"] += spans_read
            return []
        newest = min(fragment.end / 1e9, latest_end())
        recent = self.recent
        recent.append(newest)
        self.clock = max(self.clock, sorted(recent)[len(recent) // 2])
        self.newest = max(self.newest, newest)
        if pending is None:
            pending = self.pending[trace_id] = Pending(
                self.clock, newest, [], [], False, False)
        pending.sources.append(fragment.source)
        pending.newest = max(pending.newest, newest)
        spans = _new_spans(pending.spans, fragment.spans)
        count["spans_duplicate"] += len(fragment.spans) - len(spans)
        room = self.max_spans - len(pending.spans)
        kept = spans[:max(room, 0)]
        if len(kept) < len(spans):
            kept += _essential(spans[len(kept):], self.max_spans + ESSENTIAL_MAX
                               - len(pending.spans) - len(kept))
        pending.spans.extend(kept)
        count["spans_kept"] += len(kept)
        count["spans_over_limit"] += len(spans) - len(kept)
        if any("rag.decision" in span.attrs for span in kept):
            pending.decision, pending.decision_source = True, fragment.source
        pending.root = pending.root or any(not s.parent for s in kept)
        pending.local_root = pending.local_root or any(s.remote for s in kept)
        if pending.decision and pending.root:
            self._complete.add(trace_id)
            heapq.heappush(self._soonest, (pending.newest, trace_id))
        evicted = []
        while len(self.pending) > self.max_traces:
            # The oldest trace still incomplete goes (counted); when every waiting trace
            # is complete, the oldest is taken now, before its grace has passed.
            oldest = next((t for t in self.pending if t not in self._complete), None)
            if oldest is None:
                self._early.append(self._take(next(iter(self.pending)), True))
                continue
            evicted.append(self._take(oldest, False))
            count["traces_evicted"] += 1
        return evicted

    def mark(self, marks: Marks) -> None:
        """Take a forwarder's marks (after the fragments they came with)."""
        self.sources = max(self.sources, marks.partitions)
        for partition, newest_ns, at_end in marks.read:
            newest = newest_ns / 1e9 if newest_ns else float("-inf")
            before = self.marks.get(partition)
            self.marks[partition] = (max(newest, before[0]) if before else newest, at_end)
            self.heard[partition] = max(marks.sent, self.heard.get(partition, 0.0))

    def now(self) -> float:
        """The clock traces are judged by: the buffer's, held back to the slowest OTLP
        partition not read to its end, or whose word that it is has not been repeated
        (none taken before every partition is heard of)."""
        if not self.sources:
            return float("-inf") if self.marked else self.clock
        if any(partition not in self.marks for partition in range(self.sources)):
            return float("-inf")
        trusted = max(self.heard.values(), default=0.0) - TRUST_SECONDS
        behind = [newest for partition, (newest, at_end) in self.marks.items()
                  if not at_end or 0 < self.heard.get(partition, 0.0) < trusted]
        return min(self.clock, *behind) if behind else self.clock

    def due(self, clock: float | None = None, final: bool = False) -> list[Ready]:
        """Take the traces ready at `clock` (the buffer's own when later), or every trace
        (`final`, at the end of a file): complete ones first, then timed out ones."""
        if clock is not None and clock > self.clock:
            self.clock = clock
        now = self.now()
        taken, self._early = self._early, []
        soonest = self._soonest
        while soonest and (final or soonest[0][0] + self.grace <= now):
            newest, trace_id = heapq.heappop(soonest)
            pending = self.pending.get(trace_id)
            if pending is None or trace_id not in self._complete:
                continue  # taken already (an entry pushed again, or at the bound)
            if pending.newest > newest and not final:
                heapq.heappush(soonest, (pending.newest, trace_id))
                continue
            taken.append(self._take(trace_id, True))
        for trace_id in list(self.pending):
            pending = self.pending[trace_id]
            if not final and now < pending.first + self.timeout:
                break  # pending is oldest first
            # A service called with trace context (its root's parent is remote): the
            # caller's spans may never come here, and without them it is whole.
            taken.append(self._take(trace_id, pending.decision and pending.local_root))
        done = self.done  # oldest first, taken at a clock that never goes back
        while done and (len(done) > self.max_traces
                        or next(iter(done.values())) < now - self.timeout):
            del done[next(iter(done))]
        return taken

    def quiet(self, seconds: float) -> list[Ready]:
        """`due` after `seconds` without input: the clock moves on by them from the newest
        span end seen (each end at most the wall clock then): with no span coming, it
        need not stay at the median of the last."""
        return self.due(max(self.clock, self.newest) + seconds)

    def count(self, outcome: str) -> None:
        """Count a trace taken: `assembled`, `incomplete`, `no_decision` or `rejected`."""
        self.counts[f"traces_{outcome}"] += 1

    def _take(self, trace_id: str, complete: bool) -> Ready:
        pending = self.pending.pop(trace_id)
        self._complete.discard(trace_id)
        self.done[trace_id] = self.clock
        return Ready(trace_id, pending.spans, complete, pending.decision_source)

    def to_bytes(self, limit: int | None = None) -> bytes:
        """The buffer as a checkpoint of at most `limit` bytes: while it is larger, the
        oldest waiting traces are evicted (counted), incomplete ones first, so that a
        checkpoint the state topic cannot take never stops the intake (spans of big
        traces can outgrow `state_max_bytes` before `max_traces` is reached)."""
        while True:
            state = _State(self.clock, self.pending, self.done, dict(self.counts),
                           self.sources, self.marks, self.heard, list(self.recent),
                           self.newest)
            blob = bytes(lz4.frame.compress(_encoder.encode(state)))
            if limit is None or len(blob) <= limit or not self.pending:
                return blob
            share = 1 - 0.9 * limit / len(blob)  # of the waiting traces, enough to fit
            count = max(1, int(len(self.pending) * share))
            oldest = [t for t in self.pending if t not in self._complete][:count]
            oldest += [t for t in self.pending if t in self._complete][:count - len(oldest)]
            for trace_id in oldest:
                self._take(trace_id, False)
            self.counts["traces_evicted"] += len(oldest)

    def restore(self, blob: bytes) -> None:
        """Put back what `to_bytes` wrote."""
        state = _decoder.decode(lz4.frame.decompress(blob))
        self.clock, self.pending, self.done = state.clock, state.pending, state.done
        self.sources, self.marks, self.heard = state.sources, state.marks, state.heard
        self.recent.extend(state.recent)
        self.newest = state.newest
        self.counts.update(state.counts)
        self._complete = {trace_id for trace_id, p in self.pending.items()
                          if p.decision and p.root}
        self._soonest = sorted((self.pending[t].newest, t) for t in self._complete)

