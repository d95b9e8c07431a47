# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled admission: `monitor/aggregate/admission.py`'s loop with its common case in C.

A message with no backslash that starts with its schema, decodes strictly and has no
content key in its maps is decoded here as `parts.decode_trace` does, with the parts'
cache lookups in C, and checked by `rules.problem` (the one home of the acceptance
rules); any other message, or one with a problem, goes to `ingest.parse`, which decides
its fate exactly as in the reference. A slicing not yet in the slicer's cache is
computed by `Slicer.keys`, label joins by `Joiner.on_trace`. `fold_chunk` is
`admission.fold_chunk_python` in C. tests/test_admission.py checks a compiled and a
pure-Python pipeline end in the same state.
"""

from cpython.datetime cimport import_datetime
from cpython.dict cimport PyDict_GetItem
from cpython.ref cimport PyObject, Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from libc.stdlib cimport free, malloc
from libc.string cimport memchr, memset

from monitor.aggregate._clock cimport _floor_div, _seconds
from monitor.aggregate._parts cimport _Known, _put
from monitor.aggregate._slots cimport _check_slots, _of, _offset, _slot

cdef extern from "Python.h":
    bint PyUnicode_IS_ASCII(object)
    void* PyUnicode_DATA(object)
    Py_ssize_t PyUnicode_GET_LENGTH(object)

import_datetime()

import msgspec

from monitor.aggregate.admission import CHUNK_TRACES, COMPONENTS_MAX, failed, future
from monitor.aggregate.joins import TraceRef
from monitor.ingest.contract import CONTENT_FIELDS, DECISIONS, Otel, Trace, to_json
from monitor.ingest.parse import TRACE_PREFIX, Rejection, parse
from monitor.ingest.parts import CHECKS, REQUIREMENTS, SLICE, SYSTEM, WIRE, Unusual
from monitor.ingest.rules import KNOWN_REASON_SET, OTEL_ID_CHARS, TRACE_ID_CHARS, problem
from monitor.ingest.slices import query_length

cdef object _WIRE = WIRE
cdef tuple _DECODE_ERRORS = (msgspec.DecodeError, msgspec.ValidationError, RecursionError,
                             Unusual)
cdef frozenset _CONTENT = CONTENT_FIELDS
cdef tuple _DECISIONS = DECISIONS
cdef object _PROBLEM = problem
cdef bytes _PREFIX = TRACE_PREFIX
cdef tuple _LENGTHS = tuple(query_length(tokens) for tokens in range(64))
cdef object _ASTUPLE = msgspec.structs.astuple
_AT = {f.name: i for i, f in enumerate(msgspec.structs.fields(Trace))}  # field positions
cdef Py_ssize_t _TRACE_ID = _AT["trace_id"], _TS = _AT["ts"], _SYSTEM = _AT["system"]
cdef Py_ssize_t _DECISION = _AT["decision"], _REASON = _AT["reason"], _OTEL = _AT["otel"]
cdef Py_ssize_t _SLICE = _AT["slice"], _QUERY_TOKENS = _AT["query_tokens"]
cdef Py_ssize_t _SIGNALS = _AT["signals"], _REQUIREMENTS = _AT["requirements"]
cdef Py_ssize_t _CHECKS = _AT["checks"], _EVALS = _AT["evals"]
# The same fields' slots, for `_fold_window`'s reads of a folded Trace (`_slots.pxd`).
cdef Py_ssize_t T_SYSTEM = _offset(Trace, "system"), T_OTEL = _offset(Trace, "otel")
cdef Py_ssize_t T_DECISION = _offset(Trace, "decision"), T_SIGNALS = _offset(Trace, "signals")
cdef Py_ssize_t O_TRACE_ID = _offset(Otel, "trace_id")
cdef dict _DECISION_CODES = {decision: code for code, decision in enumerate(DECISIONS)}


_check_slots((Trace, Otel))
# The identifier formats of `rules` as character tables (`rules.char_rule`), and its known
# reason codes: what `_clear` vouches for without calling `rules.problem`. Formats of
# another form (no table, or OpenTelemetry ids that differ in more than their length)
# leave every message to `rules.problem`.
_RULES = (TRACE_ID_CHARS, *OTEL_ID_CHARS)
cdef bint _VOUCH = (None not in _RULES and OTEL_ID_CHARS[0].allowed == OTEL_ID_CHARS[1].allowed
                    and all(rule.low == rule.high for rule in OTEL_ID_CHARS))
cdef bytes _ID_ALLOWED = TRACE_ID_CHARS.allowed if _VOUCH else b""
cdef bytes _HEX_ALLOWED = OTEL_ID_CHARS[0].allowed if _VOUCH else b""
cdef Py_ssize_t _ID_LOW = TRACE_ID_CHARS.low if _VOUCH else 0
cdef Py_ssize_t _ID_HIGH = TRACE_ID_CHARS.high if _VOUCH else 0
cdef Py_ssize_t _OTEL_TRACE_LEN = OTEL_ID_CHARS[0].low if _VOUCH else 0
cdef Py_ssize_t _OTEL_SPAN_LEN = OTEL_ID_CHARS[1].low if _VOUCH else 0
cdef frozenset _KNOWN = KNOWN_REASON_SET


cdef _Known _SYSTEM_PART = _Known(SYSTEM), _SLICE_PART = _Known(SLICE)
cdef _Known _REQUIREMENTS_PART = _Known(REQUIREMENTS), _CHECKS_PART = _Known(CHECKS)


cdef object _clean(bytes raw, Py_ssize_t max_bytes):
    """The trace and its fields (a tuple, in `Trace`'s order: reading a Struct's
    attributes one by one cost ~8% of the replay) of a message `ingest.parse` would
    accept as is, else None."""
    cdef Py_ssize_t n = len(raw)
    cdef tuple values
    # A backslash (escapes) or a DEL byte (a control character JSON lets be raw): parse's
    # slow path decides, as `ingest.parse` routes them.
    if (n > max_bytes or memchr(<const char*>raw, 92, n) != NULL
            or memchr(<const char*>raw, 127, n) != NULL or not raw.startswith(_PREFIX)):
        return None
    try:
        # parts.decode_trace, with the parts' cache lookups in C, in the decoded fields'
        # own new tuple (no list and second tuple to copy them through).
        values = _ASTUPLE(_WIRE.decode(raw))
        _put(values, _SYSTEM, _SYSTEM_PART.get(values[_SYSTEM]))
        _put(values, _SLICE, _SLICE_PART.get(values[_SLICE]))
        _put(values, _REQUIREMENTS, _REQUIREMENTS_PART.get(values[_REQUIREMENTS]))
        _put(values, _CHECKS, _CHECKS_PART.get(values[_CHECKS]))
    except _DECODE_ERRORS:
        return None
    maps = values[_SIGNALS]  # (a slice with a content key never leaves `_part`)
    if maps and not _CONTENT.isdisjoint(maps):
        return None
    maps = values[_EVALS]
    if maps and not _CONTENT.isdisjoint(maps):
        return None
    trace = Trace(*values)
    if not _clear(values) and _PROBLEM(trace) is not None:
        return None
    return trace, values


cdef inline bint _fits(s, const unsigned char* allowed, Py_ssize_t low, Py_ssize_t high):
    """`s` is a str of low..high characters, each ASCII and allowed."""
    cdef Py_ssize_t i, n
    cdef const unsigned char* data
    if type(s) is not str or not PyUnicode_IS_ASCII(s):
        return False
    n = PyUnicode_GET_LENGTH(s)
    if n < low or n > high:
        return False
    data = <const unsigned char*>PyUnicode_DATA(s)
    for i in range(n):
        if not allowed[data[i]]:
            return False
    return True


cdef bint _clear(tuple fields):
    """True where `rules.problem` surely finds nothing (its common case, in C); False
    leaves the verdict to `rules.problem`."""
    if not _VOUCH or not _fits(fields[_TRACE_ID], _ID_ALLOWED, _ID_LOW, _ID_HIGH):
        return False
    otel = fields[_OTEL]
    if otel is not None:
        if otel.trace_id is not None and not _fits(otel.trace_id, _HEX_ALLOWED,
                                                   _OTEL_TRACE_LEN, _OTEL_TRACE_LEN):
            return False
        if otel.span_id is not None and not _fits(otel.span_id, _HEX_ALLOWED,
                                                  _OTEL_SPAN_LEN, _OTEL_SPAN_LEN):
            return False
    if fields[_TS].tzinfo is None:
        return False
    reason = fields[_REASON]
    if reason is None:
        return fields[_DECISION] != "abstain"
    return reason in _KNOWN


cdef object _raw_key(tuple fields, tuple dimensions):
    """The slicer's cache key of a trace (`Slicer.keys`): release, query length, values."""
    cdef Py_ssize_t i, n = len(dimensions)
    cdef tuple key = PyTuple_New(n + 2)
    cdef PyObject* found
    release = fields[_SYSTEM].release
    Py_INCREF(release)
    PyTuple_SET_ITEM(key, 0, release)
    tokens = fields[_QUERY_TOKENS]
    if tokens is None:
        length = None
    elif tokens < 64:
        length = _LENGTHS[tokens]
    else:
        length = query_length(tokens)
    Py_INCREF(length)
    PyTuple_SET_ITEM(key, 1, length)
    values = fields[_SLICE]
    for i in range(n):
        found = PyDict_GetItem(values, dimensions[i])
        value = None if found == NULL else <object>found
        Py_INCREF(value)
        PyTuple_SET_ITEM(key, i + 2, value)
    return key


def admit(pipe, list raws, list dead, list deltas, double limit, list aside):
    """`monitor.aggregate.admission.admit_python`, compiled: same arguments, same effects."""
    windows, seen, count, joiner = pipe.windows, pipe.seen, pipe.input, pipe.joiner
    slicer = pipe.slicer
    cdef dict refs = seen.refs
    cdef dict cache = slicer.cache
    cdef tuple dimensions = slicer.dimensions
    cdef Py_ssize_t max_bytes = pipe.settings.max_message_bytes
    cdef Py_ssize_t index, n = len(raws), base = count["read"], dropped = 0
    cdef Py_ssize_t duplicates = 0, late = 0, fields_dropped
    cdef double ts, watermark = windows.watermark
    cdef PyObject* found
    size, lateness = windows.window_seconds, windows.lateness_seconds
    cdef bint is_late, whole_windows = type(size) is int and 0 < size < 1_000_000_000
    cdef long long first, width = size if whole_windows else 0
    cdef double window = width
    keys, order_append = slicer.keys, seen.order.append
    cdef Py_ssize_t retained_max = seen.max_entries
    journal = pipe.journal
    rejected_by_reason = pipe.rejected_by_reason
    cdef list chunk = []
    cdef tuple fields
    for index in range(n):
        raw = raws[index]
        try:  # everything that decides a message's fate, before anything is written
            clean = _clean(raw, max_bytes)
            fields_dropped = 0
            if clean is None:
                result = parse(raw, max_bytes, Trace)
                fields_dropped = result.content_fields_dropped
                if isinstance(result, Rejection):
                    dropped += fields_dropped
                    rejected_by_reason[result.reason] += 1
                    dead.append((index, result))
                    continue
                trace = result.event
                fields = _ASTUPLE(trace)
            else:
                trace, fields = clean
            ts = _seconds(fields[_TS])
            if ts > limit:  # the clock-bounded watermark: a bad clock cannot move it
                if aside is not None:
                    aside.append((index, ts))
                    continue
                dropped += fields_dropped
                rejected_by_reason["future_timestamp"] += 1
                dead.append((index, future(trace, limit)))
                continue
            dropped += fields_dropped
            trace_id = fields[_TRACE_ID]
            if trace_id in refs:
                duplicates += 1
                continue
            if whole_windows:  # int(ts // size) * size, in C
                first = <long long>_floor_div(ts, window) * width
                start = first
                is_late = first + width <= watermark - lateness
            else:
                start = int(ts // size) * size
                is_late = start + size <= watermark - lateness
            if is_late:
                late += 1
                detail = f"window closed at watermark {watermark:.0f}"
                dead.append((index, Rejection("late", detail, to_json(trace), 0)))
                continue
            found = PyDict_GetItem(cache, _raw_key(fields, dimensions))
            slicing = keys(trace) if found == NULL else <object>found
            ref = TraceRef(start, slicing, fields[_DECISION])
        except Exception as exc:  # a bug, not the input: this message alone is set apart
            rejected_by_reason["worker_error"] += 1
            dead.append((index, failed(raw, exc)))
            continue
        if ts > watermark:
            watermark = ts
            windows.watermark = ts
        # Seen.first, inline (the trace_id is not in `refs`: checked above).
        refs[trace_id] = ref
        order_append((ts, trace_id))
        if len(refs) > retained_max:
            seen.evict_oldest()
        if journal is not None:
            journal.append((trace_id, ts, ref))
        chunk.append((start, trace, slicing, (base + index, trace_id, ts)))
        if len(chunk) == CHUNK_TRACES:
            fold_chunk(pipe, chunk)
            chunk = []
        if joiner.pending:
            deltas.extend(joiner.on_trace(trace_id, ref))
    fold_chunk(pipe, chunk)
    count["duplicates"] += duplicates
    count["late"] += late
    return n - (len(aside) if aside else 0), dropped


def fold_chunk(pipe, list chunk):
    """`monitor.aggregate.admission.fold_chunk_python`, compiled: same arguments, same effects."""
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
    cdef Py_ssize_t i, j, m = len(items), k, width, code, size, count = 0
    cdef Py_ssize_t* newest
    cdef Py_ssize_t* found_at
    cdef list traces = [None] * m, slicings = [None] * m, exemplars = [None] * m
    cdef list rows
    cdef dict latest = {}, made
    cdef dict in_window
    cdef PyObject* found
    for j in range(m):
        item = <tuple>items[j]
        traces[j] = item[1]
        slicings[j] = item[2]
        exemplars[j] = item[3]
    table = pipe.windows.table(start)
    rows = pipe.folder.fold(table, traces, slicings, exemplars,
                            pipe.last_traces.setdefault(start, []))
    pipe.input["folded"] += m
    in_window = pipe.components.setdefault(start, {})
    for j in range(m):
        release, system = (<tuple>slicings[j])[0], _slot(_of(traces[j], Trace), T_SYSTEM)
        found = PyDict_GetItem(latest, release)
        if found != NULL and (<object>found is system or <object>found == system):
            continue
        latest[release] = system
        seen_components = in_window.setdefault(release, set())
        if len(seen_components) < COMPONENTS_MAX:
            seen_components.add(system.components())
    # OpenTelemetry exemplars: the newest traced trace per (cell, decision) of the chunk,
    # found newest first by the cells' rows (a row and a decision's code as one index
    # into a C array: cheaper than `admission.fold_chunk_python`'s (slicing, decision)
    # and cell keys, or a dict of ints), written in the order found.
    width = len(_DECISIONS)
    size = len(table) * width
    newest = <Py_ssize_t*>malloc(size * sizeof(Py_ssize_t))
    found_at = <Py_ssize_t*>malloc(m * len(<tuple>rows[0]) * sizeof(Py_ssize_t)) if m else NULL
    if newest == NULL or (m and found_at == NULL):
        free(newest)
        free(found_at)
        raise MemoryError()
    try:
        memset(newest, 0xff, size * sizeof(Py_ssize_t))  # -1: not found yet
        for j in range(m - 1, -1, -1):
            otel = _slot(traces[j], T_OTEL)
            if otel is None or not _slot(_of(otel, Otel), O_TRACE_ID):
                continue
            code = _DECISION_CODES[_slot(traces[j], T_DECISION)]
            for row in <tuple>rows[j]:
                k = row
                if k < 0:
                    break
                k = k * width + code
                if newest[k] < 0:
                    newest[k] = j
                    found_at[count] = k
                    count += 1
        keys, cells, made = table.keys, pipe.exemplars, {}
        for i in range(count):
            k = found_at[i]
            j = newest[k]
            exemplar = made.get(j)
            if exemplar is None:
                trace = traces[j]
                exemplar = made[j] = (_slot(_slot(trace, T_OTEL), O_TRACE_ID), exemplars[j][2],
                                      (<dict>_slot(trace, T_SIGNALS)).get("top_score"))
            cells[(keys[k // width], _DECISIONS[k % width])] = exemplar
    finally:
        free(newest)
        free(found_at)
