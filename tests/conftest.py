"""Shared fixtures: the hand-made examples in ../shared/examples and a default pipeline."""

from __future__ import annotations

from pathlib import Path

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


def lines(path: Path) -> list[bytes]:
    return [line.rstrip(b"\n") for line in path.read_bytes().splitlines() if line.strip()]
