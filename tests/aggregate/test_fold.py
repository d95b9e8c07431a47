"""The compiled fold (monitor/aggregate/_fold.pyx) gives exactly the pure-Python fold's table."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import traces

from monitor.aggregate.compiled import FOLD
from monitor.aggregate.fold import Folder
from monitor.aggregate.layout import from_settings
from monitor.aggregate.pipeline import Pipeline
from monitor.aggregate.table import Table
from monitor.ingest.parse import Accepted, parse
from monitor.ingest.slices import Cap, Slicer
from monitor.settings import load
from monitor.simulate import SCENARIOS, Simulator

pytestmark = pytest.mark.skipif(FOLD is None,
                                reason="monitor.aggregate._fold not built (no C compiler)")

SETTINGS = load()
LAYOUT = from_settings(SETTINGS)


def folded(events, compiled: bool, layout=LAYOUT) -> Table:
    """The table of `events`, with its last trace per row as `table.last` (a test-only
    attribute on a subclass: Table has slots)."""
    table = _Table(layout)
    slicer = Slicer(("language", "fact_type", "risk", "query_length"), 50, 20)
    exemplars = [(i, e.trace_id, float(i)) for i, e in enumerate(events)]
    Folder(layout, Cap(2), compiled).fold(table, events, [slicer.keys(e) for e in events],
                                          exemplars, table.last)
    return table


class _Table(Table):
    __slots__ = ("last",)

    def __init__(self, layout) -> None:
        super().__init__(layout)
        self.last: list = []


def assert_same(a: Table, b: Table) -> None:
    assert getattr(a, "last", None) == getattr(b, "last", None)
    ca, cb = a.cells(), b.cells()
    assert ca.keys() == cb.keys()
    for key in ca:
        assert np.array_equal(ca[key].counts, cb[key].counts), key
        np.testing.assert_allclose(ca[key].sums, cb[key].sums, rtol=1e-12, atol=1e-9)
        assert ca[key].extras == cb[key].extras, key


def events_of(raw_traces):
    parsed = [parse(json.dumps(t).encode()) for t in raw_traces]
    return [p.event for p in parsed if isinstance(p, Accepted)]


@settings(max_examples=200, deadline=None)
@given(st.lists(traces(), max_size=40))
def test_compiled_fold_equals_python_fold(raw_traces):
    events = events_of(raw_traces)
    assert_same(folded(events, True), folded(events, False))


def test_edge_cases_fold_alike():
    base = {"schema": "rag-decision/1", "ts": "2026-11-29T10:00:00Z",
            "system": {"release": "r1"}, "decision": "answer"}
    raw_traces = [
        # duplicate expected ids, a critical one missing: coverage over distinct ids
        {**base, "trace_id": "a", "requirements": {"expected": ["x", "x", "y"],
                                                   "covered": ["x"], "critical": ["y"]}},
        # covered in another order than expected: complete, not the fast path
        {**base, "trace_id": "b", "requirements": {"expected": ["x", "y"],
                                                   "covered": ["y", "x"], "rubric": "v2"}},
        # more missing ids than the cap admits: the rest become `other`
        {**base, "trace_id": "c", "requirements": {"expected": ["p", "q", "r"]}},
        # a signal named like a usage histogram, and an unknown eval
        {**base, "trace_id": "d", "signals": {"latency_ms": 3.0, "cost": 0.5},
         "evals": {"faithfulness": 0.5, "unknown": 0.1}},
        # a leak: rendered unsupported critical claim on an answer; none on an abstain
        {**base, "trace_id": "e", "claims": [{"importance": "critical",
                                              "verdict": "contradicted"}]},
        {**base, "trace_id": "f", "decision": "abstain", "reason": "brand_new_code",
         "claims": [{"importance": "critical", "verdict": "unsupported"}]},
        # values on and beyond every histogram's edges
        {**base, "trace_id": "g", "signals": {"top_score": 1.0, "query_coverage": 0.0},
         "usage": {"latency_ms": 1e9, "cost": 0.0, "model_calls": 3}},
    ]
    events = events_of(raw_traces)
    assert len(events) == len(raw_traces)
    compiled = folded(events, True)
    assert_same(compiled, folded(events, False))
    total = compiled.cell(("r1", "", ""))
    assert total is not None
    assert total.counts[LAYOUT.counts["gate_leaks"]] == 1
    assert total.extras[("missing", "other")] == 2  # the cap admits y and p: q, r are other


def test_without_the_derived_ratio_signal():
    custom = SETTINGS.model_copy(update={"signals": {"top_score": SETTINGS.signals["top_score"]}})
    layout = from_settings(custom)
    events = [parse(raw).event for raw in Simulator(seed=3).traces(300)]
    assert_same(folded(events, True, layout), folded(events, False, layout))


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_pipelines_agree_on_every_scenario(scenario):
    raws = list(Simulator(seed=7, scenario=scenario, change_at=1_500, rate=50.0).traces(3_000))
    compiled, pure = Pipeline(SETTINGS), Pipeline(SETTINGS)
    pure.folder = Folder(pure.layout, pure.admit_missing, compiled=False)
    for pipeline in (compiled, pure):
        for i in range(0, len(raws), 500):
            pipeline.feed(raws[i : i + 500])
            pipeline.close_ready()
    assert compiled.input == pure.input
    assert_same(compiled.merged(), pure.merged())
    assert compiled.exemplars == pure.exemplars
    assert compiled.components == pure.components
    assert compiled.last_traces == pure.last_traces
    assert [w.last for w in compiled.recent.values()] == [w.last for w in pure.recent.values()]


@pytest.mark.parametrize("compiled", [True, False])
def test_each_closed_window_points_to_the_last_trace_of_every_cell(compiled):
    """What an alarm on a window links to: per cell (release total, each slice value), the
    last trace folded into it, by input position."""
    raws = list(Simulator(seed=11, rate=5.0).traces(2_000))
    pipeline = Pipeline(SETTINGS)
    pipeline.folder = Folder(pipeline.layout, pipeline.admit_missing, compiled)
    closed = []
    for i in range(0, len(raws), 300):
        pipeline.feed(raws[i : i + 300])
        closed += pipeline.close_ready()
    closed += pipeline.close_ready(final=True)
    expected: dict[int, dict] = {}
    seen = set()
    for position, raw in enumerate(raws):
        result = parse(raw)
        if not isinstance(result, Accepted) or result.event.trace_id in seen:
            continue
        trace = result.event
        seen.add(trace.trace_id)
        ts = trace.ts.timestamp()
        start = int(ts // SETTINGS.window_seconds) * SETTINGS.window_seconds
        release, pairs = pipeline.slicer.keys(trace)
        for key in ((release, ()), *((release, (pair,)) for pair in pairs)):
            expected.setdefault(start, {})[key] = (position, trace.trace_id, ts)
    assert len(expected) > 3
    assert {window.start: window.last for window in closed} == expected
