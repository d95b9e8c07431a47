"""An agent's events gathered into batches, folded, then acknowledged one batch at a time."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Protocol

__all__ = ["BatchSink", "Batches"]

log = logging.getLogger("ragmon.worker")


class BatchSink(Protocol):
    """What a batch is folded into (the worker)."""

    settings: Any

    async def fold(self, events: list[Any], kind: str) -> None: ...

    def restart_in_place(self) -> None: ...


class Batches:
    """Events of one agent gathered into batches of `batch_size`, or what arrived within
    `batch_seconds`, folded, then acknowledged (and so committed) one batch at a time.

    Faust's own `take_events` does this with a coroutine per event that measured ~10% of
    a bare agent's rate on this machine (`benchmarks/RESULTS.md`); here the agent iterates
    a stream without automatic acks, as a bare agent does, and acks after the fold."""

    def __init__(self, worker: BatchSink, kind: str, stream: Any) -> None:
        self.worker = worker
        self.kind = kind
        self.stream = stream
        self.pending: list[Any] = []
        self.since = 0.0  # monotonic time the oldest pending event arrived
        self._lock = asyncio.Lock()  # batches fold in the order they were taken

    def add(self, event: Any) -> int:
        if not self.pending:
            self.since = time.monotonic()
        self.pending.append(event)
        return len(self.pending)

    async def flush(self) -> None:
        async with self._lock:
            events, self.pending = self.pending, []
            if not events:
                return
            try:
                await self.worker.fold(events, self.kind)
            except Exception:
                # Later batches must not fold past this one (their offsets would make a
                # restore skip it): start again from the checkpoints, as after kill -9.
                log.exception("folding a batch of %d %s failed: restarting in place",
                              len(events), self.kind)
                self.worker.restart_in_place()
            for event in events:
                await self.stream.ack(event)

    async def flush_when_idle(self) -> None:
        """Fold what waited `batch_seconds` while no batch filled."""
        seconds = self.worker.settings.batch_seconds
        while True:
            await asyncio.sleep(seconds / 4)
            if self.pending and time.monotonic() - self.since >= seconds:
                await self.flush()
