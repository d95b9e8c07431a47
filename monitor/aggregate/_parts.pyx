# cython: language_level=3, boundscheck=False, wraparound=False
"""A decision's repeating parts (system, slice, requirements, checks) for the compiled
admission (`_admission.pyx`): each found by a hash of its bytes where they lie in the
message, else decoded by `monitor.ingest.parts` (its caches and checks)."""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.dict cimport PyDict_GetItem
from cpython.ref cimport PyObject
from libc.string cimport memcmp

from monitor.aggregate._digest cimport _digest

from monitor.ingest.parts import CACHE_MAX


cdef class _Known:
    """One repeating part's values found by the hash of their bytes in the message, with
    no copy of them (`bytes(raw)`, hashed afresh, was ~6% of the replay's admission);
    the bytes are kept to compare. A part not found is decoded by the part itself
    (`parts._Part`: its cache, its checks, `Unusual` where it does not vouch)."""

    def __init__(self, part):
        self.by_hash = {}
        self.part = part

    cdef object get(self, raw):
        cdef Py_buffer view
        cdef PyObject* found
        cdef bytes known
        PyObject_GetBuffer(raw, &view, PyBUF_SIMPLE)
        try:
            digest = _digest(<const unsigned char*>view.buf, view.len)
            found = PyDict_GetItem(self.by_hash, digest)
            if found != NULL:
                known = <bytes>(<tuple><object>found)[0]
                if (len(known) == view.len
                        and memcmp(<const char*>known, view.buf, view.len) == 0):
                    return (<tuple><object>found)[1]
        finally:
            PyBuffer_Release(&view)
        value = self.part(raw)
        if len(self.by_hash) >= CACHE_MAX:
            self.by_hash.clear()
        self.by_hash[digest] = (bytes(raw), value)
        return value
