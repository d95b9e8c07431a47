"""Shared fixtures: the hand-made examples in ../shared/examples and a default pipeline."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from monitor.pipeline import Pipeline
from monitor.settings import load

EXAMPLES = Path(__file__).resolve().parents[2] / "shared" / "examples"


def pytest_configure(config: pytest.Config) -> None:
    if not EXAMPLES.is_dir():
        raise pytest.UsageError(f"examples not found at {EXAMPLES}")


@pytest.fixture
def examples() -> Path:
    return EXAMPLES


@pytest.fixture
def pipeline() -> Pipeline:
    return Pipeline(load())


def load_script(path: Path, name: str) -> Any:
    """Import a script beside its files (alerts/generate.py, dashboards/generate.py) under
    its own module name: two files both named generate.py must not shadow each other."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def lines(path: Path) -> list[bytes]:
    return [line.rstrip(b"\n") for line in path.read_bytes().splitlines() if line.strip()]


def assert_same(a, b, path="$"):
    """Deep equality, floats up to rounding (sums folded in another order differ in ulps)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), path
        for key in a:
            assert_same(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, float) and isinstance(b, float):
        assert abs(a - b) <= 1e-9 * max(1.0, abs(a)), f"{path}: {a} != {b}"
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"
