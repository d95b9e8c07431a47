"""Loading a compiled module of ragmon's (built by `pip install` where there is a C
compiler, setup.py), or None where it was not built: the caller then runs its
pure-Python reference. With RAGMON_REQUIRE_COMPILED=1 (set in .ci/run) a missing build
is an ImportError, so that CI cannot pass on a fallback.

It imports no module of ragmon's, so that compiled modules, their references and the
modules choosing between them form no circle.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

__all__ = ["REQUIRED", "load"]

REQUIRED = os.environ.get("RAGMON_REQUIRE_COMPILED", "") not in ("", "0")


def load(name: str) -> ModuleType | None:
    """The compiled module `name` (dotted), or None where it was not built."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        if REQUIRED:
            raise ImportError(f"{name} is not built and RAGMON_REQUIRE_COMPILED is set: "
                              f"{exc}") from exc
        return None
