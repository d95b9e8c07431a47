"""The stall watchdog's pure parts: which partitions lag, and the worker's own counters
carried through a restart in place (monitor/worker/stall.py)."""

from __future__ import annotations

import json

from monitor.settings import load
from monitor.worker import stall
from monitor.worker.app import CARRIED_HEALTH, build


def test_lagging_partitions_are_those_with_unread_decisions():
    assert stall.lagging({0: 10, 1: 5, 2: 0}, {0: 9, 1: 3}) == [1]


def test_a_restarted_worker_starts_from_the_counters_it_was_handed(monkeypatch):
    handed = {"state_lost": 3, "batches": 7, "batch_seconds": 1.5, "watermark": 99.0,
              "unknown": 1}
    monkeypatch.setenv(stall.CARRIED, json.dumps(handed))
    worker = build(load())
    assert (worker.health.state_lost, worker.health.batches) == (3, 7)
    assert worker.health.batch_seconds == 1.5
    assert worker.health.last_event_timestamp_seconds == 0.0  # read afresh, not carried
    assert "watermark" not in CARRIED_HEALTH and stall.carried() == {}  # read once
    monkeypatch.setenv(stall.CARRIED, "not json")
    assert stall.carried() == {}
