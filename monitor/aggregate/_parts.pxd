# cython: language_level=3
"""The compiled admission's repeating parts (`_parts.pyx`): declared here to be cimported."""

from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_SetItem


cdef class _Known:
    cdef dict by_hash
    cdef object part
    cdef object get(self, raw)


cdef inline void _put(tuple fresh, Py_ssize_t i, value) except *:
    """Replace item `i` of a tuple only this code holds (PyTuple_SetItem takes a reference
    to `value` and releases the old item; it refuses a tuple held anywhere else)."""
    Py_INCREF(value)
    PyTuple_SetItem(fresh, i, value)
