"""The label joiner (`Joiner`) on its own: deltas, replacement, waiting, expiry, bounds."""

from __future__ import annotations

from datetime import UTC, datetime

from monitor.aggregate.dedupe import Seen
from monitor.aggregate.joins import Joiner, TraceRef
from monitor.aggregate.layout import from_settings
from monitor.ingest.contract import Feedback, Label
from monitor.settings import load

LAYOUT = from_settings(load())
REF = TraceRef(600, ("r", (("language", "en"),)), "answer")


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def joiner(pending_seconds: float = 100, pending_max: int = 10) -> tuple[Joiner, Seen[TraceRef]]:
    return Joiner(LAYOUT, pending_seconds, pending_max), Seen(1e9, 1_000)


def test_a_label_of_a_seen_trace_is_one_delta_into_the_traces_window():
    join, seen = joiner()
    seen.first("t", 630.0, REF)
    [delta] = join.on_event(Label("t", at(9_000), "human", correct=True), seen)
    assert (delta.window_start, delta.slicing, delta.sign) == (600, REF.slicing, 1)
    assert delta.cols and join.joined["labels"] == 1


def test_a_human_label_replaces_a_judge_label_and_a_copy_changes_nothing():
    join, seen = joiner()
    seen.first("t", 630.0, REF)
    judge = Label("t", at(9_000), "judge", correct=False)
    human = Label("t", at(8_000), "human", correct=True)
    join.on_event(judge, seen)
    added, retracted = join.on_event(human, seen)  # older, but a human outranks a judge
    assert (added.sign, retracted.sign) == (1, -1) and added.cols != retracted.cols
    assert join.on_event(human, seen) == [] and join.on_event(judge, seen) == []
    assert join.joined["labels"] == 1  # one label counts per trace


def test_the_latest_feedback_counts():
    join, seen = joiner()
    seen.first("t", 630.0, REF)
    join.on_event(Feedback("t", at(9_000), 1), seen)
    assert join.on_event(Feedback("t", at(8_000), -1), seen) == []  # older: ignored
    added, retracted = join.on_event(Feedback("t", at(9_500), -1), seen)
    assert (added.sign, retracted.sign) == (1, -1) and join.joined["feedback"] == 1


def test_an_event_before_its_trace_waits_then_joins_once():
    join, seen = joiner()
    label = Label("t", at(9_000), "human", correct=True)
    assert join.on_event(label, seen) == [] and join.on_event(label, seen) == []
    assert join.waiting() == {"labels": 1}
    [delta] = join.on_trace("t", REF)
    assert delta.sign == 1 and join.waiting() == {} and join.pending == {}
    assert join.on_trace("t", REF) == []


def test_waiting_events_expire_by_event_time_and_by_the_bound():
    join, seen = joiner(pending_seconds=100, pending_max=2)
    for i, ts in enumerate((1_000.0, 1_050.0, 1_060.0)):
        join.on_event(Feedback(f"t{i}", at(ts), 1), seen)
    assert join.expire(watermark=0.0) == 1  # three waiting, two allowed: the oldest goes
    assert join.expire(watermark=1_155.0) == 1  # cutoff 1055: t1 (1050) is behind it
    assert join.expired == {"feedback": 2} and join.waiting() == {"feedback": 1}
    assert list(join.pending) == ["t2"]
