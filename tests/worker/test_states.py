"""Partition states: restore, fold with redelivery, and the child process that serves them."""

from __future__ import annotations

import json
import multiprocessing
import pickle
import socket

from conftest import assert_same

from monitor.aggregate.pipeline import Pipeline
from monitor.frames import pack_frame, read_frame
from monitor.ingest.slices import Cap
from monitor.offline.replay import build
from monitor.settings import load as load_settings
from monitor.simulate import Simulator
from monitor.worker.states import (
    FoldGroups,
    Group,
    Request,
    Restore,
    States,
    serve,
)

TOPIC = "rag.decisions"


def _group(messages: list[bytes], first: int, last: int) -> Group:
    return Group(0, TOPIC, list(range(first, last)), messages[first:last])


def test_a_restored_partition_skips_what_it_applied_and_folds_the_rest_once():
    settings = load_settings()
    messages = list(Simulator(seed=3, scenario="steady").traces(3000))
    whole = Pipeline(settings)
    whole.feed(messages)

    first = States(settings)
    assert first.restore(0, None, []) == ({}, 0)
    [folded], missing, skipped = first.fold("decisions", [_group(messages, 0, 1700)])
    assert (missing, skipped) == ([], 0)
    assert (folded.upto, folded.offsets) == (1699, {TOPIC: 1699})
    assert folded.segment is not None and folded.expired == []

    # The next owner restores from what was written, and Kafka redelivers from 1500.
    second = States(settings)
    offsets, seen = second.restore(0, folded.state, [folded.segment])
    assert offsets == {TOPIC: 1699} and seen > 0
    [again], _, skipped = second.fold("decisions", [_group(messages, 1500, 3000)])
    assert skipped == 200 and again.offsets == {TOPIC: 2999}
    assert second.fold("decisions", [_group(messages, 2000, 3000)]) == ([], [], 1000)
    assert_same(build(second.held[0].pipeline), build(whole))


def test_rejections_come_back_with_their_index_in_the_group():
    settings = load_settings()
    states = States(settings)
    states.restore(0, None, [])
    good = list(Simulator(seed=4).traces(2))
    group = Group(0, TOPIC, [10, 11, 12], [good[0], b"{not json", good[1]])
    [folded], _, _ = states.fold("decisions", [group])
    assert [(i, r.reason) for i, r in folded.dead] == [(1, "not_json")]
    assert states.local().watermark > 0


def test_the_child_serves_requests_and_exits_when_the_worker_goes():
    ours, theirs = socket.socketpair()
    context = multiprocessing.get_context("spawn")
    child = context.Process(target=serve, args=(theirs, load_settings()), daemon=True)
    child.start()
    theirs.close()

    def call(request: Request | str) -> tuple[bool, object]:
        for part in pack_frame(request):
            ours.sendall(part)
        reply = read_frame(ours)
        assert reply is not None
        return pickle.loads(reply)  # type: ignore[no-any-return]

    try:
        assert call(Restore(3, None, [])) == (True, ({}, 0))
        ok, ([folded], missing, _) = call(FoldGroups("decisions", [
            Group(3, TOPIC, [0], [b"[]"]), Group(4, TOPIC, [0], [b"[]"])]))
        assert ok and [r.reason for _, r in folded.dead] == ["not_object"]
        assert missing == [4]  # not held here: the worker restores it and asks again
        ok, error = call("merge")
        assert not ok and "TypeError: not a request of the states process: 'merge'" in error
    finally:
        ours.close()  # as a kill -9 of the worker closes it
    child.join(timeout=60)
    assert child.exitcode == 0


class _Faulty(Cap):
    """A vocabulary of missing requirement ids with a planted fault (the one stand-in in
    this file): it raises for the ids named boom-*, inside the column fold of a chunk,
    after the traces before it in the chunk were added, as a bug in the fold would."""

    def __call__(self, value: str) -> str:
        if value.startswith("boom"):
            raise RuntimeError(f"planted fault {value}")
        return super().__call__(value)


def test_a_failure_inside_the_fold_sets_apart_that_message_only():
    settings = load_settings()
    good = list(Simulator(seed=9, scenario="steady").traces(3000))
    boom = [json.dumps({**json.loads(good[i]), "trace_id": f"boom-{i}",
                        "requirements": {"expected": [f"boom-{i}"]}}).encode()
            for i in range(4)]
    mixed = good[:]
    for k, message in enumerate(boom):
        mixed.insert(500 + 700 * k, message)
    faulty, clean = States(settings), States(settings)
    faulty.admit_missing = _Faulty(settings.missing_ids_max)
    dead, blobs = [], []
    for states, messages in ((faulty, mixed), (clean, good)):
        states.restore(0, None, [])
        for first in range(0, len(messages), 1000):
            group = _group(messages, first, min(first + 1000, len(messages)))
            [folded], _, _ = states.fold("decisions", [group])
            if states is faulty:
                dead += [(first + i, r) for i, r in folded.dead]
        blobs.append(folded.state)
    assert [(i, r.reason) for i, r in dead] == [(500 + 700 * k, "worker_error")
                                                 for k in range(4)]
    assert all("boom" not in r.detail and b"unparsed" in r.payload for _, r in dead)
    counts = faulty.held[0].pipeline.counters()
    assert counts.input["read"] == 3004 and counts.rejected == {"worker_error": 4}
    assert counts.input["valid"] + counts.input["rejected"] == 3004
    assert counts.input["folded"] == 3000 and len(faulty.held[0].pipeline.seen) == 3000
    a, b = faulty.held[0].pipeline.merged(), clean.held[0].pipeline.merged()
    assert a.keys == b.keys and (a.counts[: len(a)] == b.counts[: len(b)]).all()
    assert (a.sums[: len(a)] == b.sums[: len(b)]).all()
    # The batch after the failure folds on from the rolled-back state, and a redelivery
    # of what was folded is skipped, not counted twice.
    assert faulty.fold("decisions", [_group(mixed, 0, 1000)]) == ([], [], 1000)
