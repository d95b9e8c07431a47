"""Event time: out-of-order traces fold into their window; later ones are late, not lost."""

from __future__ import annotations

import json
from datetime import datetime

from monitor.aggregate.pipeline import Pipeline
from monitor.settings import load


def epoch(ts: str) -> int:
    return int(datetime.fromisoformat(ts).timestamp())


def trace(tid, ts):
    return json.dumps({"schema": "rag-decision/1", "trace_id": tid, "ts": ts,
                       "system": {"release": "r"}, "decision": "answer"}).encode()


def test_out_of_order_within_lateness_folds_into_its_window():
    p = Pipeline(load(window_seconds=60, allowed_lateness_seconds=120))
    p.feed([trace("a", "2026-11-29T10:02:30Z"), trace("b", "2026-11-29T10:00:10Z")])
    assert p.input["late"] == 0 and p.input["folded"] == 2
    assert sorted(p.windows.open) == [epoch("2026-11-29T10:00:00Z"), epoch("2026-11-29T10:02:00Z")]


def test_too_late_is_counted_and_dead_lettered():
    p = Pipeline(load(window_seconds=60, allowed_lateness_seconds=60))
    dead = p.feed([trace("a", "2026-11-29T10:10:00Z"), trace("b", "2026-11-29T10:00:10Z")])
    assert p.input["late"] == 1 and p.input["folded"] == 1
    assert [(i, r.reason) for i, r in dead] == [(1, "late")]
    assert b'"trace_id":"b"' in dead[0][1].payload


def test_duplicate_within_horizon_is_not_folded_twice():
    p = Pipeline(load(trace_retention_seconds=3600))
    p.feed([trace("a", "2026-11-29T10:00:00Z")])
    p.feed([trace("a", "2026-11-29T10:00:00Z"), trace("b", "2026-11-29T10:30:00Z")])
    assert p.input["duplicates"] == 1 and p.input["folded"] == 2
    # Beyond the horizon the id is forgotten (memory is bounded): a replay would count again.
    # (The worker's clock: on the input's own, one trace after a pause could not move it.)
    p.feed([trace("c", "2026-11-29T12:00:00Z")], clock=epoch("2026-11-29T12:00:00Z"))
    assert "a" not in p.seen.refs


def test_closing_windows_moves_counts_to_totals():
    p = Pipeline(load(window_seconds=60, allowed_lateness_seconds=0))
    p.feed([trace("a", "2026-11-29T10:00:00Z"), trace("b", "2026-11-29T10:05:00Z")])
    closed = p.close_ready()
    assert len(closed) == 1 and len(p.windows.open) == 1
    assert int(p.totals.counts[0, p.layout.counts["traces"]]) == 1


def test_windows_close_past_the_lateness_oldest_first():
    from monitor.aggregate.layout import from_settings
    from monitor.aggregate.windows import Windows

    windows = Windows(from_settings(load()), window_seconds=60, lateness_seconds=30)
    for start in (120, 0, 60):
        windows.table(start)
    assert windows.table(60) is windows.table(60)  # one table per window
    windows.watermark = 149.0  # horizon 119: [0, 60) closes, [60, 120) ends too late
    assert [start for start, _ in windows.close_ready()] == [0]
    windows.watermark = 150.0  # horizon 120: [60, 120) closes
    assert [start for start, _ in windows.close_ready()] == [60]
    assert [start for start, _ in windows.close_all()] == [120] and windows.open == {}
