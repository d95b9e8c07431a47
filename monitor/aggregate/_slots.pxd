# cython: language_level=3
"""Fields of msgspec Structs read from their slots, in C: for the compiled fold and
admission.

msgspec stores each field in a slot described by a member descriptor; `getattr` finds it
through the type's attribute lookup (~150 instructions), the slot at its offset is one
load: ~4% of the replay's instructions. The offsets are read from the descriptors when
a module loads (`_offset`) and checked against getattr on an instance of each type it
reads (`_check_slots`); `_of` checks an object's exact type before its slots are read."""

from cpython.ref cimport PyObject

cdef extern from "Python.h":
    ctypedef struct PyMemberDef:
        Py_ssize_t offset
    ctypedef struct PyMemberDescrObject:
        PyMemberDef* d_member


cdef inline Py_ssize_t _offset(cls, str name) except -1:
    descriptor = cls.__dict__.get(name)  # (anything unexpected: ImportError, Python fold)
    if type(descriptor).__name__ != "member_descriptor":
        raise ImportError(f"{cls.__name__}.{name} is not a slot: monitor.aggregate._fold needs one")
    return (<PyMemberDescrObject*><PyObject*>descriptor).d_member.offset


cdef inline object _slot(object obj, Py_ssize_t offset):
    cdef PyObject* value = (<PyObject**>((<char*><PyObject*>obj) + offset))[0]
    if value == NULL:
        raise AttributeError(offset)
    return <object>value


cdef inline object _of(object obj, cls):
    if type(obj) is not cls:
        raise TypeError(f"expected {cls.__name__}, got {type(obj).__name__}")
    return obj


cdef inline void _check_slots(tuple classes) except *:
    """Every offset of these Structs reads what getattr reads, on an instance with a
    distinct value per field (a Struct's constructor does not check types: decoding
    does); called by each module that reads slots, when it is imported."""
    import msgspec
    for cls in classes:
        names = [field.name for field in msgspec.structs.fields(cls)]
        probe = cls(*[object() for _ in names])
        for name in names:
            if _slot(probe, _offset(cls, name)) is not getattr(probe, name):
                raise ImportError(f"{cls.__name__}.{name}: its slot is not where it says")
