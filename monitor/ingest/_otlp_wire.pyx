# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled reading of an `otlp_proto` message: protobuf's wire format scanned in C.

`spans` returns what `monitor/ingest/otlp.py`'s walk of a parsed `TracesData` reads,
without building the message's objects: per span its ids, times, the resource's service
name and version, and the attributes, numbered documents and evaluations and events the
mapping keeps, each attribute routed by its key with the reference's own routes
(`otlp._route`) and kept as `otlp._Gather.keep` keeps it. Content is counted, never
converted. Which spans a trace keeps is decided in `otlp.py` alone (`_Gather.add`);
tests/ingest/test_otlp_wire.py checks that both readings give the same fragments.

Raises ValueError on bytes that are not a well-formed TracesData (checked first, as
protobuf's own parse checks them: `_otlp_check.pyx`), and on a span without its ids, as
the reference's walk does.
"""

from libc.stdint cimport int64_t, uint64_t
from libc.string cimport memcpy

from cpython.unicode cimport PyUnicode_DecodeUTF8

from monitor.ingest._protowire cimport _DEPTH, _field, _fixed64, _varint

from monitor.ingest._otlp_check import well_formed

_MALFORMED = "not a TracesData message"


cdef class _Message:
    """The bytes being read, and what `otlp.py` gives a call to read them."""
    cdef const unsigned char* buf
    cdef dict routes
    cdef object route, documents, make
    cdef object ignore, content, keep, row
    cdef frozenset events


cdef object _text(_Message m, Py_ssize_t start, Py_ssize_t stop):
    return PyUnicode_DecodeUTF8(<const char*>(m.buf + start), stop - start, NULL)


cdef object _value(_Message m, Py_ssize_t pos, Py_ssize_t end, int depth):
    """An AnyValue as the reference's `_proto_value` gives it: str, bool, int, float, a
    list of them; "" for kvlist, bytes and an empty value. The last of its fields wins."""
    cdef int number, wire
    cdef Py_ssize_t start, stop
    cdef uint64_t raw
    cdef double real
    value = ""
    if depth > _DEPTH:
        raise ValueError(_MALFORMED)
    while pos < end:
        pos = _field(m.buf, pos, end, &number, &wire, &start, &stop)
        if pos < 0:
            raise ValueError(_MALFORMED)
        if number == 1 and wire == 2:
            value = _text(m, start, stop)
        elif number == 2 and wire == 0:
            _varint(m.buf, start, stop, &raw)
            value = raw != 0
        elif number == 3 and wire == 0:
            _varint(m.buf, start, stop, &raw)
            value = <int64_t>raw
        elif number == 4 and wire == 1:
            raw = _fixed64(m.buf, start)
            memcpy(&real, &raw, 8)
            value = real
        elif number == 5 and wire == 2:
            value = _array(m, start, stop, depth + 1)
        elif (number == 6 or number == 7) and wire == 2:
            value = ""
    return value


cdef list _array(_Message m, Py_ssize_t pos, Py_ssize_t end, int depth):
    cdef int number, wire
    cdef Py_ssize_t start, stop
    cdef list values = []
    while pos < end:
        pos = _field(m.buf, pos, end, &number, &wire, &start, &stop)
        if pos < 0:
            raise ValueError(_MALFORMED)
        if number == 1 and wire == 2:
            values.append(_value(m, start, stop, depth))
    return values


cdef object _key(_Message m, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t* value_start,
                 Py_ssize_t* value_stop):
    """A KeyValue's key ("" for none); the bounds of its value (-1: none)."""
    cdef int number, wire
    cdef Py_ssize_t start, stop, key_start = -1, key_stop = -1
    value_start[0] = value_stop[0] = -1
    while pos < end:
        pos = _field(m.buf, pos, end, &number, &wire, &start, &stop)
        if pos < 0:
            raise ValueError(_MALFORMED)
        if number == 1 and wire == 2:
            key_start, key_stop = start, stop
        elif number == 2 and wire == 2:
            value_start[0], value_stop[0] = start, stop
    return _text(m, key_start, key_stop) if key_start >= 0 else ""


cdef tuple _key_value(_Message m, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t* value_start,
                      Py_ssize_t* value_stop):
    """A KeyValue's key and its route; the bounds of its value (-1: none)."""
    key = _key(m, pos, end, value_start, value_stop)
    route = m.routes.get(key)
    if route is None:
        route = m.route(key)
    return key, route


cdef int _keep(_Message m, Py_ssize_t pos, Py_ssize_t end, dict attrs, list docs,
               list evals) except -1:
    """One KeyValue kept as `otlp._Gather.keep` keeps it (its attribute, or its field of
    a numbered document or evaluation, or GenAI documents); returns the content fields
    it dropped."""
    cdef Py_ssize_t value_start, value_stop
    key, route = _key_value(m, pos, end, &value_start, &value_stop)
    kind = (<tuple>route)[0]
    if kind is m.ignore:
        return 0
    if kind is m.content:
        return 1
    if kind is m.row:
        _, rows, index, at, content = <tuple>route
        if index <= 1000:  # a numbered key no instrumentor writes: not worth a row each
            _put(docs if rows == "docs" else evals, index, at,
                 None if at is None else _value_at(m, value_start, value_stop))
        return 1 if content else 0
    value = _value_at(m, value_start, value_stop)
    if kind is m.keep:
        attrs[key] = value
        return 0
    found, dropped = m.documents(value)  # gen_ai.retrieval.documents
    docs.extend(found)
    return dropped


cdef object _value_at(_Message m, Py_ssize_t start, Py_ssize_t stop):
    return _value(m, start, stop, 0) if start >= 0 else ""


cdef _put(list rows, Py_ssize_t index, object at, object value):
    """Field `at` (0 id or name, 1 score; None: the row only) of row `index`."""
    while len(rows) <= index:
        rows.append((None, None))
    first, second = rows[index]
    if at == 0:
        rows[index] = (value if isinstance(value, str) else None, second)
    elif at == 1:
        rows[index] = (first, float(value) if isinstance(value, (int, float))
                       and not isinstance(value, bool) else None)


cdef int _content(_Message m, Py_ssize_t pos, Py_ssize_t end) except -1:
    """1 if a KeyValue (of an event the mapping does not read) is content, else 0."""
    cdef Py_ssize_t value_start, value_stop
    key, route = _key_value(m, pos, end, &value_start, &value_stop)
    return 1 if (<tuple>route)[0] is m.content else 0


cdef tuple _event(_Message m, Py_ssize_t pos, Py_ssize_t end):
    """(name, kept attributes or None for an event not read, content dropped)."""
    cdef int number, wire, dropped = 0
    cdef Py_ssize_t start, stop, begin = pos
    name = ""
    while pos < end:
        pos = _field(m.buf, pos, end, &number, &wire, &start, &stop)
        if pos < 0:
            raise ValueError(_MALFORMED)
        if number == 2 and wire == 2:
            name = _text(m, start, stop)
    cdef bint read = name in m.events
    cdef dict attrs = {}
    pos = begin
    while pos < end:
        pos = _field(m.buf, pos, end, &number, &wire, &start, &stop)
        if number == 3 and wire == 2:
            # an event's documents and evaluation rows are not read: scratch lists
            dropped += _keep(m, start, stop, attrs, [], []) if read else _content(m, start, stop)
    return name, attrs if read else None, dropped


cdef _span(_Message m, Py_ssize_t pos, Py_ssize_t end, object service, object version,
           list out):
    cdef int number, wire, dropped = 0
    cdef Py_ssize_t start, stop
    cdef uint64_t start_time = 0, end_time = 0
    cdef unsigned int flags = 0
    trace_id = span_id = parent = b""
    cdef dict attrs = {}
    cdef list docs = [], evals = [], events = []
    while pos < end:
        pos = _field(m.buf, pos, end, &number, &wire, &start, &stop)
        if pos < 0:
            raise ValueError(_MALFORMED)
        if wire == 2:
            if number == 1:
                trace_id = m.buf[start:stop]
            elif number == 2:
                span_id = m.buf[start:stop]
            elif number == 4:
                parent = m.buf[start:stop]
            elif number == 9:
                dropped += _keep(m, start, stop, attrs, docs, evals)
            elif number == 11:
                name, kept, count = _event(m, start, stop)
                dropped += count
                if kept is not None:
                    events.append((name, kept))
        elif wire == 1:
            if number == 7:
                start_time = _fixed64(m.buf, start)
            elif number == 8:
                end_time = _fixed64(m.buf, start)
        elif wire == 5 and number == 16:  # flags (fixed32): is the parent remote
            flags = (m.buf[start] | (m.buf[start + 1] << 8) | (m.buf[start + 2] << 16)
                     | (<unsigned int>m.buf[start + 3] << 24))
    if len(trace_id) != 16 or len(span_id) != 8:
        raise ValueError("a span without a 16-byte trace id or 8-byte span id")
    out.append((trace_id.hex(), m.make(span_id.hex(), parent.hex(), start_time, end_time,
                                       service, version, attrs, docs, evals, events,
                                       len(parent) > 0 and flags & 0x300 == 0x300),
                dropped))


cdef _resource(_Message m, Py_ssize_t pos, Py_ssize_t end, dict found):
    """Put the service.name and service.version of a Resource in `found` (a later value
    of a key replaces an earlier one; a resource given twice is merged, as protobuf
    merges a message field given twice)."""
    cdef int number, wire
    cdef Py_ssize_t start, stop, value_start, value_stop
    while pos < end:
        pos = _field(m.buf, pos, end, &number, &wire, &start, &stop)
        if pos < 0:
            raise ValueError(_MALFORMED)
        if number == 1 and wire == 2:  # an attribute
            key = _key(m, start, stop, &value_start, &value_stop)
            if key == "service.name" or key == "service.version":
                found[key] = _value_at(m, value_start, value_stop)


def spans(bytes raw, dict routes, route, tuple kinds, frozenset events, documents, make):
    """Every span of an `otlp_proto` TracesData, in order: (trace id, the span as
    `make(span id, parent span id ("" for none), start, end (unix ns), service, version,
    attributes, documents, evaluations, events, whether the parent is remote (the span
    flags))` makes it, content fields dropped).
    `routes` and `route` route an attribute by its key, `kinds` are the route kinds
    (ignore, content, keep, row; any other: GenAI documents, read by `documents`),
    `events` the event names read."""
    cdef _Message m = _Message()
    cdef const unsigned char* buf = raw
    cdef Py_ssize_t pos = 0, end = len(raw), start, stop, inner, s2, e2, s3, e3, inner2
    cdef int number, wire, n2, w2, n3, w3
    cdef list out = []
    m.buf = buf
    m.routes, m.route, m.events, m.documents, m.make = routes, route, events, documents, make
    m.ignore, m.content, m.keep, m.row = kinds
    if not well_formed(raw):
        raise ValueError(_MALFORMED)
    while pos < end:
        pos = _field(buf, pos, end, &number, &wire, &start, &stop)
        if pos < 0:
            raise ValueError(_MALFORMED)
        if number != 1 or wire != 2:
            continue
        # ResourceSpans: its resource first (wherever it is), then its scopes' spans.
        found = {}
        inner = start
        while inner < stop:
            inner = _field(buf, inner, stop, &n2, &w2, &s2, &e2)
            if inner < 0:
                raise ValueError(_MALFORMED)
            if n2 == 1 and w2 == 2:
                _resource(m, s2, e2, found)
        service, version = found.get("service.name"), found.get("service.version")
        service = service if isinstance(service, str) else None
        version = version if isinstance(version, str) else None
        inner = start
        while inner < stop:
            inner = _field(buf, inner, stop, &n2, &w2, &s2, &e2)
            if n2 != 2 or w2 != 2:
                continue
            inner2 = s2  # ScopeSpans: its spans (field 2)
            while inner2 < e2:
                inner2 = _field(buf, inner2, e2, &n3, &w3, &s3, &e3)
                if inner2 < 0:
                    raise ValueError(_MALFORMED)
                if n3 == 2 and w3 == 2:
                    _span(m, s3, e3, service, version, out)
    return out
