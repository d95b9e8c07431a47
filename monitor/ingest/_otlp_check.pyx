# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Whether bytes are a well-formed OTLP `TracesData`, checked as protobuf's own parse
(upb) checks them, so that the compiled reading (`_otlp_wire.pyx`) refuses exactly the
messages the reference refuses: every nested message well-formed, every string UTF-8, at
most 100 levels deep; a field of the wrong wire type, or a number the schema does not
know, is an unknown field and skipped. The schema is read from the installed
opentelemetry-proto's descriptors."""

from libc.stdint cimport uint64_t
from libc.string cimport memcpy

from monitor.ingest._protowire cimport _DEPTH, _skip, _skip_group, _varint

from opentelemetry.proto.trace.v1.trace_pb2 import TracesData


# Per message type (reachable from TracesData) and field number: what a field is and
# its wire type.
cdef enum:
    _TYPES = 32
    _NUMBERS = 32
cdef enum:  # a field's kind; 0 (the tables' zeros): a number the schema does not have
    _MESSAGE = 1
    _STRING = 2
    _SCALAR = 3
cdef int _KIND[_TYPES][_NUMBERS]
cdef int _WIRE_OF[_TYPES][_NUMBERS]
cdef int _SUB[_TYPES][_NUMBERS]
_WIRES = {1: 1, 2: 5, 6: 1, 16: 1, 7: 5, 15: 5, 9: 2, 12: 2, 11: 2, 10: 3}  # else varint


def _schema():
    """Fill the tables, walking every message type reachable from TracesData (index 0)."""
    types = {TracesData.DESCRIPTOR.full_name: 0}
    pending = [TracesData.DESCRIPTOR]
    while pending:
        descriptor = pending.pop()
        at = types[descriptor.full_name]
        for field in descriptor.fields:
            sub = field.message_type
            if sub is not None and sub.full_name not in types:
                if len(types) == _TYPES:
                    raise RuntimeError("OTLP schema larger than the checker's tables")
                types[sub.full_name] = len(types)
                pending.append(sub)
            if field.number >= _NUMBERS:
                continue  # beyond the tables: read as unknown, skipped unchecked
            _WIRE_OF[at][field.number] = _WIRES.get(field.type, 0)
            if sub is not None:
                _KIND[at][field.number] = _MESSAGE
                _SUB[at][field.number] = types[sub.full_name]
            elif field.type == 9:
                _KIND[at][field.number] = _STRING
            else:
                _KIND[at][field.number] = _SCALAR
    return 0


cdef int _TRACES_DATA = _schema()


cdef bint _utf8(const unsigned char* s, Py_ssize_t n) noexcept nogil:
    """Whether `s` is valid UTF-8 (no overlong forms, surrogates or code points beyond
    U+10FFFF), as protobuf requires of a string field."""
    cdef Py_ssize_t i = 0
    cdef uint64_t word
    cdef unsigned char c, c1
    cdef int more
    while i < n:
        while i + 8 <= n:
            memcpy(&word, s + i, 8)
            if word & 0x8080808080808080ULL:
                break
            i += 8
        if i >= n:
            break
        c = s[i]
        if c < 0x80:
            i += 1
            continue
        if c < 0xC2 or c > 0xF4:
            return False
        more = 1 if c < 0xE0 else (2 if c < 0xF0 else 3)
        if i + more >= n:  # its continuation bytes are i+1 .. i+more
            return False
        c1 = s[i + 1]
        if (c1 & 0xC0) != 0x80:
            return False
        if (c == 0xE0 and c1 < 0xA0) or (c == 0xED and c1 > 0x9F):
            return False
        if (c == 0xF0 and c1 < 0x90) or (c == 0xF4 and c1 > 0x8F):
            return False
        if more >= 2 and (s[i + 2] & 0xC0) != 0x80:
            return False
        if more == 3 and (s[i + 3] & 0xC0) != 0x80:
            return False
        i += more + 1
    return True


cdef bint _valid(const unsigned char* buf, Py_ssize_t pos, Py_ssize_t end, int kind,
                 int depth) noexcept nogil:
    """Whether buf[pos:end] is a well-formed message of type `kind` (schema index)."""
    cdef uint64_t tag, length
    cdef uint64_t number
    cdef int wire, field
    if depth > _DEPTH:
        return False
    while pos < end:
        pos = _varint(buf, pos, end, &tag)
        number = tag >> 3
        if pos < 0 or number == 0 or number > 536870911:
            return False
        wire = <int>(tag & 7)
        if wire == 3:
            pos = _skip_group(buf, pos, end, number, depth + 1)
            if pos < 0:
                return False
            continue
        if wire == 4 or wire > 5:
            return False
        field = <int>number if number < _NUMBERS else 0
        if wire != 2 or field == 0 or _WIRE_OF[kind][field] != 2:
            pos = _skip(buf, pos, end, wire)
            if pos < 0:
                return False
            continue
        pos = _varint(buf, pos, end, &length)
        if pos < 0 or length > <uint64_t>(end - pos):
            return False
        if _KIND[kind][field] == _MESSAGE:
            if not _valid(buf, pos, pos + <Py_ssize_t>length, _SUB[kind][field], depth + 1):
                return False
        elif _KIND[kind][field] == _STRING:
            if not _utf8(buf + pos, <Py_ssize_t>length):
                return False
        pos += <Py_ssize_t>length
    return True



def well_formed(bytes raw) -> bool:
    """Whether `raw` is a well-formed TracesData."""
    cdef const unsigned char* buf = raw
    return _valid(buf, 0, len(raw), _TRACES_DATA, 0)
