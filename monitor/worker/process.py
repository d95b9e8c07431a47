"""The worker process: start checks, then Faust's worker with a bounded stop.

Before Faust starts, the metrics port is bound (a port in use is one line, not a task
failing inside Faust), the input topics' ids are recorded (a later change means a new
log) and offsets the group committed against a log the broker has since lost are reset
(monitor/worker/rewind.py).
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

import faust

from monitor.settings import Settings
from monitor.worker.app import build
from monitor.worker.provision import input_topics, topic_ids
from monitor.worker.rewind import rewind_lost_offsets

__all__ = ["run"]

log = logging.getLogger("ragmon.worker")


class _FaustWorker(faust.Worker):
    """Faust's worker, with a bound on how long a stop may take.

    Faust's own stop waits for agents, the consumer leaving its group and every task; with
    the broker gone or thresholds being simulated in a thread that took 33-55 s. After a
    signal the worker gets `shutdown_seconds` to stop cleanly, then exits anyway: an
    unfinished batch was not acknowledged and its checkpoint not written, so the next
    owner folds it exactly once."""

    shutdown_seconds = 8.0

    def _schedule_shutdown(self, signal: Any) -> None:
        if not self._signal_stop_time:
            timer = threading.Timer(self.shutdown_seconds, _exit_now, args=(signal,))
            timer.daemon = True
            timer.start()
        super()._schedule_shutdown(signal)


def _exit_now(signal: Any) -> None:
    log.warning("stop took longer than shutdown_seconds after %s: exiting now", signal)
    logging.shutdown()
    os._exit(0)


def run(settings: Settings, loglevel: str = "info") -> None:
    """Run a worker until it is stopped (SIGTERM / Ctrl-C)."""
    worker = build(settings)
    worker.pages.start()  # the metrics endpoint, in a process of its own
    log.info("metrics on http://%s:%d/metrics", settings.metrics_host, settings.metrics_port)
    inputs = input_topics(settings)
    worker.topic_ids = topic_ids(settings, inputs)
    for change in rewind_lost_offsets(settings, inputs):
        log.warning("%s", change)
    faust_worker = _FaustWorker(worker.app, loglevel=loglevel)
    faust_worker.shutdown_seconds = settings.shutdown_seconds
    faust_worker.execute_from_commandline()
