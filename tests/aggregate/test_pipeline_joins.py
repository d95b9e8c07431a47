"""Label and feedback joins: before or after the trace, replacement, redelivery."""

from __future__ import annotations

import json
from datetime import datetime

from monitor.aggregate.derive import summarize
from monitor.aggregate.pipeline import Pipeline
from monitor.aggregate.table import TOTAL
from monitor.settings import load


def epoch(ts: str) -> int:
    return int(datetime.fromisoformat(ts).timestamp())


def trace(tid, decision="answer", ts="2026-11-29T10:00:00Z"):
    doc = {"schema": "rag-decision/1", "trace_id": tid, "ts": ts,
           "system": {"release": "r"}, "decision": decision, "slice": {"language": "en"}}
    if decision == "abstain":
        doc["reason"] = "weak_retrieval"
    return json.dumps(doc).encode()


def label(tid, source="human", ts="2026-11-30T08:00:00Z", **flags):
    return json.dumps({"schema": "rag-label/1", "trace_id": tid, "ts": ts,
                       "source": source, **flags}).encode()


def total(pipeline, *, final=True):
    pipeline.close_ready(final=final)
    table = pipeline.totals
    return summarize(table.cell(("r", TOTAL, TOTAL)), pipeline.layout)


def test_label_before_and_after_its_trace_counts_the_same():
    before = Pipeline(load())
    before.feed_events([label("t1", correct=True, answerable=True)], "labels")
    before.feed([trace("t1")])
    after = Pipeline(load())
    after.feed([trace("t1")])
    after.feed_events([label("t1", correct=True, answerable=True)], "labels")
    for p in (before, after):
        labels = total(p)["labels"]
        assert labels["labelled"] == 1
        assert labels["selective_accuracy"] == 1.0
        assert labels["correct_on_answerable"] == 1.0


def test_label_lands_in_the_traces_window_even_after_it_closed():
    p = Pipeline(load(window_seconds=60, allowed_lateness_seconds=0))
    p.feed([trace("t1", ts="2026-11-29T10:00:00Z"), trace("t2", ts="2026-11-29T12:00:00Z")])
    closed = p.close_ready()
    # The 10:00 window is closed by the 12:00 trace.
    assert [window.start for window in closed] == [epoch("2026-11-29T10:00:00Z")]
    p.feed_events([label("t1", answerable=False)], "labels")
    labels = total(p)["labels"]
    assert labels["labelled"] == 1
    assert labels["unsupported_answering_on_unanswerable"] == 1.0


def test_human_label_replaces_judge_and_redelivery_changes_nothing():
    p = Pipeline(load())
    p.feed([trace("t1")])
    p.feed_events([label("t1", source="judge", correct=True)] * 3, "labels")
    p.feed_events([label("t1", source="human", correct=False)], "labels")
    p.feed_events([label("t1", source="judge", correct=True, ts="2026-12-01T00:00:00Z")],
                  "labels")
    labels = total(p)["labels"]
    assert labels["labelled"] == 1
    assert labels["selective_accuracy"] == 0.0


def test_feedback_latest_score_counts_once():
    p = Pipeline(load())
    fb = [json.dumps({"schema": "rag-feedback/1", "trace_id": "t1", "ts": ts, "score": s})
          .encode() for ts, s in (("2026-11-29T10:01:00Z", 1), ("2026-11-29T10:02:00Z", -1))]
    p.feed_events(fb[:1], "feedback")
    p.feed([trace("t1")])
    p.feed_events(fb, "feedback")
    assert total(p)["feedback"] == {"up": 0, "down": 1}


def test_unmatched_events_wait_then_expire():
    p = Pipeline(load(pending_retention_seconds=3600))
    p.feed_events([label("ghost", ts="2026-11-29T09:00:00Z")], "labels")
    assert p.joiner.waiting()["labels"] == 1
    p.feed([trace("t1", ts="2026-11-29T11:00:00Z")])
    assert p.joiner.waiting()["labels"] == 0 and p.joiner.expired["labels"] == 1


def test_rejected_label_is_counted():
    p = Pipeline(load())
    dead = p.feed_events([b'{"schema":"rag-label/1","trace_id":"t1"}'], "labels")
    assert p.events["labels"]["rejected"] == 1 and dead[0][1].reason == "missing_field"
