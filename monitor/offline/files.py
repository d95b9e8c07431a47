"""Input and output files of the offline commands: JSONL in batches, errors that name the file."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import IO

from monitor.offline.terminal import Progress

__all__ = ["BATCH", "InputError", "batches", "check_readable", "open_bin", "open_out",
           "total_bytes"]

BATCH = 1000


class InputError(Exception):
    """An input or output file that cannot be used; the message names it."""


def check_readable(paths: list[str]) -> None:
    for path in paths:
        if path == "-":
            continue
        if Path(path).is_dir():
            raise InputError(f"cannot read {path!r}: it is a directory; give its files "
                             f"(e.g. {str(Path(path) / '*.jsonl')!r})")
        if not Path(path).exists():
            raise InputError(f"cannot read {path!r}: no such file")
        if not os.access(path, os.R_OK):
            raise InputError(f"cannot read {path!r}: permission denied")


def batches(path: str, progress: Progress) -> Iterator[tuple[list[int], list[bytes]]]:
    """(line numbers, non-empty lines) in batches; blank lines are skipped, numbers from 1."""
    try:
        stream: IO[bytes] = sys.stdin.buffer if path == "-" else open(path, "rb")  # noqa: SIM115
    except OSError as exc:
        raise InputError(f"cannot read {path!r}: {exc.strerror}") from None
    with stream if path != "-" else ExitStack():
        batch: list[bytes] = []
        numbers: list[int] = []
        size = 0  # bytes read since the progress bar last moved (once a batch: it locks)
        for number, line in enumerate(stream, 1):
            size += len(line)
            line = line.rstrip(b"\r\n")
            if line and not line.isspace():  # (strip() would copy the line to know)
                batch.append(line)
                numbers.append(number)
                if len(batch) >= BATCH:
                    progress.advance(size)
                    size = 0
                    yield numbers, batch
                    batch, numbers = [], []
        progress.advance(size)
        if batch:
            yield numbers, batch


def open_out(path: str) -> IO[str]:
    try:
        return open(path, "w", encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write {path!r}: {exc.strerror}") from None


def open_bin(path: str) -> IO[bytes]:
    try:
        return open(path, "wb")
    except OSError as exc:
        raise InputError(f"cannot write {path!r}: {exc.strerror}") from None


def total_bytes(paths: list[str]) -> int | None:
    if "-" in paths:
        return None
    return sum(Path(p).stat().st_size for p in paths)

