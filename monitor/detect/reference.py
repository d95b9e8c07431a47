"""Reference profiles: the frozen statistics of the traffic a release's gate was calibrated on.

A profile is the merged table of a release's closed windows over its reference period
(release total and every slice cell), with the version components seen then. Drift is
measured against it; a component it has not seen makes it stale ("recalibration
required"). Profiles are values: frozen once, stored as bytes (a compacted topic, a
file) and loaded back; `grow` makes a larger one from later alarm-free traffic
(monitor/detect/growth.py says when).

    >>> acc = Accumulator("r1"); acc.add(window_start, table, {(None,) * 6})
    >>> profile = acc.freeze(frozen_at=time.time())
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any

import msgspec

from monitor.aggregate.layout import Layout
from monitor.aggregate.table import TOTAL, Cell, Table
from monitor.ingest.contract import COMPONENT_NAMES, Components

__all__ = [
    "FREEZE_PREFIX", "Accumulator", "Reference", "from_bytes",
]

# Key prefix of a freeze request on the references topic (value empty): the worker
# drops the release's reference and freezes a new one from the traffic that follows.
FREEZE_PREFIX = b"freeze:"
_VERSION = 1


@dataclass(frozen=True)
class Reference:
    """One release's frozen profile."""

    release: str
    frozen_at: float       # epoch seconds (event time) when it was frozen
    first_window: int      # start of the first window it holds
    last_window: int       # start of the last window it holds
    windows: int           # closed windows folded (traffic per window = traces / windows)
    components: frozenset[Components]
    table: Table = field(repr=False)
    growths: int = 0       # blocks of later alarm-free traffic folded in (monitor/detect/growth.py)

    @property
    def traces(self) -> int:
        cell = self.cell(TOTAL, TOTAL)
        return 0 if cell is None else int(cell.counts[self.table.layout.counts["traces"]])

    def cell(self, dimension: str, value: str) -> Cell | None:
        return self.table.cell((self.release, dimension, value))

    def changed_components(self, seen: set[Components]) -> list[str]:
        """Human-readable component changes in `seen` that this profile has not seen."""
        changes: list[str] = []
        for new in sorted(seen - self.components, key=str):
            for i, name in enumerate(COMPONENT_NAMES):
                before = sorted({str(old[i]) for old in self.components})
                if str(new[i]) not in before:
                    changes.append(f"{name}: {'|'.join(before)} -> {new[i]}")
        return sorted(set(changes))

    def grow(self, block: Accumulator) -> Reference:
        """This profile with a block of later, alarm-free traffic of its release folded in."""
        return Reference(self.release, self.frozen_at, self.first_window,
                         max(self.last_window, block.last_window), self.windows + block.windows,
                         self.components | block.components, self.table.merge(block.table),
                         self.growths + 1)

    def to_bytes(self) -> bytes:
        state = {
            "version": _VERSION, "release": self.release, "frozen_at": self.frozen_at,
            "first_window": self.first_window, "last_window": self.last_window,
            "windows": self.windows, "components": [list(c) for c in sorted(self.components,
                                                                             key=str)],
            "table": self.table.to_state(), "growths": self.growths,
        }
        return zlib.compress(msgspec.msgpack.encode(state), 6)

    def describe(self) -> dict[str, Any]:
        """What `ragmon reference list` shows."""
        return {
            "release": self.release, "traces": self.traces, "windows": self.windows,
            "frozen_at": self.frozen_at, "first_window": self.first_window,
            "last_window": self.last_window, "cells": len(self.table),
            "growths": self.growths,
            "components": [dict(zip(COMPONENT_NAMES, c, strict=True))
                           for c in sorted(self.components, key=str)],
        }


def from_bytes(layout: Layout, blob: bytes) -> Reference:
    state: dict[str, Any] = msgspec.msgpack.decode(zlib.decompress(blob))
    if state.get("version") != _VERSION:
        raise ValueError(f"reference version {state.get('version')!r} is not {_VERSION}")
    table = Table.from_state(layout, state["table"])
    if table.layout.n_counts != layout.n_counts:
        raise ValueError("reference was frozen with another layout (signals/reasons differ)")
    return Reference(state["release"], state["frozen_at"], state["first_window"],
                     state["last_window"], state["windows"],
                     frozenset(tuple(c) for c in state["components"]), table,
                     int(state.get("growths", 0)))


class Accumulator:
    """Closed windows of one release on their way to becoming its reference."""

    def __init__(self, release: str, layout: Layout) -> None:
        self.release = release
        self.table = Table.empty(layout)
        self.windows = 0
        self.first_window: int | None = None
        self.last_window = 0
        self.components: set[Components] = set()

    @property
    def traces(self) -> int:
        row = self.table.index.get((self.release, TOTAL, TOTAL))
        return 0 if row is None else int(self.table.counts[row,
                                                           self.table.layout.counts["traces"]])

    def add(self, window_start: int, table: Table, components: set[Components]) -> None:
        """Fold the release's cells of one closed window."""
        own = Table.empty(table.layout)
        keys = [k for k in table.keys if k[0] == self.release]
        if not keys:
            return
        rows = [table.index[k] for k in keys]
        for key, row in zip(keys, rows, strict=True):
            target = own.row(key)
            own.counts[target] = table.counts[row]
            own.sums[target] = table.sums[row]
        self.table = self.table.merge(own)
        self.windows += 1
        self.first_window = window_start if self.first_window is None else self.first_window
        self.last_window = window_start
        self.components |= components

    def freeze(self, frozen_at: float) -> Reference:
        return Reference(self.release, frozen_at, self.first_window or 0, self.last_window,
                         max(1, self.windows), frozenset(self.components), self.table)
