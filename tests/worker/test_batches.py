"""The batch consumer's own bookkeeping (monitor/worker/batches.py), on the Faust consumer a
worker builds, not started: which offsets Faust may commit after a batch is acknowledged,
and which batches a rebalance or a seek makes stale. Reading from a broker, rebalances
and kill -9 are tests/integration/test_worker_recovery.py's."""

from __future__ import annotations

import asyncio

import pytest
from faust.types import TP

from monitor.settings import load
from monitor.worker.app import build
from monitor.worker.batches import Batch, BatchConsumer

TOPIC = "rag.decisions"


@pytest.fixture(scope="module")
def consumer() -> BatchConsumer:
    # One for the module: a worker starts its states process when it is built.
    worker = build(load())
    consumer = worker.app.consumer
    assert isinstance(consumer, BatchConsumer)
    # What subscribing does on start: the input topics are acknowledged topics.
    asyncio.new_event_loop().run_until_complete(worker.app.topics._update_indices())
    return consumer


def test_a_batch_is_committable_up_to_its_last_offset(consumer: BatchConsumer) -> None:
    tp = TP(TOPIC, 0)
    consumer.acknowledge(tp, list(range(0, 500)))
    assert consumer._new_offset(tp) == 500
    consumer.acknowledge(tp, list(range(500, 800)))
    assert consumer._new_offset(tp) == 800


def test_offsets_without_records_do_not_hold_commits_back(consumer: BatchConsumer) -> None:
    """Compaction or transaction markers leave offsets with no record, inside a batch and
    right after the committed offset: Faust would wait for them for ever."""
    tp = TP(TOPIC, 1)
    consumer._committed_offset[tp] = 3
    consumer.acknowledge(tp, [6, 7, 9])
    assert consumer._new_offset(tp) == 10
    consumer.acknowledge(tp, [10, 12])
    assert consumer._new_offset(tp) == 13


def test_an_offset_acknowledged_twice_counts_once(consumer: BatchConsumer) -> None:
    tp = TP(TOPIC, 2)
    consumer.acknowledge(tp, [0, 1, 2])
    before = consumer._n_acked
    consumer.acknowledge(tp, [1, 2])
    assert consumer._n_acked == before
    assert consumer._new_offset(tp) == 3


def test_labels_topics_are_acknowledged_too(consumer: BatchConsumer) -> None:
    tp = TP(load().topic_labels, 0)
    consumer.acknowledge(tp, [0, 1])
    assert consumer._new_offset(tp) == 2


def test_a_topic_without_acks_is_left_alone(consumer: BatchConsumer) -> None:
    tp = TP("someone-elses-topic", 0)
    consumer.acknowledge(tp, [0, 1])
    assert consumer._new_offset(tp) is None


def test_a_rebalance_makes_fetched_batches_stale(consumer: BatchConsumer) -> None:
    fetched = Batch({TP(TOPIC, 0): []}, consumer.epoch)
    assert consumer.current(fetched)
    consumer.stop_flow()  # what Faust does first when partitions are revoked
    assert not consumer.current(fetched)
    again = Batch({TP(TOPIC, 0): []}, consumer.epoch)
    assert consumer.current(again)


class _Record:
    def __init__(self, offset: int) -> None:
        self.offset = offset


def test_dropped_records_of_partitions_faust_does_not_seek_are_read_again(
        consumer: BatchConsumer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stale batch is dropped and read again from where Faust's seek puts each partition;
    aiokafka's seek_to_committed leaves partitions whose committed offset is none or 0
    where they are, past the dropped records. Those are sought back here (where the
    broker would be asked: the transport's seek is recorded instead)."""
    sought: list[tuple[TP, int]] = []

    async def record(tp: TP, offset: int) -> None:
        sought.append((tp, offset))

    new, fresh, committed, rewound, revoked = (TP(TOPIC, p) for p in range(5))
    monkeypatch.setattr(consumer, "_seek", record)
    monkeypatch.setattr(consumer, "assignment", lambda: {new, fresh, committed, rewound})
    monkeypatch.setattr(consumer, "_committed_seen",
                        {new: None, fresh: 0, committed: 300, rewound: None})
    since = consumer.epoch
    # A rewind after the batch began: its seek stands.
    monkeypatch.setitem(consumer._sought, rewound, (since + 1, 0))
    gathered = {new: [_Record(5), _Record(6)], committed: [_Record(300)]}
    last = {new: [_Record(7)], fresh: [_Record(40)], rewound: [_Record(9)],
            revoked: [_Record(2)]}
    asyncio.new_event_loop().run_until_complete(
        consumer._seek_uncommitted(gathered, last, since=since))
    assert sorted(sought) == [(new, 5), (fresh, 0)]
