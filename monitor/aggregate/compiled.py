"""The one place that chooses compiled or pure Python for the hot path, once, at import.

`_fold.pyx` (the column fold) and `_admission.pyx` (the admission loop) are built by
`pip install` where there is a C compiler; each implements the same functions as the
pure-Python reference beside it, with the same signatures:

- `_admission.admit` = `admission.admit_python` (of type `admission.Admit`), and
  `_admission.fold_chunk` = `admission.fold_chunk_python`, which each admission calls
  itself;
- `_fold.Codes`, `_fold.row_tuples`, `_fold.fold`: the compiled half of `fold.Folder`.

Without a build both are None and ragmon runs the references (~1.9x slower on replay);
with RAGMON_REQUIRE_COMPILED=1 (set in .ci/run) a missing build is an ImportError here,
so CI cannot pass on the fallback. tests/aggregate/test_admission.py (troubled and
generated messages), tests/ingest/test_fuzz.py (10^5 mutants) and
tests/aggregate/test_fold.py compare the two paths.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from monitor.ingest.native import REQUIRED, load

# A chooser only: it imports no module of ragmon's but the loader, so that the compiled
# modules (which import their references' constants, e.g. `_admission` from
# `admission`) and the modules that use them (`fold`, `pipeline`) form no circle.
__all__ = ["ADMISSION", "COMPILED", "FOLD", "REQUIRED"]


if TYPE_CHECKING:  # mypy reads their stubs (`_fold.pyi`, `_admission.pyi`) ...
    from monitor.aggregate import _admission as ADMISSION
    from monitor.aggregate import _fold as FOLD
else:  # ... and at run time either is None where it was not built
    FOLD = load("monitor.aggregate._fold")
    ADMISSION = load("monitor.aggregate._admission")
COMPILED = FOLD is not None and ADMISSION is not None

