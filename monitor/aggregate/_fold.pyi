# Types of the compiled column fold (_fold.pyx), for mypy: its callers are checked
# against these. The pure-Python twins are `Table.row_tuples` and `encode` + `Table.add`.
from collections.abc import Callable
from typing import Any

import numpy as np

from monitor.aggregate.layout import Layout
from monitor.aggregate.table import Exemplar, Table
from monitor.ingest.contract import Trace
from monitor.ingest.slices import Slicing

class Codes:
    def __init__(self, layout: Layout) -> None: ...

def fold(traces: list[Trace], rows: list[tuple[int, ...]], counts: np.ndarray,
         sums: np.ndarray, extras: dict[Any, int], codes: Codes,
         admit_missing: Callable[[str], str], exemplars: list[Exemplar],
         last: list[Exemplar | None]) -> None: ...
def row_tuples(table: Table, slicings: list[Slicing]) -> list[tuple[int, ...]]: ...
