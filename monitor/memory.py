"""A long fold's memory: fewer garbage collections, and resident memory kept flat.

`tune_gc` is the one garbage-collector setting, for every process that folds for long
(`ragmon replay`/`backtest`/`report`, the worker's states process).

Measured in the soak (benchmarks/RESULTS.md, session 9): after warm-up about half of
each worker process's malloc heap was free and yet resident (blocks freed between
objects that stay pin their pages). `trim` returns the free pages inside the heap to
the system (`malloc_trim(0)`, a few milliseconds), every `TRIM_SECONDS` in both worker
processes. Fixing glibc's arena count and mmap/trim thresholds as well (`mallopt`) was
tried and taken out: the worker then measured 0.76x bare Faust (6 dimensions) where it
had measured 0.93-1.02x, and fell behind in both soaks run with it. Does nothing on a
libc without `malloc_trim` (musl, macOS).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from typing import Final

__all__ = ["TRIM_SECONDS", "available", "trim", "tune_gc"]

TRIM_SECONDS: Final = 30.0  # how often a worker process trims (each trim: milliseconds)


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    return libc if hasattr(libc, "malloc_trim") else None


_LIBC: Final = _libc()


def available() -> bool:
    """Whether this libc has `malloc_trim` (else `trim` does nothing)."""
    return _LIBC is not None


def trim() -> None:
    """Give free heap pages back to the system."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def tune_gc() -> None:
    """Fewer, cheaper collections for a long fold: the state holds no reference cycles.

    Freezing the start-up heap and raising the gen-0 threshold measured ~1.3x faster
    replay here (`benchmarks/RESULTS.md`).
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)
