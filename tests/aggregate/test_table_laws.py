"""Laws of the aggregation core: merge is associative and commutative, halves = whole."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import traces

from monitor.aggregate.derive import summarize
from monitor.aggregate.encode import encode
from monitor.aggregate.layout import from_settings
from monitor.aggregate.table import TOTAL, Table
from monitor.ingest.parse import Accepted, parse
from monitor.ingest.slices import Cap, Slicer
from monitor.settings import load

LAYOUT = from_settings(load())


def table_of(raw_traces):
    table = Table.empty(LAYOUT)
    parsed = [parse(json.dumps(t).encode()) for t in raw_traces]
    events = [p.event for p in parsed if isinstance(p, Accepted)]
    slicer = Slicer(("language", "fact_type", "risk", "query_length"), 50, 20)
    if events:
        rows = table.rows_of([slicer.keys(e) for e in events])
        table.add(rows, encode(events, LAYOUT, Cap(50)))
    return table


def same(a: Table, b: Table) -> bool:
    ca, cb = a.cells(), b.cells()
    return ca.keys() == cb.keys() and all(
        np.array_equal(ca[k].counts, cb[k].counts)
        and np.allclose(ca[k].sums, cb[k].sums, rtol=1e-9, atol=1e-6)
        and ca[k].extras == cb[k].extras
        for k in ca
    )


batches = st.lists(traces(), max_size=12)


@given(batches, batches, batches)
@settings(max_examples=60, deadline=None)
def test_merge_is_associative_and_commutative(a, b, c):
    ta, tb, tc = table_of(a), table_of(b), table_of(c)
    assert same(ta.merge(tb), tb.merge(ta))
    assert same(ta.merge(tb).merge(tc), ta.merge(tb.merge(tc)))
    assert same(ta.merge(Table.empty(LAYOUT)), ta)


@given(st.lists(traces(), max_size=30), st.integers(0, 30))
@settings(max_examples=60, deadline=None)
def test_stats_of_halves_merge_to_stats_of_whole(items, cut):
    assert same(table_of(items[:cut]).merge(table_of(items[cut:])), table_of(items))


def _rates(m, prefix=""):
    for key, value in m.items():
        if isinstance(value, dict):
            yield from _rates(value, f"{prefix}{key}.")
        elif key.endswith(("_rate", "_share", "_coverage", "_accuracy", "coverage_mean",
                           "_on_unanswerable", "_on_answerable")):
            yield f"{prefix}{key}", value


@given(st.lists(traces(), min_size=1, max_size=30))
@settings(max_examples=60, deadline=None)
def test_rates_stay_in_unit_interval(items):
    for cell in table_of(items).cells().values():
        for name, value in _rates(summarize(cell, LAYOUT)):
            assert value is None or 0.0 <= value <= 1.0, name


def test_release_total_counts_every_trace_once():
    items = [
        {"schema": "rag-decision/1", "trace_id": f"t{i}", "ts": "2026-11-29T10:00:00Z",
         "system": {"release": "r"}, "decision": "answer",
         "slice": {"language": "en" if i % 2 else "ru"}}
        for i in range(10)
    ]
    cells = table_of(items).cells()
    total = summarize(cells[("r", TOTAL, TOTAL)], LAYOUT)
    assert total["traces"] == 10
    en = summarize(cells[("r", "language", "en")], LAYOUT)
    assert en["traces"] == 5 and en["answer_coverage"] == 1.0
    assert total["requirements"]["coverage_mean"] is None  # empty denominator -> null
