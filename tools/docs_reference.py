"""The docs' Reference pages, generated from the code when MkDocs builds (an MkDocs hook:
`hooks:` in mkdocs.yml). Nothing here is hand-maintained: every setting comes from its
`Field(description=...)` in `monitor/settings.py`, every metric from
`monitor/export/catalog.py`, every command from `monitor.cli.build_parser()`, the summary
JSON from a real `ragmon replay` of `examples/`, the runbook from `alerts/RUNBOOK.md`.

`python tools/docs_reference.py OUT_DIR` writes the pages without MkDocs.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def pages() -> dict[str, str]:
    """Each generated page's path under docs/ and its Markdown."""
    return {"reference/settings.md": settings_page(), "reference/metrics.md": metrics_page(),
            "reference/cli.md": cli_page(), "reference/summary.md": summary_page(),
            "runbook.md": (ROOT / "alerts" / "RUNBOOK.md").read_text()}


def on_files(files: Any, config: Any) -> Any:
    """The MkDocs hook: add the generated pages to the site's files."""
    from mkdocs.structure.files import File

    for path, text in pages().items():
        files.append(File.generated(config, path, content=text))
    return files


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _type(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) if isinstance(annotation, type) else None
    text = text or str(annotation)
    for noise in ("typing.", "pydantic.types.", "monitor.settings."):
        text = text.replace(noise, "")
    return text.replace("NoneType", "None")


def _default(field: Any) -> str:
    value = field.default_factory() if field.default_factory else field.default
    if value is None:
        return "unset"
    if isinstance(value, tuple):
        return ", ".join(value)
    if isinstance(value, dict):
        return json.dumps({k: v.model_dump() if hasattr(v, "model_dump") else v
                           for k, v in value.items()}) if value else "{}"
    return str(value).lower() if isinstance(value, bool) else str(value)


_BOUNDS = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}


def _bounds(field: Any) -> str:
    found = []
    for item in field.metadata:
        for attribute, sign in _BOUNDS.items():
            if getattr(item, attribute, None) is not None:
                found.append(f"{sign} {getattr(item, attribute)}")
        if getattr(item, "pattern", None):
            found.append(f"`{item.pattern}`")
    return ", ".join(found)


def settings_page() -> str:
    from monitor.settings import Settings

    lines = ["# Settings", "",
             "Every setting, generated from `monitor/settings.py`. Each is read from the "
             "environment as `RAGMON_<NAME>` (upper case) or from a settings file "
             "(`--config FILE` or `RAGMON_CONFIG`: TOML, YAML or JSON by extension, whose "
             "values take precedence). A bad value stops the command naming the setting "
             "and the value; an unknown key in a file stops it with the closest valid name. "
             "List settings take `a,b,c` or a JSON list in the environment. Warned about on "
             "stderr, once: an unknown `RAGMON_*` variable (with the closest valid name), "
             "`reasons` that leave out a contract reason, an empty `slice_dimensions`.", "",
             "| setting | type | default | bounds | meaning |", "|---|---|---|---|---|"]
    for name, field in Settings.model_fields.items():
        lines.append(f"| `{name}` | `{_cell(_type(field.annotation))}` | "
                     f"{_cell(_default(field))} | {_cell(_bounds(field))} | "
                     f"{_cell(field.description or '')} |")
    return "\n".join(lines) + "\n"


def metrics_page() -> str:
    from monitor.export.catalog import FAMILIES, OTLP_FAMILIES

    lines = ["# Metrics", "",
             "Every metric family the worker exports on `/metrics`, generated from "
             "`monitor/export/catalog.py` (counters are exposed with `_total`). Cells are "
             "labelled `release`, `dimension`, `value` (`all`/`all` for a release's total); "
             "drift streams add `signal` and `direction`. "
             "`ragmon_reference_info` carries a release's version components as labels.", ""]
    for title, families in (("Always", FAMILIES),
                            ("While the otlp intake is on (`otlp_topic`)", OTLP_FAMILIES)):
        lines += [f"## {title}", "", "| metric | type | labels | meaning |", "|---|---|---|---|"]
        lines += [f"| `{f.exposed}` | {f.kind} | {', '.join(f.labels)} | {_cell(f.help)} |"
                  for f in families]
        lines.append("")
    return "\n".join(lines)


def _commands(parser: argparse.ArgumentParser, path: str) -> list[tuple[str, str]]:
    found = [(path, parser.format_help())]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                found += _commands(child, f"{path} {name}")
    return found


def cli_page() -> str:
    from monitor.cli import build_parser

    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "96"  # argparse wraps help to the terminal's width
    try:
        commands = _commands(build_parser(), "ragmon")
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old
    lines = ["# Commands", "", "Every command's `--help`, generated from `monitor/cli.py`. "
             "Exit codes: 0 when the command did its work (rejected input is a result), 1 "
             "when the broker cannot be reached or refuses ragmon, 2 for a bad option, "
             "setting or unreadable file (the message names it).", ""]
    for path, text in commands:
        lines += [f"## `{path}`", "", "```text", text.rstrip(), "```", ""]
    return "\n".join(lines)


def summary_page() -> str:
    from monitor.cli import main
    from monitor.ingest.parse import REJECTION_REASONS

    examples = ROOT / "examples"
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "summary.json"
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            main(["replay", str(examples / "traces.jsonl"), str(examples / "bad-traces.jsonl"),
                  "--labels", str(examples / "labels.jsonl"),
                  "--feedback", str(examples / "feedback.jsonl"),
                  "--no-progress", "--out", str(out)])
        summary = json.loads(out.read_text())
    return "\n".join([
        "# The summary JSON", "",
        "What `ragmon replay --out FILE` (or `--json`) writes, generated by replaying the "
        "repository's `examples/` (the traces, the bad traces, labels and feedback) with "
        "the code of this version. Every derived quantity is defined in the "
        "[contract](../contract.md); rates with an empty denominator are `null`. "
        "Quantiles come from fixed-range histograms (resolution one bin: 0.02 on "
        "unit-range signals, ~12% relative on latency); means are exact.", "",
        "`input.read = valid + rejected`, `valid = folded + duplicates + late`. "
        "`releases.<release>.total` is the release's total, "
        "`releases.<release>.slices.<dimension>.<value>` one slice of it, both of the same "
        "shape.", "",
        "Rejection reasons (`rejected_by_reason`, `ragmon_rejected_total{reason}`, the "
        "dead letter's `ragmon.reason` header): " + ", ".join(f"`{r}`" for r in REJECTION_REASONS)
        + "; and `late` for traces behind the allowed lateness.", "",
        "```json", json.dumps(summary, indent=2), "```", ""])


if __name__ == "__main__":
    target = Path(sys.argv[1])
    for name, text in pages().items():
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        (target / name).write_text(text)
