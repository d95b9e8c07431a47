"""The one place that chooses compiled or pure Python for the hot path, once, at import.

`_fold.pyx` (the column fold) and `_admission.pyx` (the admission loop) are built by
`pip install` where there is a C compiler; each implements the same functions as the
pure-Python reference beside it, with the same signatures:

- `_admission.admit` = `admission.admit_python`, `_admission.fold_chunk` =
  `admission.fold_chunk_python` (the `Admit` and `FoldChunk` types below);
- `_fold.Codes`, `_fold.row_tuples`, `_fold.fold`: the compiled half of `fold.Folder`.

Without a build both are None and ragmon runs the references (~1.9x slower on replay);
with RAGMON_REQUIRE_COMPILED=1 (set in .ci/run) a missing build is an ImportError here,
so CI cannot pass on the fallback. tests/test_admit.py (troubled and generated messages),
tests/test_fuzz.py (10^5 mutants) and tests/test_fold.py compare the two paths.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from monitor.aggregate import admission

if TYPE_CHECKING:
    from monitor.aggregate.pipeline import Pipeline

__all__ = ["ADMISSION", "COMPILED", "FOLD", "REQUIRED", "Admit", "FoldChunk", "admitter"]

REQUIRED = os.environ.get("RAGMON_REQUIRE_COMPILED", "") not in ("", "0")

# (pipeline, raw messages, dead letters out, label deltas out) -> (read, dropped)
Admit = Callable[["Pipeline", list[bytes], list[Any], list[Any]], tuple[int, int]]
# (pipeline, chunk of admitted traces) -> None
FoldChunk = Callable[["Pipeline", list[Any]], None]


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


def admitter(compiled: bool) -> tuple[Admit, FoldChunk]:
    """The admission loop and chunk fold a pipeline runs: compiled where built and asked
    for, else the pure-Python references."""
    if compiled and ADMISSION is not None:
        return ADMISSION.admit, ADMISSION.fold_chunk
    return admission.admit_python, admission.fold_chunk_python
