# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled fold: a chunk of decoded traces straight into a table's rows.

Same arithmetic as `encode.encode` followed by `Table.add` (the pure-Python reference,
used when this module is not built; tests/test_fold.py checks both give the same
table), without the intermediate (trace, column) arrays: each contribution is added to
the trace's cells as it is read. Per trace that is a few dozen attribute reads and
~250 integer increments in C instead of ~10 us of interpreted Python.
"""

from cpython.dict cimport PyDict_GetItem
from cpython.ref cimport PyObject
from libc.stdlib cimport free, realloc
from libc.string cimport memset

cdef extern from "Python.h":
    PyObject* _PyDict_GetItem_KnownHash(object, object, Py_hash_t) except? NULL
    int _PyDict_SetItem_KnownHash(object, object, object, Py_hash_t) except -1
    Py_hash_t PyObject_Hash(object) except -1

from monitor.aggregate._slots cimport _check_slots, _of, _offset, _slot

from monitor.aggregate.table import TOTAL
from monitor.ingest.contract import DECISIONS, IMPORTANCES, SELF_CHECKS, VERDICTS
from monitor.ingest.contract import Check, Claim, Requirements, Trace, Usage
from monitor.ingest.meaning import ANSWERED, requirement_outcome

cdef frozenset _ANSWERED = ANSWERED


# Fields are read from their Structs' slots (`_slots.pxd`), at offsets read at import.
cdef Py_ssize_t T_DECISION = _offset(Trace, "decision"), T_REASON = _offset(Trace, "reason")
cdef Py_ssize_t T_SIGNALS = _offset(Trace, "signals"), T_CLAIMS = _offset(Trace, "claims")
cdef Py_ssize_t T_REQUIREMENTS = _offset(Trace, "requirements")
cdef Py_ssize_t T_CHECKS = _offset(Trace, "checks"), T_USAGE = _offset(Trace, "usage")
cdef Py_ssize_t T_EVALS = _offset(Trace, "evals")
cdef Py_ssize_t C_VERDICT = _offset(Claim, "verdict"), C_IMPORTANCE = _offset(Claim, "importance")
cdef Py_ssize_t C_RENDERED = _offset(Claim, "rendered")
cdef Py_ssize_t R_EXPECTED = _offset(Requirements, "expected")
cdef Py_ssize_t R_RUBRIC = _offset(Requirements, "rubric")
cdef Py_ssize_t K_CITATION = _offset(Check, "citation"), K_VERBATIM = _offset(Check, "verbatim")
cdef Py_ssize_t K_SELF_CHECK = _offset(Check, "self_check")
cdef Py_ssize_t U_LATENCY = _offset(Usage, "latency_ms"), U_COST = _offset(Usage, "cost")
cdef Py_ssize_t U_INPUT = _offset(Usage, "input_tokens")
cdef Py_ssize_t U_OUTPUT = _offset(Usage, "output_tokens")
cdef Py_ssize_t U_CALLS = _offset(Usage, "model_calls")


_check_slots((Trace, Claim, Requirements, Check, Usage))

cdef class Hist:
    """One histogram of the layout: bins at `offset`, count, sum and sum of squares."""

    cdef public str name
    cdef long long offset, count_col, sum_col
    cdef double[::1] edges
    cdef Py_ssize_t n_edges

    def __init__(self, str name, edges, long long offset, long long count_col,
                 long long sum_col):
        self.name = name
        self.edges = edges
        self.n_edges = len(edges)
        self.offset = offset
        self.count_col = count_col
        self.sum_col = sum_col


cdef class Codes:
    """Column indices of a layout, in the shapes the fold reads them."""

    cdef long long traces, claims_traces, gate_leaks, requirements_traces
    cdef long long requirements_all, requirements_critical_missed, citation_true
    cdef long long citation_verbatim_false, usage_traces, reason_other
    cdef long long coverage_sum, input_tokens_sum, output_tokens_sum, model_calls_sum
    cdef dict decision, reason, claim, self_check, evals
    cdef list hists            # every histogram, read from the signals map by name
    cdef Hist ratio, latency, cost

    def __init__(self, layout):
        col = layout.counts
        s = layout.sums
        self.traces = col["traces"]
        self.claims_traces = col["claims_traces"]
        self.gate_leaks = col["gate_leaks"]
        self.requirements_traces = col["requirements_traces"]
        self.requirements_all = col["requirements_all"]
        self.requirements_critical_missed = col["requirements_critical_missed"]
        self.citation_true = col["citation_true"]
        self.citation_verbatim_false = col["citation_verbatim_false"]
        self.usage_traces = col["usage_traces"]
        self.reason_other = col["reason_other"]
        self.coverage_sum = s["coverage_sum"]
        self.input_tokens_sum = s["input_tokens_sum"]
        self.output_tokens_sum = s["output_tokens_sum"]
        self.model_calls_sum = s["model_calls_sum"]
        self.decision = {d: col[f"decision_{d}"] for d in DECISIONS}
        self.reason = {code: layout.reason_column(code) for code in layout.reasons}
        self.claim = {i: {v: col[f"claims_{i}_{v}"]
                          for v in VERDICTS}
                      for i in IMPORTANCES}
        self.self_check = {v: col[f"self_check_{v}"] for v in SELF_CHECKS}
        self.evals = {name: (col[f"eval_{name}"], s[f"eval_{name}"]) for name in layout.evals}
        self.hists = [Hist(h.name, h.edges, h.offset, h.count_col, h.sum_col)
                      for h in layout.histograms.values()]
        by_name = {h.name: h for h in self.hists}
        self.ratio = by_name.get("supported_claim_ratio")
        self.latency = by_name["latency_ms"]
        self.cost = by_name["cost"]


cdef inline void bump(long long[:, ::1] counts, long long* rows, int nrows,
                      long long col) noexcept nogil:
    cdef int r
    for r in range(nrows):
        counts[rows[r], col] += 1


cdef inline void put(double[:, ::1] sums, long long* rows, int nrows, long long col,
                     double value) noexcept nogil:
    cdef int r
    for r in range(nrows):
        sums[rows[r], col] += value


cdef inline void observe(long long[:, ::1] counts, double[:, ::1] sums, long long* rows,
                         int nrows, Hist h, double value):
    # searchsorted(edges, value, side="right"): the number of edges <= value
    cdef Py_ssize_t lo = 0, hi = h.n_edges, mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if h.edges[mid] <= value:
            lo = mid + 1
        else:
            hi = mid
    bump(counts, rows, nrows, h.offset + lo)
    bump(counts, rows, nrows, h.count_col)
    put(sums, rows, nrows, h.sum_col, value)
    put(sums, rows, nrows, h.sum_col + 1, value * value)


cdef class Tally:
    """Extras counted per (kind, name) and row over one chunk, then added to the table's
    `(row, kind, name)` dict once per row and name: a chunk repeats a few names (rubric
    versions, missing requirement ids) over its traces' cells, and a dict update per
    trace and cell cost a fifth of the fold."""

    cdef dict slots            # kind -> name -> slot (no (kind, name) tuple per add)
    cdef list names
    cdef long long* cells
    cdef Py_ssize_t width, capacity

    def __cinit__(self, Py_ssize_t width):
        self.slots = {}
        self.names = []
        self.width = width
        self.capacity = 0
        self.cells = NULL

    def __dealloc__(self):
        free(self.cells)

    cdef void add(self, long long* rows, int nrows, str kind, str name) except *:
        cdef Py_ssize_t slot, grown
        cdef int r
        cdef long long* more
        of_kind = self.slots.get(kind)
        if of_kind is None:
            of_kind = self.slots[kind] = {}
        found = (<dict>of_kind).get(name)
        if found is None:
            slot = len(self.names)
            if slot == self.capacity:
                grown = 2 * self.capacity if self.capacity else 4
                more = <long long*>realloc(self.cells, grown * self.width * sizeof(long long))
                if more == NULL:
                    raise MemoryError()
                memset(more + self.capacity * self.width, 0,
                       (grown - self.capacity) * self.width * sizeof(long long))
                self.cells = more
                self.capacity = grown
            of_kind[name] = slot
            self.names.append((kind, name))
        else:
            slot = found
        cdef long long* counts = self.cells + slot * self.width
        for r in range(nrows):
            counts[rows[r]] += 1

    cdef void flush(self, dict extras) except *:
        cdef Py_ssize_t slot, row
        cdef long long* counts
        for slot in range(len(self.names)):
            kind, name = self.names[slot]
            counts = self.cells + slot * self.width
            for row in range(self.width):
                if counts[row]:
                    key = (row, kind, name)
                    extras[key] = extras.get(key, 0) + counts[row]


def fold(list traces, list rows, long long[:, ::1] counts, double[:, ::1] sums,
         dict extras, Codes codes, admit_missing, list exemplars, list last):
    """Add `traces[i]` to each of its cells: the rows `rows[i]` (a tuple; -1 pads it);
    `last[row]` becomes `exemplars[i]` (the caller sizes `last` to the table's rows)."""
    cdef Py_ssize_t i, n = len(traces), limit = counts.shape[0], known = len(last)
    cdef long long cells[64]
    cdef long long row
    cdef int nrows, supported, claimed, r
    cdef bint leak
    cdef Hist h
    cdef Tally tally = Tally(limit)
    # A `slices.Cap` returns an admitted id as it is: looked up here, called for the others.
    cdef object admitted = getattr(admit_missing, "admitted", None)
    if type(admitted) is not set:
        admitted = None
    for i in range(n):
        t = traces[i]
        nrows = 0
        for item in <tuple>rows[i]:
            row = item
            if row < 0:
                break
            if row >= limit or row >= known or nrows == 64:
                raise IndexError(f"row {row} outside the table, or over 64 cells")
            cells[nrows] = row
            nrows += 1
        exemplar = exemplars[i]
        for r in range(nrows):
            last[cells[r]] = exemplar
        _of(t, Trace)
        decision = _slot(t, T_DECISION)
        bump(counts, cells, nrows, codes.traces)
        bump(counts, cells, nrows, codes.decision[decision])
        reason = _slot(t, T_REASON)
        if reason is not None:
            bump(counts, cells, nrows, codes.reason.get(reason, codes.reason_other))
        signals = _slot(t, T_SIGNALS)
        claims = _slot(t, T_CLAIMS)
        supported = 0
        claimed = len(claims)
        if claimed:
            bump(counts, cells, nrows, codes.claims_traces)
            leak = False
            for c in claims:
                _of(c, Claim)
                verdict = _slot(c, C_VERDICT)
                importance = _slot(c, C_IMPORTANCE)
                bump(counts, cells, nrows, codes.claim[importance][verdict])
                if verdict == "supported":
                    supported += 1
                elif importance == "critical" and _slot(c, C_RENDERED):
                    leak = True
            # A gate leak (CONTRACT.md): answered with a rendered, unsupported critical claim.
            if leak and decision in _ANSWERED:
                bump(counts, cells, nrows, codes.gate_leaks)
            if codes.ratio is not None and "supported_claim_ratio" not in signals:
                observe(counts, sums, cells, nrows, codes.ratio, <double>supported / claimed)
        if signals:
            for h in codes.hists:
                found = signals.get(h.name)
                if found is not None:
                    observe(counts, sums, cells, nrows, h, found)
        req = _slot(t, T_REQUIREMENTS)
        if req is not None and _slot(_of(req, Requirements), R_EXPECTED):
            _requirements(req, counts, sums, tally, cells, nrows, codes, admit_missing,
                          admitted)
        checks = _slot(t, T_CHECKS)
        if checks is not None:
            _of(checks, Check)
            if _slot(checks, K_CITATION):
                bump(counts, cells, nrows, codes.citation_true)
                if _slot(checks, K_VERBATIM) is False:
                    bump(counts, cells, nrows, codes.citation_verbatim_false)
            self_check = _slot(checks, K_SELF_CHECK)
            if self_check is not None:
                bump(counts, cells, nrows, codes.self_check[self_check])
        usage = _slot(t, T_USAGE)
        if usage is not None:
            _of(usage, Usage)
            bump(counts, cells, nrows, codes.usage_traces)
            value = _slot(usage, U_LATENCY)
            if value is not None:
                observe(counts, sums, cells, nrows, codes.latency, value)
            value = _slot(usage, U_COST)
            if value is not None:
                observe(counts, sums, cells, nrows, codes.cost, value)
            value = _slot(usage, U_INPUT)
            if value is not None:
                put(sums, cells, nrows, codes.input_tokens_sum, value)
            value = _slot(usage, U_OUTPUT)
            if value is not None:
                put(sums, cells, nrows, codes.output_tokens_sum, value)
            value = _slot(usage, U_CALLS)
            if value is not None:
                put(sums, cells, nrows, codes.model_calls_sum, value)
        evals = _slot(t, T_EVALS)
        if evals:
            for name, score in evals.items():
                pair = codes.evals.get(name)
                if pair is not None:
                    bump(counts, cells, nrows, pair[0])
                    put(sums, cells, nrows, pair[1], score)
    tally.flush(extras)


# What a Requirements block contributes, by the block: `parts` decodes equal blocks into
# one shared object, so most traces find theirs here (keyed by id, the entry holding the
# object so that its id is not reused while cached).
cdef dict _FACTS = {}
cdef Py_ssize_t _FACTS_MAX = 4096


cdef tuple _facts(req):
    """(the block, all covered, coverage, sorted missing ids, a critical one missed,
    rubric) of a Requirements block with expected ids: `meaning.requirement_outcome`,
    computed once per shared block."""
    cdef PyObject* found = PyDict_GetItem(_FACTS, id(req))
    if found != NULL and (<tuple>found)[0] is req:
        return <tuple>found
    outcome = requirement_outcome(req)
    rubric = _slot(req, R_RUBRIC)
    facts = (req, outcome.all_required, outcome.coverage, tuple(outcome.missing),
             outcome.critical_missed, rubric if rubric else "unversioned")
    if len(_FACTS) >= _FACTS_MAX:
        _FACTS.clear()
    _FACTS[id(req)] = facts
    return facts


cdef void _requirements(req, long long[:, ::1] counts, double[:, ::1] sums, Tally tally,
                        long long* cells, int nrows, Codes codes, admit_missing,
                        admitted) except *:
    _, complete, coverage, missing, critical_missed, rubric = _facts(req)
    bump(counts, cells, nrows, codes.requirements_traces)
    if complete:
        bump(counts, cells, nrows, codes.requirements_all)
    for name in <tuple>missing:
        tally.add(cells, nrows, "missing",
                  name if admitted is not None and name in <set>admitted
                  else admit_missing(name))
    put(sums, cells, nrows, codes.coverage_sum, <double>coverage)
    if critical_missed:
        bump(counts, cells, nrows, codes.requirements_critical_missed)
    tally.add(cells, nrows, "rubric", rubric)


def row_tuples(table, list slicings):
    """`Table.row_tuples` with its lookups in C: the rows of each slicing's cells (its
    release total, then one per slice pair; -1 pads), allocating new cells' rows as
    `Table._rows_for` does."""
    cdef dict cache = table._rows, index = table.index
    cdef Py_ssize_t i, n = len(slicings), width = table.layout.cells_per_trace
    cdef list rows = [None] * n, new
    cdef PyObject* found
    allocate = table.row
    cdef Py_hash_t known
    for i in range(n):
        key = slicings[i]
        known = PyObject_Hash(key)  # once: a slicing's nested tuples are hashed afresh
        found = _PyDict_GetItem_KnownHash(cache, key, known)
        if found != NULL:
            rows[i] = <object>found
            continue
        release, pairs = key
        new = [_row(index, allocate, (release, TOTAL, TOTAL))]
        for dimension, value in pairs:
            new.append(_row(index, allocate, (release, dimension, value)))
        new.extend([-1] * (width - len(new)))
        rows[i] = tuple(new)
        _PyDict_SetItem_KnownHash(cache, key, rows[i], known)
    return rows


cdef inline object _row(dict index, allocate, tuple cell):
    """The row of a cell (`Table.row`): looked up in C, allocated by the table if new."""
    cdef PyObject* found = PyDict_GetItem(index, cell)
    return allocate(cell) if found == NULL else <object>found
