"""Folds a chunk of decoded traces into a window table: compiled when built, else Python.

Each fold also notes the last trace of every row it touched (what an alarm on that
window's cells points to): a list by row, not a dict by slicing, whose hashing (nested
tuples, per trace) measured ~5% of the replay fold.

The compiled fold (`monitor/aggregate/_fold.pyx`, built by `pip install`) adds each contribution
to the trace's cells as it reads the trace; the pure-Python fold encodes the chunk
column by column (`encode.encode`) and scatters it (`Table.add`). Both give the same
table (tests/aggregate/test_fold.py); the compiled one measured ~1.9x the replay throughput here
(benchmarks/RESULTS.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from monitor.aggregate.compiled import FOLD
from monitor.aggregate.encode import encode
from monitor.aggregate.layout import Layout
from monitor.aggregate.table import Exemplar, Table
from monitor.ingest.contract import Trace
from monitor.ingest.slices import Slicing

__all__ = ["Folder"]


class Folder:
    """Folds chunks of one layout's traces into tables; `compiled=False` forces Python."""

    def __init__(self, layout: Layout, admit_missing: Callable[[str], str],
                 compiled: bool = FOLD is not None) -> None:
        if compiled and FOLD is None:
            raise RuntimeError("monitor.aggregate._fold is not built "
                               "(no C compiler at install time?)")
        self.layout = layout
        self.admit_missing = admit_missing
        self._compiled = FOLD if compiled else None
        self._codes = FOLD.Codes(layout) if FOLD is not None and compiled else None

    def fold(self, table: Table, traces: Sequence[Trace], slicings: Sequence[Slicing],
             exemplars: Sequence[Exemplar], last: list[Exemplar | None]
             ) -> list[tuple[int, ...]]:
        """Add `traces[i]` to the cells of `slicings[i]` in `table`, and make
        `exemplars[i]` the last trace of those cells: `last[row]`, grown to the table.
        Returns each trace's rows (`Table.row_tuples`)."""
        if not traces:
            return []
        # Table.row_tuples (in C when compiled); may grow the arrays: read them after.
        fast = self._compiled
        rows = table.row_tuples(slicings) if fast is None else fast.row_tuples(table, slicings)
        if len(last) < len(table):
            last.extend([None] * (len(table) - len(last)))
        if fast is None:
            table.add(table.rows_of(slicings), encode(traces, self.layout, self.admit_missing))
            for cells, exemplar in zip(rows, exemplars, strict=True):
                for row in cells:
                    if row < 0:
                        break
                    last[row] = exemplar
            return rows
        table.version += 1
        chunk = traces if isinstance(traces, list) else list(traces)  # the pipeline's: a list
        fast.fold(chunk, rows, table.counts, table.sums, table.extras, self._codes,
                  self.admit_missing, exemplars, last)
        return rows
