"""Checkpoints: a restored pipeline summarises exactly like the original and folds on."""

from __future__ import annotations

import lz4.frame
import msgspec
import pytest
from conftest import assert_same, lines
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.aggregate.checkpoint import Caps, State, WindowState, decode, dump, encode, load
from monitor.aggregate.pipeline import Pipeline
from monitor.offline.replay import build
from monitor.settings import load as load_settings
from monitor.simulate import Simulator


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

    from monitor.ingest.slices import Cap, Slicer

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


def test_repeated_checkpoints_reuse_unchanged_tables_and_stay_exact():
    """Checkpoint after every batch (tables unchanged since the last one reuse their
    bytes): restoring any of them and folding the rest equals one pass."""
    settings = load_settings(window_seconds=60, allowed_lateness_seconds=120)
    messages = list(Simulator(seed=8, scenario="steady", rate=20.0).traces(4000))
    whole = Pipeline(settings)
    whole.feed(messages)
    running = Pipeline(settings)
    blobs = []
    for i in range(0, 4000, 250):
        running.feed(messages[i:i + 250])
        running.feed_events([], "labels")
        running.close_ready()
        blobs.append(dump(running, {"rag.decisions": i + 249}))
    assert len(set(blobs)) == len(blobs)
    for cut in (3, 9):
        restored, offsets = load(settings, blobs[cut])
        assert offsets == {"rag.decisions": cut * 250 + 249}
        restored.feed(messages[(cut + 1) * 250:])
        assert_same(build(restored), build(whole))


def test_checkpoints_of_the_previous_format_still_load():
    import zlib

    import msgspec

    settings = load_settings()
    original = Pipeline(settings)
    original.feed(list(Simulator(seed=2).traces(500)))
    state = msgspec.msgpack.decode(dump(original, {"t": 7})[4:])
    def plain(packed: bytes) -> dict:
        return msgspec.msgpack.decode(lz4.frame.decompress(packed))

    old = {**state, "version": 2, "totals": plain(state["totals"]),
           "open": {s: plain(b) for s, b in state["open"].items()}}
    restored, offsets = load(settings, zlib.compress(msgspec.msgpack.encode(old)))
    assert offsets == {"t": 7}
    assert_same(build(restored), build(original))


def test_checkpoints_with_zlib_tables_and_inline_segments_still_load():
    """Version 3 wrote each table and seen segment with zlib, and each sighting's slicing
    inline; a worker upgraded mid-stream restores from them."""
    import zlib

    import msgspec

    from monitor.aggregate.checkpoint import dump_seen, restore_seen

    settings = load_settings()
    messages = list(Simulator(seed=5).traces(600))
    original = Pipeline(settings)
    original.journal = []
    original.feed(messages[:400])
    state = msgspec.msgpack.decode(dump(original, {"rag.decisions": 399})[4:])

    def rezip(packed: bytes) -> bytes:
        return zlib.compress(lz4.frame.decompress(packed), 1)

    old = {**state, "version": 3, "totals": rezip(state["totals"]),
           "open": {s: rezip(b) for s, b in state["open"].items()}}
    segment = msgspec.msgpack.decode(lz4.frame.decompress(dump_seen(original.journal, 399)))
    slicings = segment["slicings"]
    inline = {"upto": 399, "entries": [[t, ts, start, *slicings[at], decision]
                                       for t, ts, start, at, decision in segment["entries"]]}
    restored, offsets = load(settings, b"RGM3" + msgspec.msgpack.encode(old))
    kept = restore_seen(restored, [zlib.compress(msgspec.msgpack.encode(inline))],
                        offsets["rag.decisions"])
    assert offsets == {"rag.decisions": 399} and [s.entries for s in kept] == [400]
    assert_same(build(restored), build(original))
    restored.feed(messages)  # the first 400 again, and 200 new
    original.feed(messages[400:])
    assert restored.input["duplicates"] == 400
    assert_same(build(restored)["releases"], build(original)["releases"])


def test_the_de_duplication_horizon_survives_a_restore_but_not_an_unacknowledged_batch():
    from monitor.aggregate.checkpoint import dump_seen, restore_seen

    settings = load_settings()
    messages = list(Simulator(seed=4).traces(900))
    running = Pipeline(settings)
    running.journal = []
    segments = []
    for upto in (299, 599, 899):  # three batches; the last one's checkpoint never written
        running.feed(messages[upto - 299:upto + 1])
        segments.append(dump_seen(running.journal, upto))
        running.journal.clear()
        if upto == 599:
            head = dump(running, {"rag.decisions": upto})
    restored, offsets = load(settings, head)
    kept = restore_seen(restored, segments, offsets["rag.decisions"])
    assert [s.upto for s in kept] == [299, 599] and sum(s.entries for s in kept) == 600
    restored.feed(messages[:900])  # redelivery of everything: only the last batch is new
    assert restored.input["duplicates"] == 600
    assert_same(build(restored)["releases"], build(running)["releases"])


def test_segments_expire_by_event_time_and_by_count():
    from monitor.aggregate.checkpoint import Segment, expired

    segments = [Segment(10, 100.0, 5), Segment(20, 200.0, 5), Segment(30, 300.0, 5)]
    keep, gone = expired(segments, watermark=350.0, horizon_seconds=200.0, max_entries=100)
    assert [s.upto for s in keep] == [20, 30] and [s.upto for s in gone] == [10]
    keep, gone = expired(segments, watermark=300.0, horizon_seconds=1e9, max_entries=6)
    assert [s.upto for s in keep] == [20, 30] and [s.upto for s in gone] == [10]


_names = st.text("abcdefghij_.-", min_size=1, max_size=8)
_counts = st.dictionaries(_names, st.integers(0, 2**40), max_size=4)
_tables = st.one_of(st.binary(max_size=40),
                    st.dictionaries(_names, st.lists(st.integers(0, 9), max_size=3), max_size=2))
_windows = st.builds(
    WindowState, st.integers(0, 2**40), _tables,
    st.dictionaries(_names, st.lists(st.lists(st.one_of(st.none(), _names), max_size=3),
                                     max_size=2), max_size=2),
    st.lists(st.tuples(_names, st.lists(st.tuples(_names, _names), max_size=2),
                       st.integers(0, 2**40), _names,
                       st.floats(allow_nan=False, allow_infinity=False)), max_size=3))
_states = st.builds(
    State, version=st.sampled_from([1, 2, 3, 4]), offsets=_counts,
    watermark=st.floats(allow_nan=False, allow_infinity=False),
    open=st.dictionaries(st.integers(0, 2**40).map(str), _tables, max_size=3), totals=_tables,
    recent=st.lists(_windows, max_size=3), closed_count=st.integers(0, 2**40), input=_counts,
    rejected=_counts, events=st.dictionaries(_names, _counts, max_size=2), joined=_counts,
    expired=_counts, waiting=_counts, pending=st.lists(st.binary(max_size=30), max_size=3),
    caps=st.builds(Caps, st.lists(_names, max_size=3),
                   st.dictionaries(_names, st.lists(_names, max_size=3), max_size=2),
                   st.lists(_names, max_size=3)))


@given(_states)
@settings(max_examples=200, deadline=None)
def test_a_checkpoint_state_decodes_to_itself(state):
    assert decode(encode(state)) == state


def test_a_pipeline_loaded_from_a_checkpoint_writes_the_same_checkpoint(examples):
    settings = load_settings()
    original = Pipeline(settings)
    original.feed_events(lines(examples / "labels.jsonl")[:2], "labels")
    original.feed(list(Simulator(seed=8).traces(800)) + lines(examples / "bad-traces.jsonl"))
    original.close_ready()
    blob = dump(original, {"rag.decisions": 9})
    restored, _ = load(settings, blob)
    assert decode(dump(restored, {"rag.decisions": 9})) == decode(blob)


def test_bytes_that_are_not_a_checkpoint_are_refused_with_a_reason():
    with pytest.raises(ValueError, match="not a checkpoint"):
        decode(b"RGM3" + msgspec.msgpack.encode({"version": 4, "offsets": "x"}))
    with pytest.raises(ValueError, match="version 9 is not one of"):
        decode(encode(msgspec.structs.replace(
            decode(dump(Pipeline(load_settings()), {})), version=9)))
