# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled admission: `monitor/admit.py`'s loop with its common case in C.

A clean decision (no backslash, starts with its schema, decodes strictly, no content
key in its maps, well-formed identifiers, a zone on `ts`, a well-formed reason) is
decoded here as `parts.decode_trace` does, with the parts' cache lookups in C; any other
message goes to `ingest.parse`, which decides its fate exactly as in the reference. A slicing not yet in the slicer's cache is computed by `Slicer.keys`,
label joins by `Joiner.on_trace`. tests/test_admit.py checks both loops leave a
pipeline in the same state.
"""

from cpython.dict cimport PyDict_GetItem
from cpython.ref cimport PyObject, Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from libc.string cimport memchr

import msgspec

from monitor.admit import CHUNK_TRACES, COMPONENTS_MAX
from monitor.contract import CONTENT_FIELDS, KNOWN_REASONS, Trace, to_json
from monitor.ingest import REASON_CODE, TRACE_PREFIX, Rejection, parse
from monitor.labels import TraceRef
from monitor.parts import CHECKS, REQUIREMENTS, SLICE, SYSTEM, WIRE, Unusual
from monitor.slices import query_length

cdef object _WIRE = WIRE
cdef tuple _DECODE_ERRORS = (msgspec.DecodeError, msgspec.ValidationError, RecursionError,
                             Unusual)
cdef frozenset _CONTENT = CONTENT_FIELDS
cdef frozenset _KNOWN = frozenset(KNOWN_REASONS)
cdef object _CODE = REASON_CODE.fullmatch
cdef bytes _PREFIX = TRACE_PREFIX
cdef tuple _LENGTHS = tuple(query_length(tokens) for tokens in range(64))


cdef inline object _part(part, raw):
    """A repeating part of a decision by its exact bytes: cached, else decoded by `part`."""
    cdef PyObject* found = PyDict_GetItem(part.cache, bytes(raw))
    return part(raw) if found == NULL else <object>found


cdef object _clean(bytes raw, Py_ssize_t max_bytes):
    """The trace of a message `ingest.parse` would accept as is, else None (parse decides)."""
    cdef Py_ssize_t n = len(raw)
    if n > max_bytes or memchr(<const char*>raw, 92, n) != NULL or not raw.startswith(_PREFIX):
        return None
    try:
        w = _WIRE.decode(raw)
        # parts.decode_trace, with the parts' cache lookups in C.
        trace = Trace(w.trace_id, w.ts, _part(SYSTEM, w.system), w.decision, w.reason,
                      w.otel, _part(SLICE, w.slice), w.query_tokens, w.cluster, w.rule,
                      w.signals, w.retrieval, w.claims, _part(REQUIREMENTS, w.requirements),
                      _part(CHECKS, w.checks), w.usage, w.evals)
    except _DECODE_ERRORS:
        return None
    maps = trace.signals  # (a slice with a content key never leaves `_part`)
    if maps and not _CONTENT.isdisjoint(maps):
        return None
    maps = trace.evals
    if maps and not _CONTENT.isdisjoint(maps):
        return None
    if not _is_trace_id(trace.trace_id):
        return None
    otel = trace.otel
    if otel is not None and not (_is_hex(otel.trace_id, 32) and _is_hex(otel.span_id, 16)):
        return None
    if trace.ts.tzinfo is None:
        return None
    reason = trace.reason
    if reason is None:
        if trace.decision == "abstain":
            return None
    elif reason not in _KNOWN and _CODE(reason) is None:
        return None
    return trace


cdef bint _is_trace_id(str value):
    """contract.TRACE_ID_FORMAT (the model bounds the length): letters, digits, ._:-"""
    cdef Py_UCS4 c
    for c in value:
        if not ("a" <= c <= "z" or "A" <= c <= "Z" or "0" <= c <= "9"
                or c == "." or c == "_" or c == ":" or c == "-"):
            return False
    return True


cdef bint _is_hex(value, Py_ssize_t length):
    """None, or contract.OTEL_*_ID_FORMAT: `length` lowercase hex digits."""
    cdef Py_UCS4 c
    if value is None:
        return True
    if len(<str>value) != length:
        return False
    for c in <str>value:
        if not ("0" <= c <= "9" or "a" <= c <= "f"):
            return False
    return True


cdef object _raw_key(trace, tuple dimensions):
    """The slicer's cache key of a trace (`Slicer.keys`): release, query length, values."""
    cdef Py_ssize_t i, n = len(dimensions)
    cdef tuple key = PyTuple_New(n + 2)
    cdef PyObject* found
    release = trace.system.release
    Py_INCREF(release)
    PyTuple_SET_ITEM(key, 0, release)
    tokens = trace.query_tokens
    if tokens is None:
        length = None
    elif tokens < 64:
        length = _LENGTHS[tokens]
    else:
        length = query_length(tokens)
    Py_INCREF(length)
    PyTuple_SET_ITEM(key, 1, length)
    values = trace.slice
    for i in range(n):
        found = PyDict_GetItem(values, dimensions[i])
        value = None if found == NULL else <object>found
        Py_INCREF(value)
        PyTuple_SET_ITEM(key, i + 2, value)
    return key


def admit(pipe, list raws, list dead, list deltas):
    """`monitor.admit.admit_python`, compiled: same arguments, same effects."""
    windows, seen, count, joiner = pipe.windows, pipe.seen, pipe.input, pipe.joiner
    slicer = pipe.slicer
    cdef dict refs = seen.refs
    cdef dict cache = slicer.cache
    cdef tuple dimensions = slicer.dimensions
    cdef Py_ssize_t max_bytes = pipe.settings.max_message_bytes
    cdef Py_ssize_t index, n = len(raws), base = count["read"], dropped = 0
    cdef Py_ssize_t duplicates = 0, late = 0
    cdef double ts, watermark = windows.watermark
    cdef PyObject* found
    size, lateness = windows.window_seconds, windows.lateness_seconds
    keys, first, fold_chunk = slicer.keys, seen.first, pipe.fold_chunk
    journal = pipe.journal
    rejected_by_reason = pipe.rejected_by_reason
    cdef list chunk = []
    for index in range(n):
        raw = raws[index]
        trace = _clean(raw, max_bytes)
        if trace is None:
            result = parse(raw, max_bytes, Trace)
            dropped += result.content_fields_dropped
            if isinstance(result, Rejection):
                rejected_by_reason[result.reason] += 1
                dead.append((index, result))
                continue
            trace = result.event
        trace_id = trace.trace_id
        if trace_id in refs:
            duplicates += 1
            continue
        ts = trace.ts.timestamp()
        start = int(ts // size) * size
        if start + size <= watermark - lateness:
            late += 1
            detail = f"window closed at watermark {watermark:.0f}"
            dead.append((index, Rejection("late", detail, to_json(trace), 0)))
            continue
        if ts > watermark:
            watermark = ts
            windows.watermark = ts
        found = PyDict_GetItem(cache, _raw_key(trace, dimensions))
        slicing = keys(trace) if found == NULL else <object>found
        ref = TraceRef(start, slicing, trace.decision)
        first(trace_id, ts, ref)
        if journal is not None:
            journal.append((trace_id, ts, ref))
        chunk.append((start, trace, slicing, (base + index, trace_id, ts)))
        if len(chunk) == CHUNK_TRACES:
            fold_chunk(chunk)
            chunk = []
        if joiner.pending:
            deltas.extend(joiner.on_trace(trace_id, ref))
    fold_chunk(chunk)
    count["duplicates"] += duplicates
    count["late"] += late
    return n, dropped


def fold_chunk(pipe, list chunk):
    """`monitor.admit.fold_chunk_python`, compiled: same arguments, same effects."""
    cdef Py_ssize_t i, j, n = len(chunk)
    cdef dict by_window
    cdef list items, traces, slicings, exemplars
    if n == 0:
        return
    start = chunk[0][0]
    for i in range(1, n):
        if chunk[i][0] != start:
            break
    else:
        _fold_window(pipe, start, chunk)  # nearly always: a chunk within one window
        return
    by_window = {}
    for item in chunk:
        by_window.setdefault(item[0], []).append(item)
    for start, items in by_window.items():
        _fold_window(pipe, start, items)


cdef void _fold_window(pipe, start, list items) except *:
    cdef Py_ssize_t j, m = len(items)
    cdef list traces = [None] * m, slicings = [None] * m, exemplars = [None] * m
    cdef dict latest = {}, newest = {}
    cdef dict in_window
    cdef PyObject* found
    for j in range(m):
        item = <tuple>items[j]
        traces[j] = item[1]
        slicings[j] = item[2]
        exemplars[j] = item[3]
    pipe.folder.fold(pipe.windows.table(start), traces, slicings, exemplars,
                     pipe.last_traces.setdefault(start, []))
    pipe.input["folded"] += m
    in_window = pipe.components.setdefault(start, {})
    for j in range(m):
        release, system = (<tuple>slicings[j])[0], traces[j].system
        found = PyDict_GetItem(latest, release)
        if found != NULL and <object>found == system:
            continue
        latest[release] = system
        seen_components = in_window.setdefault(release, set())
        if len(seen_components) < COMPONENTS_MAX:
            seen_components.add(system.components())
    for j in range(m):
        otel = traces[j].otel
        if otel is not None and otel.trace_id:
            newest[(slicings[j], traces[j].decision)] = j
    if not newest:
        return
    cells_of, cells = pipe.cells_of, pipe.exemplars
    for j in sorted(newest.values()):
        trace = traces[j]
        decision = trace.decision
        exemplar = (trace.otel.trace_id, exemplars[j][2], trace.signals.get("top_score"))
        for key in cells_of(slicings[j]):
            cells[(key, decision)] = exemplar
