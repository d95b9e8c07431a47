"""Terminal output of the offline commands: a progress bar and the summary tables (rich)."""

from __future__ import annotations

import sys
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, TimeRemainingColumn
from rich.progress import Progress as RichProgress
from rich.table import Table

__all__ = ["Progress", "progress", "summary"]


class Progress:
    """Bytes read so far; shown only on a terminal, a no-op elsewhere."""

    def __init__(self, bar: RichProgress | None, total: int | None) -> None:
        self._bar = bar
        self._task = bar.add_task("reading", total=total) if bar is not None else None

    def advance(self, n: int) -> None:
        if self._bar is not None and self._task is not None:
            self._bar.advance(self._task, n)

    def __enter__(self) -> Progress:
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._bar is not None:
            self._bar.stop()


def progress(enabled: bool, total_bytes: int | None) -> Progress:
    if not (enabled and sys.stderr.isatty()):
        return Progress(None, None)
    console = Console(stderr=True)
    bar = RichProgress("[progress.description]{task.description}", BarColumn(),
                       DownloadColumn(), TimeRemainingColumn(), console=console, transient=True)
    return Progress(bar, total_bytes)


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"


def _num(value: float | None, fmt: str = ".3f") -> str:
    return "—" if value is None else format(value, fmt)


def summary(doc: dict[str, Any], console: Console | None = None) -> None:
    """Print the input accounting and one table of key figures per release and slice."""
    # Off a terminal rich would wrap at 80 columns; a wide table reads better in a file.
    console = console or (Console() if sys.stdout.isatty() else Console(width=160))
    inp = doc["input"]
    console.print(
        f"[bold]input[/]: {inp['read']} read, {inp['valid']} valid, {inp['rejected']} rejected, "
        f"{inp['duplicates']} duplicates, {inp['late']} late, "
        f"{inp['content_fields_dropped']} content fields dropped")
    if doc["rejected_by_reason"]:
        reasons = ", ".join(f"{k} {v}" for k, v in doc["rejected_by_reason"].items())
        console.print(f"[bold]rejected by reason[/]: {reasons}")
    for kind in ("labels", "feedback"):
        ev = doc[kind]
        if ev["read"]:
            console.print(f"[bold]{kind}[/]: {ev['valid']} valid, {ev['rejected']} rejected, "
                          f"{ev['joined']} joined, {ev['waiting']} without a trace")
    for release, entry in doc["releases"].items():
        table = Table(title=f"release {release}", title_justify="left")
        for column in ("slice", "traces", "coverage", "abstain", "ccu rate", "leaks",
                       "req. cov", "all req.", "top_score p50", "latency p95 ms",
                       "cost", "sel. acc.", "fb +/-"):
            table.add_column(column, justify="left" if column == "slice" else "right")
        rows = [("total", entry["total"])] + [
            (f"{dim}={value}", m)
            for dim, values in entry["slices"].items() for value, m in values.items()
        ]
        for name, m in rows:
            table.add_row(
                name, str(m["traces"]), _pct(m["answer_coverage"]), _pct(m["abstention_rate"]),
                _pct(m["critical_claim_unsupported_rate"]),
                f"[red]{m['gate_leaks']}[/]" if m["gate_leaks"] else "0",
                _pct(m["requirements"]["coverage_mean"]),
                _pct(m["requirements"]["all_required_share"]),
                _num(m["signals"].get("top_score", {}).get("p50")),
                _num(m["usage"]["latency_ms_p95"], ".0f"),
                _num(m["usage"]["cost_total"], ".4f"),
                _pct(m["labels"]["selective_accuracy"]),
                f"{m['feedback']['up']}/{m['feedback']['down']}",
            )
        console.print(table)
        missing = entry["total"]["requirements"]["missing"]
        if missing:
            top = ", ".join(f"{k} {v}" for k, v in list(missing.items())[:10])
            console.print(f"  most missed requirements: {top}")
