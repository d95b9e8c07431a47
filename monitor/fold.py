"""Folds a chunk of decoded traces into a window table: compiled when built, else Python.

Each fold also notes the last trace of every row it touched (what an alarm on that
window's cells points to): a list by row, not a dict by slicing, whose hashing (nested
tuples, per trace) measured ~5% of the replay fold.

The compiled fold (`monitor/_fold.pyx`, built by `pip install`) adds each contribution
to the trace's cells as it reads the trace; the pure-Python fold encodes the chunk
column by column (`encode.encode`) and scatters it (`Table.add`). Both give the same
table (tests/test_fold.py); the compiled one measured ~1.9x the replay throughput here
(benchmarks/RESULTS.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from monitor.aggregate import Table
from monitor.contract import Trace
from monitor.encode import encode
from monitor.layout import Layout
from monitor.slices import Slicing

try:
    from monitor import _fold  # type: ignore[attr-defined]
except ImportError:  # no C compiler at install time
    _fold = None

__all__ = ["COMPILED", "Exemplar", "Folder"]

COMPILED = _fold is not None
Exemplar = tuple[int, str, float]  # (input position, trace_id, ts) of a trace


class Folder:
    """Folds chunks of one layout's traces into tables; `compiled=False` forces Python."""

    def __init__(self, layout: Layout, admit_missing: Callable[[str], str],
                 compiled: bool = COMPILED) -> None:
        if compiled and _fold is None:
            raise RuntimeError("monitor._fold is not built (no C compiler at install time?)")
        self.layout = layout
        self.admit_missing = admit_missing
        self._codes = _fold.Codes(layout) if compiled else None

    def fold(self, table: Table, traces: Sequence[Trace], slicings: Sequence[Slicing],
             exemplars: Sequence[Exemplar], last: list[Exemplar | None]) -> None:
        """Add `traces[i]` to the cells of `slicings[i]` in `table`, and make
        `exemplars[i]` the last trace of those cells: `last[row]`, grown to the table."""
        if not traces:
            return
        # Table.row_tuples (in C when compiled); may grow the arrays: read them after.
        rows = (table.row_tuples(slicings) if self._codes is None
                else _fold.row_tuples(table, slicings))
        if len(last) < len(table):
            last.extend([None] * (len(table) - len(last)))
        if self._codes is None:
            table.add(table.rows_of(slicings), encode(traces, self.layout, self.admit_missing))
            for cells, exemplar in zip(rows, exemplars, strict=True):
                for row in cells:
                    if row < 0:
                        break
                    last[row] = exemplar
            return
        table.version += 1
        chunk = traces if isinstance(traces, list) else list(traces)  # the pipeline's: a list
        _fold.fold(chunk, rows, table.counts, table.sums, table.extras, self._codes,
                   self.admit_missing, exemplars, last)
