"""Input and output files of the offline commands: JSONL in batches, errors that name the file."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import IO

from monitor.ingest.native import load
from monitor.offline.progress import Progress

__all__ = ["BATCH", "InputError", "batches", "check_readable", "open_bin", "open_out",
           "total_bytes"]

BATCH = 1000
LINES = load("monitor.offline._lines")  # the compiled line cutter, None where not built


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


def batches(path: str, progress: Progress,
            block: int = 1 << 20) -> Iterator[tuple[list[int], list[bytes]]]:
    """(line numbers, non-empty lines) in batches; blank lines are skipped, numbers from 1.

    Read `block` bytes at a time and cut in C where `_lines` is built; else line by line
    (the reference: tests/offline/test_files.py checks both cut alike)."""
    try:
        stream: IO[bytes] = sys.stdin.buffer if path == "-" else open(path, "rb")  # noqa: SIM115
    except OSError as exc:
        raise InputError(f"cannot read {path!r}: {exc.strerror}") from None
    with stream if path != "-" else ExitStack():
        if LINES is None:
            yield from _by_line(stream, progress)
        else:
            yield from _by_block(stream, progress, block, LINES.take)


def _by_line(stream: IO[bytes], progress: Progress) -> Iterator[tuple[list[int], list[bytes]]]:
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


def _by_block(stream: IO[bytes], progress: Progress, block: int,
              take: Callable[..., tuple[int, int]]
              ) -> Iterator[tuple[list[int], list[bytes]]]:
    batch: list[bytes] = []
    numbers: list[int] = []
    number, final = 1, False
    # The start of a line not ended yet, in pieces: joined once its end is read (a line
    # longer than many blocks is copied once, not once a block).
    parts: list[bytes] = []
    # What is there, up to `block` (stdin may be a pipe kept open: `read` would wait
    # for the whole block before cutting the lines already in).
    read = getattr(stream, "read1", stream.read)
    while not final:
        chunk = read(block)
        progress.advance(len(chunk))
        final = not chunk
        if not final and b"\n" not in chunk:
            parts.append(chunk)
            continue
        data = b"".join([*parts, chunk]) if parts else chunk
        pos = 0
        while True:
            pos, number = take(data, pos, number, batch, numbers, BATCH, final)
            if len(batch) < BATCH:
                break
            yield numbers, batch
            batch, numbers = [], []
        parts = [data[pos:]] if pos < len(data) else []
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

