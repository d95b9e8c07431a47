"""Keep a long-running process's resident memory flat under glibc's malloc.

Measured in the soak (benchmarks/RESULTS.md, session 9): after warm-up about half of
each worker process's malloc heap was free and yet resident, and the Faust process
grew a second heap when threshold calibration started in a thread. Two glibc
behaviours cause it: every thread that allocates may get its own arena (up to 8 per
core), and the mmap threshold moves: once a large block (a batch's frame, a
calibration array) is freed, blocks of that size come from the heap from then on,
where they leave holes that small objects then pin.

`trim` returns the free pages inside the heap to the system (`malloc_trim(0)`, a few
milliseconds), every `TRIM_SECONDS` in both worker processes (in the soak, run with
`settle` too, the threshold calibration's ~200 MiB peak was back within a minute).
`settle` (one arena, fixed mmap and trim thresholds) is kept for experiments but not
called: with it the worker measured 0.76x bare Faust (6 dimensions) where it had
measured 0.93-1.02x, and fell behind in both soaks run with it (benchmarks/RESULTS.md).
Both do nothing on a libc without them (musl, macOS).
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Final

__all__ = ["TRIM_SECONDS", "available", "settle", "trim"]

_M_TRIM_THRESHOLD: Final = -1
_M_MMAP_THRESHOLD: Final = -3
_M_ARENA_MAX: Final = -8
ARENAS: Final = 1  # one heap to trim; the GIL already serialises most allocations
MMAP_THRESHOLD: Final = 256 * 1024
TRIM_THRESHOLD: Final = 64 * 1024 * 1024
TRIM_SECONDS: Final = 30.0  # how often a worker process trims (each trim: milliseconds)


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


_LIBC: Final = _libc()


def available() -> bool:
    """Whether this libc has glibc's malloc tuning (else `settle` and `trim` do nothing)."""
    return _LIBC is not None


def settle() -> bool:
    """One malloc arena, fixed mmap and trim thresholds; call before threads start."""
    if _LIBC is None:
        return False
    return bool(_LIBC.mallopt(_M_ARENA_MAX, ARENAS)
                and _LIBC.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
                and _LIBC.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))


def trim() -> None:
    """Give free heap pages back to the system."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)
