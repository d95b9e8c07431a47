# Types of the compiled admission loop (_admission.pyx), for mypy: the same signatures as
# its pure-Python reference, `admission.admit_python` and `admission.fold_chunk_python`.
from monitor.aggregate.admission import Admitting, Kept
from monitor.aggregate.joins import Delta
from monitor.ingest.parse import Rejection

def admit(pipe: Admitting, raws: list[bytes], dead: list[tuple[int, Rejection]],
          deltas: list[Delta], limit: float,
          aside: list[tuple[int, float]] | None) -> tuple[int, int]: ...
def fold_chunk(pipe: Admitting, chunk: list[Kept]) -> None: ...
