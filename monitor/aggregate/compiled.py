"""The one place that chooses compiled or pure Python for the hot path, once, at import.

`_fold.pyx` (the column fold) and `_admission.pyx` (the admission loop) are built by
`pip install` where there is a C compiler; each implements the same functions as the
pure-Python reference beside it, with the same signatures:

- `_admission.admit` = `admission.admit_python` (the `Admit` type below), and
  `_admission.fold_chunk` = `admission.fold_chunk_python`, which each admission calls
  itself;
- `_fold.Codes`, `_fold.row_tuples`, `_fold.fold`: the compiled half of `fold.Folder`.

Without a build both are None and ragmon runs the references (~1.9x slower on replay);
with RAGMON_REQUIRE_COMPILED=1 (set in .ci/run) a missing build is an ImportError here,
so CI cannot pass on the fallback. tests/test_admission.py (troubled and generated messages),
tests/test_fuzz.py (10^5 mutants) and tests/test_fold.py compare the two paths.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from types import ModuleType
from typing import cast

from monitor.aggregate import admission
from monitor.aggregate.admission import Admitting
from monitor.aggregate.joins import Delta
from monitor.ingest.parse import Rejection

__all__ = ["ADMISSION", "COMPILED", "FOLD", "REQUIRED", "Admit", "admitter"]

REQUIRED = os.environ.get("RAGMON_REQUIRE_COMPILED", "") not in ("", "0")

# (pipeline, raw messages, dead letters out, label deltas out, future limit, set aside
# out or None) -> (read, dropped)
Admit = Callable[[Admitting, list[bytes], list[tuple[int, Rejection]], list[Delta], float,
                  list[tuple[int, float]] | None], tuple[int, int]]


def _load(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(f"monitor.aggregate.{name}")
    except ImportError as exc:
        if REQUIRED:
            raise ImportError(f"monitor.aggregate.{name} is not built and "
                              f"RAGMON_REQUIRE_COMPILED is set: {exc}") from exc
        return None


FOLD = _load("_fold")
ADMISSION = _load("_admission")
COMPILED = FOLD is not None and ADMISSION is not None


def admitter(compiled: bool) -> Admit:
    """The admission loop a pipeline runs: compiled where built and asked for, else the
    pure-Python reference."""
    if compiled and ADMISSION is not None:
        return cast(Admit, ADMISSION.admit)
    return admission.admit_python
