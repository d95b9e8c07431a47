"""Mergeable statistics of many cells: empty, add (vectorised over a batch), merge.

A `Table` holds, per cell key (release, dimension, value), one row of integer counts and
one row of float sums laid out by `layout.Layout`, plus named extras (missing
requirement ids, rubric versions). The release total is the cell (release, "", "").
Counts and sums only: every ratio, mean and quantile is derived on read (`derive`), so
adding is a scatter-add, merging is row addition, and both are exact, associative and
commutative (sums are float; their addition is exact up to rounding).

    >>> t = Table.empty(layout)
    >>> rows = t.rows_of([("r1", (("language", "en"),))])   # -> [[0, 1]]
    >>> t.add(rows, encode(traces, layout, admit))
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np

from monitor.aggregate.encode import Contributions
from monitor.aggregate.layout import Layout
from monitor.ingest.slices import Slicing

__all__ = ["TOTAL", "Cell", "CellKey", "Exemplar", "Table"]

CellKey = tuple[str, str, str]  # (release, dimension, value)
TOTAL = ""  # dimension and value of a release's total cell
Exemplar = tuple[int, str, float]  # (input position, trace_id, ts): a cell's last trace


class Cell(NamedTuple):
    """The statistics of one cell, copied out of a table (an immutable value to derive from)."""

    counts: np.ndarray
    sums: np.ndarray
    extras: dict[tuple[str, str], int]


class Table:
    """Statistics of many cells; rows are allocated on first use and never move."""

    __slots__ = ("_rows", "counts", "extras", "index", "keys", "layout", "sums", "version")

    def __init__(self, layout: Layout, capacity: int = 16) -> None:
        self.layout = layout
        self.index: dict[CellKey, int] = {}
        self.keys: list[CellKey] = []
        self.counts = np.zeros((capacity, layout.n_counts), np.int64)
        self.sums = np.zeros((capacity, layout.n_sums), np.float64)
        self.extras: dict[tuple[int, str, str], int] = {}
        self._rows: dict[Slicing, tuple[int, ...]] = {}  # rows of a slicing, padded with -1
        self.version = 0  # bumped by every change (checkpoints re-encode changed tables only)

    @classmethod
    def empty(cls, layout: Layout) -> Table:
        return cls(layout)

    def __len__(self) -> int:
        return len(self.keys)

    def __iter__(self) -> Iterator[CellKey]:
        return iter(self.keys)

    def row(self, key: CellKey) -> int:
        """The row of `key`, allocating it (and growing the arrays) if new."""
        row = self.index.get(key)
        if row is None:
            row = len(self.keys)
            self.version += 1
            self.index[key] = row
            self.keys.append(key)
            if row == len(self.counts):
                self.counts = _grow(self.counts)
                self.sums = _grow(self.sums)
        return row

    def rows_of(self, slicing: Sequence[Slicing]) -> np.ndarray:
        """Rows of each trace's cells: its release total and one per slice pair (-1 pads)."""
        rows = self.row_tuples(slicing)
        return np.array(rows, np.int64).reshape(len(rows), self.layout.cells_per_trace)

    def row_tuples(self, slicing: Sequence[Slicing]) -> list[tuple[int, ...]]:
        """`rows_of` as tuples (allocating new cells' rows)."""
        cache = self._rows
        return [cache.get(key) or self._rows_for(key) for key in slicing]

    def _rows_for(self, key: Slicing) -> tuple[int, ...]:
        release, pairs = key
        row = self.row
        # Every window table meets each slicing once: a plain loop, no generator.
        rows = [row((release, TOTAL, TOTAL))]
        for dim, value in pairs:
            rows.append(row((release, dim, value)))
        rows.extend([-1] * (self.layout.cells_per_trace - len(rows)))
        self._rows[key] = padded = tuple(rows)
        return padded

    def add(self, rows: np.ndarray, contrib: Contributions) -> None:
        """Fold a batch: trace i contributes to every row in `rows[i]` (>= 0)."""
        self.version += 1
        self._scatter(self.counts, rows, contrib.count_trace, contrib.count_col, None)
        self._scatter(self.sums, rows, contrib.sum_trace, contrib.sum_col, contrib.sum_value)
        if contrib.extras:
            extras = self.extras
            row_lists = rows.tolist()  # Python ints: iterating numpy scalars is ~10x slower
            for trace, kind, name in contrib.extras:
                for row in row_lists[trace]:
                    if row >= 0:
                        key = (row, kind, name)
                        extras[key] = extras.get(key, 0) + 1

    def add_columns(self, rows: Iterable[int], cols: Sequence[int], sign: int = 1) -> None:
        """Add (or with sign -1, retract) +1 in `cols` of each row: label and feedback joins."""
        self.version += 1
        for row in rows:
            for col in cols:
                self.counts[row, col] += sign

    def merge(self, other: Table) -> Table:
        """A new table holding the sum of both; neither operand changes."""
        merged = Table(self.layout, max(16, len(self) + len(other)))
        for table in (self, other):
            target = np.asarray([merged.row(k) for k in table.keys], np.int64)
            if len(target):
                merged.counts[target] += table.counts[: len(table)]
                merged.sums[target] += table.sums[: len(table)]
            for (row, kind, name), n in table.extras.items():
                key = (int(target[row]), kind, name)
                merged.extras[key] = merged.extras.get(key, 0) + n
        return merged

    def only(self, releases: Callable[[str], bool]) -> Table:
        """The cells of the releases `releases` accepts (this table itself if all are)."""
        kept = [row for row, key in enumerate(self.keys) if releases(key[0])]
        if len(kept) == len(self.keys):
            return self
        table = Table(self.layout, max(16, len(kept)))
        for key in (self.keys[row] for row in kept):
            table.row(key)
        table.counts[: len(kept)] = self.counts[kept]
        table.sums[: len(kept)] = self.sums[kept]
        new_row = {old: new for new, old in enumerate(kept)}
        table.extras = {(new_row[row], kind, name): n for (row, kind, name), n
                        in self.extras.items() if row in new_row}
        return table

    def cell(self, key: CellKey) -> Cell | None:
        row = self.index.get(key)
        if row is None:
            return None
        extras = {(k, n): v for (r, k, n), v in self.extras.items() if r == row}
        return Cell(self.counts[row].copy(), self.sums[row].copy(), extras)

    def cells(self) -> dict[CellKey, Cell]:
        """Every cell as an immutable value (one pass over the extras)."""
        extras: dict[int, dict[tuple[str, str], int]] = {}
        for (row, kind, name), n in self.extras.items():
            extras.setdefault(row, {})[(kind, name)] = n
        return {
            key: Cell(self.counts[row].copy(), self.sums[row].copy(), extras.get(row, {}))
            for row, key in enumerate(self.keys)
        }

    def to_state(self) -> dict[str, Any]:
        """Plain values (bytes, lists) for msgpack: checkpoints and reference profiles."""
        n = len(self)
        return {
            "keys": [list(key) for key in self.keys],
            "counts": self.counts[:n].tobytes(),
            "sums": self.sums[:n].tobytes(),
            "extras": [[row, kind, name, c] for (row, kind, name), c in self.extras.items()],
        }

    @classmethod
    def from_state(cls, layout: Layout, data: dict[str, Any]) -> Table:
        table = cls(layout, max(16, len(data["keys"])))
        for key in data["keys"]:
            table.row((key[0], key[1], key[2]))
        n = len(data["keys"])
        table.counts[:n] = np.frombuffer(data["counts"], np.int64).reshape(n, layout.n_counts)
        table.sums[:n] = np.frombuffer(data["sums"], np.float64).reshape(n, layout.n_sums)
        table.extras = {(row, kind, name): count for row, kind, name, count in data["extras"]}
        return table

    @staticmethod
    def _scatter(target: np.ndarray, rows: np.ndarray, trace: np.ndarray, col: np.ndarray,
                 weights: np.ndarray | None) -> None:
        if not len(trace):
            return
        width = target.shape[1]
        # Shift rows by one so the -1 padding lands in a leading block that is dropped:
        # no boolean mask over the (pairs x cells) matrix, which cost more than the sum.
        flat = ((rows[trace] + 1) * width + col[:, None]).ravel()
        w = None if weights is None else np.repeat(weights, rows.shape[1])
        binned = np.bincount(flat, weights=w)[width:]
        view = target.reshape(-1)
        view[: len(binned)] += binned.astype(target.dtype, copy=False)


def _grow(array: np.ndarray) -> np.ndarray:
    bigger = np.zeros((2 * len(array), array.shape[1]), array.dtype)
    bigger[: len(array)] = array
    return bigger
