# cython: language_level=3, boundscheck=False, wraparound=False
"""The lines of a JSONL file, cut in C: `files.batches`' per-line Python loop (read,
strip, test for blank, append) was ~7% of a rich replay's instructions.

`take` reads complete lines out of a block of the file as the reference loop in
`monitor/offline/files.py` reads them one by one: a line ends at `\\n`, loses its trailing
`\\r` and `\\n` characters (`bytes.rstrip(b"\\r\\n")`), and is skipped when empty or all
ASCII whitespace (`bytes.isspace`); every line, skipped or not, has a number.
tests/offline/test_files.py checks both give the same batches.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.string cimport memchr


cdef inline bint _space(unsigned char c):
    # bytes.isspace: space, \t, \n, \v, \f, \r
    return c == 32 or 9 <= c <= 13


def take(bytes data, Py_ssize_t pos, Py_ssize_t number, list lines, list numbers,
         Py_ssize_t limit, bint final):
    """Append the lines of `data` from `pos` to `lines` (their numbers to `numbers`, the
    first being `number`) until `lines` holds `limit` or the complete lines run out (with
    `final`, the end of `data` ends a line too). Returns (the position after the last
    line read, the next line's number)."""
    cdef const char* base = PyBytes_AS_STRING(data)
    cdef Py_ssize_t n = len(data), end, stop, i
    cdef const char* found
    while len(lines) < limit and pos < n:
        found = <const char*>memchr(base + pos, 10, n - pos)
        if found == NULL:
            if not final:
                break
            end = n
        else:
            end = found - base
        stop = end
        while stop > pos and (base[stop - 1] == 13 or base[stop - 1] == 10):
            stop -= 1
        for i in range(pos, stop):
            if not _space(<unsigned char>base[i]):
                lines.append(PyBytes_FromStringAndSize(base + pos, stop - pos))
                numbers.append(number)
                break
        number += 1
        pos = end + 1 if found != NULL else n
    return pos, number
