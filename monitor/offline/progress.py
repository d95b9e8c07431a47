"""The progress bar of the offline commands: bytes read, or steps done; drawn (rich)
only on a terminal, a no-op elsewhere.

rich is imported when a bar is drawn: a replay into a pipe or a file (the common case
in scripts) does not pay its ~35 ms of imports.
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.progress import Progress as RichProgress

__all__ = ["Progress", "counter", "progress"]


class Progress:
    """Bytes read so far; shown only on a terminal, a no-op elsewhere."""

    def __init__(self, bar: RichProgress | None, total: int | None,
                 description: str = "reading") -> None:
        self._bar = bar
        self._task = bar.add_task(description, total=total) if bar is not None else None

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
    """A bar of bytes read; terminal only."""
    return _drawn(enabled, "DownloadColumn", total_bytes, "reading")


def counter(enabled: bool, total: int, description: str) -> Progress:
    """A bar counting `total` steps (e.g. bootstrap resamples); terminal only."""
    return _drawn(enabled, "MofNCompleteColumn", total, description)


def _drawn(enabled: bool, done: str, total: int | None, description: str) -> Progress:
    """A rich bar whose `done` column (a `rich.progress` column's name) says how far."""
    if not (enabled and sys.stderr.isatty()):
        return Progress(None, None)
    from rich import progress as bars
    from rich.console import Console
    bar = bars.Progress("[progress.description]{task.description}", bars.BarColumn(),
                        getattr(bars, done)(), bars.TimeRemainingColumn(),
                        console=Console(stderr=True), transient=True)
    return Progress(bar, total, description)
