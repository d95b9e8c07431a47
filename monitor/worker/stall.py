"""The worker's stall watchdog: decisions waiting in owned partitions, no batch for long.

Two workers, one killed: the survivor takes the dead one's partitions over, and in some
runs (about half, on the embedded broker) its Faust agent then receives no further
events although the partitions hold unread decisions: the consumer's fetch and every
agent sit idle, no error is raised (task dumps show only idle waits; the cause looks
like the interplay of Faust's take_events buffer with an eager rebalance, not found
yet; since session 8 the agents gather their own batches instead). A fresh process
never showed it. So the watchdog treats "decisions are waiting
in partitions this worker owns, and no batch completed for `stall_seconds`" as a stall
and restarts the worker in place (same PID, same arguments): the checkpoints make a
restart exact, as after kill -9.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping

__all__ = ["lagging", "restart_in_place"]

log = logging.getLogger(__name__)


def lagging(ends: Mapping[int, int], applied: Mapping[int, int]) -> list[int]:
    """Owned partitions whose end offset is past the last offset applied (-1: none)."""
    return sorted(p for p, end in ends.items() if end - 1 > applied.get(p, -1))


def restart_in_place() -> None:
    """Replace this process with a fresh worker: same executable, arguments and PID."""
    logging.shutdown()
    os.execv(sys.executable, [sys.executable, "-m", "monitor.cli", *sys.argv[1:]])
