"""Checkpoints: a restored pipeline summarises exactly like the original and folds on."""

from __future__ import annotations

from conftest import assert_same, lines

from monitor.checkpoint import dump, load
from monitor.pipeline import Pipeline
from monitor.settings import load as load_settings
from monitor.simulate import Simulator
from monitor.summary import build


def test_round_trip_keeps_every_count(examples):
    settings = load_settings()
    original = Pipeline(settings)
    original.feed_events(lines(examples / "labels.jsonl")[:2], "labels")  # one waits
    original.feed(lines(examples / "traces.jsonl")[:6])
    original.feed(lines(examples / "bad-traces.jsonl"))
    restored, offsets = load(settings, dump(original, {"rag.decisions": 41}))
    assert offsets == {"rag.decisions": 41}
    assert_same(build(restored), build(original))
    # Both go on folding the same input to the same result (the waiting label joins).
    for p in (original, restored):
        p.feed(lines(examples / "traces.jsonl")[6:])
    assert_same(build(restored), build(original))
    assert build(restored)["labels"]["joined"] == 2


def test_split_stream_with_checkpoint_equals_one_pass():
    settings = load_settings()
    sim = Simulator(seed=5, scenario="index_change", change_at=1500)
    messages = list(sim.traces(3000))
    whole = Pipeline(settings)
    whole.feed(messages)
    first = Pipeline(settings)
    first.feed(messages[:1700])
    second, _ = load(settings, dump(first, {}))
    second.feed(messages[1700:])
    assert_same(build(second), build(whole))


def test_no_checkpoint_gives_a_fresh_pipeline():
    pipeline, offsets = load(load_settings(), None)
    assert offsets == {} and pipeline.input["read"] == 0


def test_pipelines_of_one_worker_share_their_caps():
    import json

    from monitor.slices import Cap, Slicer

    settings = load_settings(slice_values_max=2)
    slicer = Slicer(settings.slice_dimensions, 2, 20)
    missing = Cap(50)
    first, _ = load(settings, None, slicer, missing)
    second, _ = load(settings, None, slicer, missing)

    def trace(tid, language):
        return json.dumps({"schema": "rag-decision/1", "trace_id": tid,
                           "ts": "2026-11-29T10:00:00Z", "system": {"release": "r"},
                           "decision": "answer", "slice": {"language": language}}).encode()

    first.feed([trace("a", "en"), trace("b", "ru")])
    second.feed([trace("c", "de")])  # a third value: other, even in another partition
    languages = build(second)["releases"]["r"]["slices"]["language"]
    assert set(languages) == {"other"}
