"""The shape of the package: data flows one way, every module declares its surface."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "monitor"
# Left to right: a module may import only modules to its left. cli wires; nothing imports it.
ORDER = [
    "memory", "contract", "parts", "settings", "connection", "ingest", "slices", "layout",
    "encode", "aggregate", "fold",
    "windows", "dedupe", "labels", "admit",
    "derive", "detectors", "thresholds", "growth", "reference",
    "streams", "drift", "pipeline", "watch", "backtest", "frame", "compare", "gate", "summary",
    "checkpoint", "merge", "snapshot", "states", "status", "export", "simulate",
    "render", "files", "plots", "documents",
    "broker", "provision", "rewind", "client", "references", "telemetry", "topics", "refsync",
    "stall", "batches", "partitions",
    "app", "demo",
    "analyze",
    "cli",
]
THIRD_PARTY_HOMES = {
    "faust": {"app"}, "prometheus_client": {"export", "status"},
    "kafka": {"client", "provision", "rewind"},
    "scipy": {"detectors"}, "pydantic": {"settings"}, "pydantic_settings": {"settings"},
    "rich": {"render"}, "matplotlib": {"plots"}, "yaml": {"analyze"},
}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py")


def test_every_module_is_placed_in_the_order():
    assert {p.stem for p in _modules()} <= set(ORDER)


def test_data_flows_one_way():
    for path in _modules():
        position = ORDER.index(path.stem)
        for name in _imports(path):
            if name.startswith("monitor."):
                target = name.split(".")[1]
                if target == f"_{path.stem}":
                    continue  # its compiled twin (admit -> _admit.pyx), built from this one
                assert ORDER.index(target) < position, f"{path.stem} imports {target}"


def test_third_party_libraries_live_in_one_home():
    for path in _modules():
        for name in _imports(path):
            homes = THIRD_PARTY_HOMES.get(name.split(".")[0])
            assert homes is None or path.stem in homes, f"{name} imported in {path.stem}"


def test_every_module_declares_all():
    for path in _modules():
        module = importlib.import_module(f"monitor.{path.stem}")
        assert hasattr(module, "__all__"), path.stem
        for name in module.__all__:
            assert hasattr(module, name), f"{path.stem}.{name}"
