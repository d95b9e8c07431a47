"""The shape of the package: layers in the order data flows, imports only backwards,
no cycles, one home per third-party library, every module declares its surface."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "monitor"
# A unit may import only units of a lower rank, and modules of its own layer package.
RANKS = {
    "memory": 0,  # gc tuning and heap trims, used by every process
    "frames": 0,  # length-prefixed pickles between ragmon's own processes
    "ingest": 1,  # bytes -> events or rejections; the contract
    "settings_files": 2,  # settings files, secrets, variables that look like typos
    "settings": 2.5,  # names the contract's dimensions
    "aggregate": 3,  # events -> bounded tables
    "detect": 4,  # tables -> drift alarms
    "export": 5,  # snapshot -> Prometheus metrics
    "worker": 6,  # the streaming job on Kafka
    "client": 7,  # the SDK for producers (uses the worker's connection and topic layout)
    "offline": 8,  # files: replay, backtest, compare, gate, analyze
    "broker": 9, "simulate": 9,  # the embedded broker and the traffic simulator
    "demo": 10,
    "cli": 11,  # wires everything; nothing imports it
}
LAYER_ORDER = ["ingest", "aggregate", "detect", "export", "worker", "cli"]
THIRD_PARTY_HOMES = {
    "faust": {"worker.app", "worker.assignor", "worker.batches", "worker.process",
              "worker.wiring"},
    "prometheus_client": {"export.catalog", "export.collector", "export.health",
                          "export.pages"},
    "kafka": {"client", "worker.provision", "worker.rewind"},
    "aiokafka": {"worker.topics", "worker.reference_sync", "worker.produce", "worker.assignor",
                 "worker.batches"},
    "scipy": {"detect.detectors", "detect.shares"}, "pydantic": {"settings", "settings_files"},
    "rich": {"offline.terminal", "offline.progress"}, "matplotlib": {"offline.plots"},
    "yaml": {"offline.analyze", "settings_files", "export.webconfig"},
    "bcrypt": {"export.auth"},
}
MAX_LINES = 400


def _name(path: Path) -> str:
    """monitor/worker/app.py -> 'worker.app'; monitor/cli.py -> 'cli'."""
    return ".".join(path.relative_to(PACKAGE).with_suffix("").parts)


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py")


def _sources() -> list[Path]:
    return sorted([*_modules(), *PACKAGE.rglob("*.pyx"), *PACKAGE.rglob("*.pxd")])


def _exists(name: str) -> bool:
    base = PACKAGE.joinpath(*name.split("."))
    return base.with_suffix(".py").exists() or base.with_suffix(".pyx").exists()


def _tree(path: Path) -> ast.Module:
    if path.suffix == ".py":
        return ast.parse(path.read_text())
    # Cython: only its Python-level import lines (cimport, cdef are not Python)
    lines = [line for line in path.read_text().splitlines()
             if re.match(r"(from \S+ )?import ", line)]
    return ast.parse("\n".join(lines))


def _imports(path: Path) -> set[str]:
    """Imported names, with monitor's own resolved to modules ('worker.stall'); imports
    under `if TYPE_CHECKING:` count too, so a circle cannot hide behind one."""
    names: set[str] = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "monitor" or node.module.startswith("monitor."):
                base = node.module.removeprefix("monitor").lstrip(".")
                for alias in node.names:
                    full = f"{base}.{alias.name}".lstrip(".")
                    names.add("monitor:" + (full if _exists(full) else base))
            else:
                names.add(node.module)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("monitor."):
                    names.add("monitor:" + alias.name.removeprefix("monitor."))
                else:
                    names.add(alias.name)
    return names


def _own(path: Path) -> set[str]:
    return {n.removeprefix("monitor:") for n in _imports(path) if n.startswith("monitor:")}


def _unit(name: str) -> str:
    return name.split(".")[0]


def test_the_tree_shows_the_layers():
    packages = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())
    assert set(packages) == {"ingest", "aggregate", "detect", "export", "worker", "offline"}
    for layer in packages:  # each says its layer in one line
        doc = ast.get_docstring(ast.parse((PACKAGE / layer / "__init__.py").read_text()))
        assert doc and doc.startswith("Layer "), layer
    assert [RANKS[s] for s in LAYER_ORDER] == sorted(RANKS[s] for s in LAYER_ORDER)
    assert RANKS["worker"] < RANKS["cli"] and RANKS["offline"] < RANKS["cli"]


def test_every_module_is_placed():
    assert {_unit(_name(p)) for p in _sources()} <= set(RANKS)


def test_data_flows_one_way():
    for path in _sources():
        here = _name(path)
        for target in _own(path):
            if _unit(target) == _unit(here) and "." in here:
                continue  # within a layer: checked for cycles below
            assert RANKS[_unit(target)] < RANKS[_unit(here)], f"{here} imports {target}"


def test_no_import_cycles():
    graph = {_name(p): {t for t in _own(p) if t != _name(p)} for p in _sources()}
    try:
        tuple(TopologicalSorter(graph).static_order())
    except CycleError as exc:
        raise AssertionError(f"import cycle: {exc.args[1]}") from None


def test_third_party_libraries_live_in_one_home():
    for path in _sources():
        for name in _imports(path):
            homes = THIRD_PARTY_HOMES.get(name.split(".")[0])
            assert homes is None or _name(path) in homes, f"{name} imported in {_name(path)}"


def _repository_python() -> list[Path]:
    """Every Python file of the repository: the package, tests, benchmarks, generators."""
    root = PACKAGE.parent
    skipped = {".git", "build", "site", ".cache", ".venv", "__pycache__"}
    return sorted(p for p in root.rglob("*.py")
                  if not skipped & set(p.relative_to(root).parts)
                  and not p.relative_to(root).parts[0].endswith(".egg-info"))


def test_no_module_is_over_the_limit():
    for path in [*_sources(), *_repository_python()]:
        assert len(path.read_text().splitlines()) <= MAX_LINES, path


def test_every_module_declares_all():
    for path in _modules():
        module = importlib.import_module(f"monitor.{_name(path)}")
        assert hasattr(module, "__all__"), _name(path)
        for name in module.__all__:
            assert hasattr(module, name), f"{_name(path)}.{name}"


@pytest.mark.slow
def test_the_package_type_checks_strictly_and_lints_clean():
    """`mypy monitor` (strict, pyproject.toml) and `ruff check`: CI holds the style."""
    root = PACKAGE.parent
    for command in ([sys.executable, "-m", "mypy", "monitor"],
                    [sys.executable, "-m", "ruff", "check", "monitor", "tests", "benchmarks"]):
        done = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
