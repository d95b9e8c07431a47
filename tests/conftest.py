"""Shared fixtures: the hand-made examples (examples/) and
a default pipeline."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from monitor.aggregate.pipeline import Pipeline
from monitor.settings import load

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


BROKERS = ("embedded", "kafka")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--brokers", default=",".join(BROKERS),
                     help="brokers the integration tests run on: embedded (Tansu), kafka "
                          "(Apache Kafka from KAFKA_HOME, default ../shared/kafka); "
                          "comma-separated")


def pytest_configure(config: pytest.Config) -> None:
    # Threshold calibrations (deterministic simulations, ~40 s a key) kept in the checkout
    # between runs, not in the user's home (monitor/detect/thresholds.py).
    os.environ.setdefault("RAGMON_CALIBRATION_CACHE",
                          str(Path(__file__).resolve().parents[1] / ".cache" / "thresholds"))
    if not EXAMPLES.is_dir():
        raise pytest.UsageError(f"examples not found at {EXAMPLES}")
    chosen = config.getoption("--brokers").split(",")
    if unknown := set(chosen) - set(BROKERS):
        raise pytest.UsageError(f"unknown brokers {sorted(unknown)}; choose from {BROKERS}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A failed test that started processes shows the end of their logs (`*.log` in its
    tmp_path: workers, page processes), client chatter left out: in CI that is all there
    is to read afterwards."""
    report = yield
    tmp_path = getattr(item, "funcargs", {}).get("tmp_path")
    if report.failed and call.when == "call" and tmp_path is not None:
        for log in sorted(Path(tmp_path).glob("*.log")):
            lines = [line for line in log.read_text(errors="replace").splitlines()
                     if not any(noise in line for noise in LOG_NOISE)]
            report.sections.append((f"{log.name}, its last {LOG_LINES} lines",
                                    "\n".join(lines[-LOG_LINES:])))
    return report


LOG_LINES = 150
# Client libraries' connection chatter, which would fill those lines.
LOG_NOISE = ("KafkaTCPTransport", "KafkaConnection", "metadata refresh", "Updated metadata",
             "IO loop", "ootstrap", "Initializing connection", "Coordinator for GROUP",
             "Heartbeat", "Updating subscribed topics", "| ", "+-")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A slow test (a long statistical run) is left out of the fast tier with the
    integration tests (every test in tests/integration/, marked or not): `-m "not
    integration"` is the everyday tier, CI runs everything."""
    for item in items:
        if item.get_closest_marker("slow") or "integration" in item.path.parts:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(params=BROKERS)
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """Each broker-backed test runs on the embedded broker and on Apache Kafka."""
    from brokers import KAFKA_MISSING, ApacheKafka, Embedded, kafka_available, kafka_required

    if request.param not in request.config.getoption("--brokers").split(","):
        pytest.skip(f"--brokers leaves out {request.param}")
    if request.param == "kafka" and not kafka_available():
        (pytest.fail if kafka_required() else pytest.skip)(KAFKA_MISSING)
    running = (Embedded(log=tmp_path / "broker.log") if request.param == "embedded"
               else ApacheKafka(tmp_path))
    with running:
        yield running


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
