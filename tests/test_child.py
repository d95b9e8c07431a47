"""Partition states: restore, fold with redelivery, and the child process that serves them."""

from __future__ import annotations

import multiprocessing
import pickle
import socket

from conftest import assert_same

from monitor.aggregate.pipeline import Pipeline
from monitor.offline.replay import build
from monitor.settings import load as load_settings
from monitor.simulate import Simulator
from monitor.worker.child import (
    FoldGroups,
    Group,
    Request,
    Restore,
    States,
    pack_message,
    read_message,
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
        for part in pack_message(request):
            ours.sendall(part)
        reply = read_message(ours)
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
