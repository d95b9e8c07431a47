"""The worker's stall watchdog: decisions waiting in owned partitions, no batch for long.

Two workers, one killed: the survivor takes the dead one's partitions over, and in some
runs (about half, on the embedded broker) its Faust agent then receives no further
events although the partitions hold unread decisions: the consumer's fetch and every
agent sit idle, no error is raised (task dumps show only idle waits; the cause looks
like the interplay of Faust's take_events buffer with an eager rebalance, not found
yet; the worker now reads whole fetches below Faust's stream, monitor/worker/batches.py).
A fresh process never showed it. So the watchdog treats "decisions are waiting
in partitions this worker owns, and no batch completed for `stall_seconds`" as a stall
and restarts the worker in place (same PID, same arguments): the checkpoints make a
restart exact, as after kill -9.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Mapping
from typing import Final

__all__ = ["CARRIED", "carried", "lagging", "restart_in_place"]

# The environment variable a restart in place hands the worker's own counters on in
# (JSON): so that they do not go back to zero (a restart after the broker lost its log
# would otherwise lose its `state_lost` count).
CARRIED: Final = "RAGMON_CARRIED_COUNTERS"

log = logging.getLogger(__name__)


def lagging(ends: Mapping[int, int], applied: Mapping[int, int]) -> list[int]:
    """Owned partitions whose end offset is past the last offset applied (-1: none)."""
    return sorted(p for p, end in ends.items() if end - 1 > applied.get(p, -1))


def restart_in_place(counters: Mapping[str, float]) -> None:
    """Replace this process with a fresh worker: same executable, arguments and PID, and
    `counters` (the worker's own) carried on (`carried`)."""
    logging.shutdown()
    env = {**os.environ, CARRIED: json.dumps(dict(counters))}
    os.execve(sys.executable, [sys.executable, "-m", "monitor.cli", *sys.argv[1:]], env)


def carried() -> dict[str, float]:
    """The counters a restart in place handed on (empty for a fresh start); read once."""
    text = os.environ.pop(CARRIED, "")
    try:
        found = json.loads(text) if text else {}
    except ValueError:
        return {}
    return {k: v for k, v in found.items() if isinstance(v, int | float)} \
        if isinstance(found, dict) else {}
