"""The docs site builds without a broken link, its Reference is the code's, and nothing in
the repository sends a reader to files a user's clone does not have."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import docs_reference  # noqa: E402  (tools/ is not a package)

# The Apache Kafka the tests start is found beside the founders' checkout by default
# (tests/brokers.py) and `.ci/run` points KAFKA_HOME there: the only places that may
# name it.
KAFKA_HELPERS = {"tests/brokers.py", "tests/conftest.py", ".ci/run"}
SKIPPED_DIRS = {".git", ".cache", "build", "site", "__pycache__", ".pytest_cache",
                ".mypy_cache", ".ruff_cache", ".hypothesis"}


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    return docs_reference.pages()


def test_the_site_builds_strictly(tmp_path):
    """`mkdocs build --strict`: a broken link, a missing anchor or a page left out of the
    nav fails the build (mkdocs.yml)."""
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q",
                           "-d", str(tmp_path / "site")], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "site" / "reference" / "settings" / "index.html").exists()


def test_every_setting_is_described_and_in_the_reference(pages):
    from monitor.settings import Settings

    page = pages["reference/settings.md"]
    for name, field in Settings.model_fields.items():
        assert field.description, f"{name} has no Field(description=...)"
        assert f"| `{name}` |" in page


def test_every_metric_is_in_the_reference(pages):
    from monitor.export.catalog import FAMILIES, OTLP_FAMILIES

    for family in (*FAMILIES, *OTLP_FAMILIES):
        assert f"| `{family.exposed}` | {family.kind} |" in pages["reference/metrics.md"]


def test_every_command_is_in_the_reference(pages):
    page = pages["reference/cli.md"]
    for command in ("replay", "backtest", "report", "calibrate", "simulate", "worker",
                    "demo", "produce", "reference", "reference freeze", "reference import"):
        assert f"## `ragmon {command}`" in page
    assert "--otlp" in page and "--web-config-file" in page


def test_the_summary_reference_is_a_real_replay(pages):
    page = pages["reference/summary.md"]
    for key in ('"input"', '"rejected_by_reason"', '"releases"', '"answer_coverage"',
                '"critical_claim_unsupported_rate"', '"not_json": 1'):
        assert key in page


def test_the_readme_is_short_and_its_set_up_commands_are_the_two():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 150
    assert "pip install -e '.[demo]' && ragmon demo" in readme
    assert "pip install -e '.[dev]' && python -m pytest" in readme


def test_nothing_points_to_files_a_clone_does_not_have():
    found = []
    for path in ROOT.rglob("*"):
        relative = path.relative_to(ROOT)
        if (not path.is_file() or SKIPPED_DIRS & set(relative.parts)
                or relative.parts[0].endswith(".egg-info")
                or path.suffix in {".so", ".c", ".npz", ".png", ".pyc"}):
            continue
        if str(relative) in KAFKA_HELPERS or path == Path(__file__).resolve():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        if "../shared" in text:
            found.append(str(relative))
    assert found == []
