"""The `otlp` intake as one object: OTLP messages in, decision messages out.

decode (content left behind, `monitor/ingest/otlp.py`) -> the span buffer
(`monitor/ingest/spanbuffer.py`) -> one `rag-decision/1` message per trace that carries
`rag.decision` (`monitor/ingest/assemble.py`) -> the contract's own validation (`parse`).
What comes out is a decision message like any other: the caller folds it (replay) or
produces it to the decisions topic (the worker), and the same fold takes it from there.
`ragmon replay --otlp` and the worker run this same object.
"""

from __future__ import annotations

import zlib
from collections import Counter
from typing import Final, NamedTuple, Protocol

import msgspec

from monitor.ingest.assemble import assemble
from monitor.ingest.contract import Trace
from monitor.ingest.otlp import Decoded, Fragment, NotOtlp, decode
from monitor.ingest.parse import Rejection, parse
from monitor.ingest.spanbuffer import Marks, Ready, SpanBuffer, latest_end

__all__ = ["Assembled", "Forwarded", "SpanIntake", "SpanSettings", "SpansRecord", "buffer_of",
           "forward", "records_of", "spans_record"]

# A spans record's fragments at most (under the 1 MiB the smallest `state_max_bytes`, and
# the spans topic's `max.message.bytes`, allow with the record's framing).
_FRAGMENTS_BYTES: Final = 960 * 1024


class SpansRecord(msgspec.Struct, array_like=True, gc=False):
    """One record of the spans topic: fragments of one forwarded batch, and on the
    batch's last record to each spans partition, the forwarder's marks (what the
    buffer may assume of the OTLP partitions it reads: `spanbuffer.Marks`)."""

    fragments: list[Fragment]
    marks: Marks | None = None


_records = msgspec.msgpack.Encoder()
_read_record = msgspec.msgpack.Decoder(SpansRecord)
_read_fragments = msgspec.msgpack.Decoder(list[Fragment])  # records before the marks


class Forwarded(NamedTuple):
    """A batch of OTLP messages made into fragments for the spans topic: by partition
    (`crc32(trace id) % partitions`), and the messages refused (index in the batch,
    reason, detail: no bytes of the message). `local`: the fragments of messages keyed
    by their one trace's id (the Collector's `partition_traces_by_id: true`), by the
    (topic, partition) they came from: every span of such a trace comes to that
    partition, so it is buffered there, without the spans topic. `newest`: by source
    partition, how far its messages are read in span time (unix ns: the median of their
    traces' ends, see `forward`)."""

    fragments: dict[int, list[Fragment]]
    rejected: list[tuple[int, str, str]]
    local: dict[tuple[str, int], list[Fragment]]
    newest: dict[int, int]


def forward(raws: list[bytes], sources: list[tuple[str, int, int]], partitions: int,
            max_bytes: int, keys: list[bytes | None] | None = None) -> Forwarded:
    """Decode each message and group its traces' fragments by spans partition, or keep
    them by source partition where the message's key names its only trace (`keys`: the
    records' keys, as the Collector's exporter sets them: the trace id in hex). `newest`
    is the median of a partition's fragment ends in the batch, each at most
    `latest_end()`, as the span buffers move their clocks (`spanbuffer.RECENT`): a
    partition said read to a time far ahead, by a host whose clock runs ahead, would
    never hold a buffer's clock back again."""
    by_partition: dict[int, list[Fragment]] = {}
    local: dict[tuple[str, int], list[Fragment]] = {}
    ends: dict[int, list[int]] = {}
    rejected = []
    latest = int(latest_end() * 1e9)
    for index, (raw, source) in enumerate(zip(raws, sources, strict=True)):
        found = decode(raw, source, max_bytes)
        if isinstance(found, NotOtlp):
            rejected.append((index, found.reason, found.detail))
            continue
        fragments = found.fragments
        ends.setdefault(source[1], []).extend(min(f.end, latest) for f in fragments)
        if keys is not None and len(fragments) == 1 and _names(keys[index], fragments[0]):
            local.setdefault((source[0], source[1]), []).append(fragments[0])
            continue
        for fragment in fragments:
            partition = zlib.crc32(fragment.trace_id.encode()) % partitions
            by_partition.setdefault(partition, []).append(fragment)
    newest = {partition: sorted(found)[len(found) // 2] for partition, found in ends.items()
              if found}
    return Forwarded(by_partition, rejected, local, newest)


def records_of(fragments: dict[int, list[Fragment]], partitions: int,
               marks: Marks | None = None) -> dict[int, list[bytes]]:
    """A forwarded batch's records, by spans partition: its fragments in records of at most
    `_FRAGMENTS_BYTES`; with `marks`, every partition gets them on its last record (a
    record of no fragments where the batch has none for it), after the fragments they
    vouch for."""
    records = {}
    for partition in range(partitions) if marks is not None else sorted(fragments):
        chunks = _chunks([_records.encode(f) for f in fragments.get(partition, [])])
        records[partition] = [_record(chunk, None) for chunk in chunks[:-1]]
        records[partition].append(_record(chunks[-1], marks))
    return records


def _record(encoded: list[bytes], marks: Marks | None) -> bytes:
    """`SpansRecord(fragments, marks)` as msgspec encodes it (an array: the struct is
    array-like), from its fragments encoded one by one (so that a record's size is known
    before it is made)."""
    return _records.encode(([msgspec.Raw(fragment) for fragment in encoded], marks))


def _names(key: bytes | None, fragment: Fragment) -> bool:
    """Whether a record key is the fragment's trace id: 32 hex characters (the Collector's
    exporter) or its 16 bytes."""
    if key is None:
        return False
    if len(key) == 32:
        return key.lower() == fragment.trace_id.encode()
    return len(key) == 16 and key.hex() == fragment.trace_id


def spans_record(record: bytes) -> SpansRecord:
    """One spans record (`records_of` wrote it, or a version before the marks: a bare
    list of fragments); raises msgspec.DecodeError / ValidationError on bytes neither
    wrote."""
    try:
        return _read_record.decode(record)
    except msgspec.ValidationError:
        return SpansRecord(_read_fragments.decode(record))


def _chunks(encoded: list[bytes]) -> list[list[bytes]]:
    """Encoded fragments in records of at most `_FRAGMENTS_BYTES` (a fragment larger than
    that alone: it came from one OTLP message, which `otlp_max_message_bytes` bounds)."""
    chunks: list[list[bytes]] = [[]]
    size = 0
    for fragment in encoded:
        if size + len(fragment) > _FRAGMENTS_BYTES and chunks[-1]:
            chunks.append([])
            size = 0
        chunks[-1].append(fragment)
        size += len(fragment)
    return chunks


class SpanSettings(Protocol):
    """The settings the intake reads (`monitor.settings.Settings` has them)."""

    @property
    def otlp_grace_seconds(self) -> float: ...
    @property
    def otlp_timeout_seconds(self) -> float: ...
    @property
    def otlp_pending_max(self) -> int: ...
    @property
    def otlp_spans_per_trace_max(self) -> int: ...
    @property
    def otlp_max_message_bytes(self) -> int: ...
    @property
    def max_message_bytes(self) -> int: ...


class Assembled(NamedTuple):
    """A decision assembled from a trace's spans: its message, or why it was rejected
    (the dead letter's payload holds no content: nothing with content was read), and
    the source of the message that brought its decision span."""

    trace_id: str                    # the OTel trace's
    key: str                         # the decision's trace_id (rag.trace_id, else the same)
    raw: bytes | None
    rejection: Rejection | None
    source: tuple[str, int, int] | None


def buffer_of(settings: SpanSettings, marked: bool = False) -> SpanBuffer:
    return SpanBuffer(settings.otlp_grace_seconds, settings.otlp_timeout_seconds,
                      settings.otlp_pending_max, settings.otlp_spans_per_trace_max, marked)


class SpanIntake:
    """`marked`: fed through the spans topic, judged by the forwarders' marks only
    (`SpanBuffer`); not for a file or an OTLP partition read in order."""

    def __init__(self, settings: SpanSettings, marked: bool = False) -> None:
        self.settings = settings
        self.buffer = buffer_of(settings, marked)
        self.messages: Counter[str] = Counter(read=0, rejected=0)

    def read(self, raw: bytes, source: tuple[str, int, int]) -> Decoded | NotOtlp:
        """Decode one message and count it (its fragments are not merged yet)."""
        self.messages["read"] += 1
        found = decode(raw, source, self.settings.otlp_max_message_bytes)
        if isinstance(found, NotOtlp):
            self.messages["rejected"] += 1
        return found

    def merge(self, fragments: list[Fragment]) -> None:
        """Merge fragments into the buffer (traces evicted to stay in bounds are counted
        there and dropped)."""
        for fragment in fragments:
            self.buffer.add(fragment)

    def mark(self, marks: Marks) -> None:
        """Take a forwarder's marks (`SpanBuffer.mark`), after the fragments they came with."""
        self.buffer.mark(marks)

    def take(self, clock: float | None = None, final: bool = False,
             quiet: float | None = None) -> list[Assembled]:
        """The decisions of the traces ready at `clock` (every trace if `final`; after
        `quiet` seconds without input, `SpanBuffer.quiet`), validated; traces without a
        decision are counted (`no_decision`) and left out."""
        out = []
        found = self.buffer.due(clock, final) if quiet is None else self.buffer.quiet(quiet)
        for ready in found:
            assembled = self._assemble(ready)
            if assembled is not None:
                out.append(assembled)
        return out

    def _assemble(self, ready: Ready) -> Assembled | None:
        try:
            raw = assemble(ready.trace_id, ready.spans)
        except Exception as exc:  # a bug, not the input: this trace alone is set apart
            self.buffer.count("rejected")
            detail = (f"{type(exc).__name__} while assembling the trace (a bug in ragmon: "
                      "please report it with the source offset)")
            return Assembled(ready.trace_id, ready.trace_id, None,
                             Rejection("worker_error", detail, b"", 0), ready.source)
        if raw is None:
            self.buffer.count("no_decision")
            return None
        checked = parse(raw, self.settings.max_message_bytes)
        if isinstance(checked, Rejection):
            self.buffer.count("rejected")
            return Assembled(ready.trace_id, ready.trace_id, None, checked, ready.source)
        self.buffer.count("assembled" if ready.complete else "incomplete")
        event = checked.event
        key = event.trace_id if isinstance(event, Trace) else ready.trace_id
        return Assembled(ready.trace_id, key, raw, None, ready.source)
