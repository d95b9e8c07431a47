# cython: language_level=3
"""Protobuf's wire format, read in C: varints, tags, field bounds, skipping a field or a
group. Inline, for the OTLP checker (`_otlp_check.pyx`) and scanner (`_otlp_wire.pyx`)."""

from libc.stdint cimport uint64_t

cdef enum:
    _DEPTH = 100  # protobuf's default recursion limit for nested messages

cdef inline Py_ssize_t _varint(const unsigned char* buf, Py_ssize_t pos, Py_ssize_t end,
                               uint64_t* out) noexcept nogil:
    """Read a varint at `pos`: the position after it, or -1."""
    cdef uint64_t value = 0
    cdef int shift = 0
    cdef unsigned char byte
    while pos < end and shift < 64:
        byte = buf[pos]
        pos += 1
        value |= (<uint64_t>(byte & 0x7F)) << shift
        if byte < 0x80:
            out[0] = value
            return pos
        shift += 7
    return -1


cdef inline Py_ssize_t _skip(const unsigned char* buf, Py_ssize_t pos, Py_ssize_t end,
                             int wire) noexcept nogil:
    """Skip a field's value of wire type `wire` at `pos`: the position after it, or -1."""
    cdef uint64_t length
    if wire == 0:
        return _varint(buf, pos, end, &length)
    if wire == 1:
        return pos + 8 if pos + 8 <= end else -1
    if wire == 5:
        return pos + 4 if pos + 4 <= end else -1
    if wire == 2:
        pos = _varint(buf, pos, end, &length)
        if pos < 0 or length > <uint64_t>(end - pos):
            return -1
        return pos + <Py_ssize_t>length
    return -1  # groups (deprecated, no OTLP message has them) and invalid types


cdef inline Py_ssize_t _field(const unsigned char* buf, Py_ssize_t pos, Py_ssize_t end,
                              int* number, int* wire, Py_ssize_t* start,
                              Py_ssize_t* stop) noexcept nogil:
    """Read a field's tag at `pos`; for a length-delimited field also its bounds
    (`start`, `stop`). Returns the position after the field, or -1."""
    cdef uint64_t tag, length
    pos = _varint(buf, pos, end, &tag)
    if pos < 0 or (tag >> 3) == 0 or (tag >> 3) > 536870911:
        return -1
    number[0] = <int>(tag >> 3)
    wire[0] = <int>(tag & 7)
    if wire[0] == 2:
        pos = _varint(buf, pos, end, &length)
        if pos < 0 or length > <uint64_t>(end - pos):
            return -1
        start[0] = pos
        stop[0] = pos + <Py_ssize_t>length
        return stop[0]
    start[0] = pos
    if wire[0] == 3:  # a group: only of an unknown field here (`_valid` took the rest)
        pos = _skip_group(buf, pos, end, tag >> 3, 0)
    else:
        pos = _skip(buf, pos, end, wire[0])
    stop[0] = pos
    return pos


cdef inline uint64_t _fixed64(const unsigned char* buf, Py_ssize_t pos) noexcept nogil:
    cdef uint64_t value = 0
    cdef int i
    for i in range(7, -1, -1):
        value = (value << 8) | buf[pos + i]
    return value



cdef inline Py_ssize_t _skip_group(const unsigned char* buf, Py_ssize_t pos, Py_ssize_t end,
                            uint64_t number, int depth) noexcept nogil:
    """Skip a group's fields after its start tag, through its end tag: the position
    after it, or -1."""
    cdef uint64_t tag
    cdef int wire
    if depth > _DEPTH:
        return -1
    while pos < end:
        pos = _varint(buf, pos, end, &tag)
        if pos < 0 or (tag >> 3) == 0:
            return -1
        wire = <int>(tag & 7)
        if wire == 4:
            return pos if (tag >> 3) == number else -1
        if wire == 3:
            pos = _skip_group(buf, pos, end, tag >> 3, depth + 1)
        else:
            pos = _skip(buf, pos, end, wire)
        if pos < 0:
            return -1
    return -1

