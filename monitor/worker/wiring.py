"""Faust pieces the worker's app is built from (`monitor/worker/app.py`): topics of raw
bytes, timers whose failures are logged and retried, and connection credentials."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import faust

from monitor.export.snapshot import Health
from monitor.settings import Settings
from monitor.worker.connection import ssl_context

__all__ = ["cancelled_inside", "credentials", "every", "guarded", "raw_topic", "retrying"]

log = logging.getLogger("ragmon.worker")
T = TypeVar("T")


def every(app: faust.App, seconds: float, step: Callable[[], Awaitable[None] | None], what: str,
          health: Health | None = None, traceback: bool = True) -> None:
    """Run `step` every `seconds` (a Faust timer), through `guarded`."""
    app.timer(interval=seconds, name=f"ragmon: {what}")(guarded(step, what, health, traceback))


def guarded(step: Callable[[], Awaitable[None] | None], what: str, health: Health | None = None,
            traceback: bool = True) -> Callable[[], Awaitable[None]]:
    """`step` whose failure is logged (and counted as a worker error with `health`), so
    that the timer's next round tries again.

    A CancelledError that is not the caller's own cancellation is a failure too: aiokafka
    raises one where a client's metadata update is cancelled under a waiting call (a
    broker gone), and escaping, it ended the timer for good (Faust logs "Terminating
    cancelled task"): stage two never ran again, no snapshot, the scrapes timed out."""
    async def run() -> None:
        try:
            done = step()
            if done is not None:
                await done
        except asyncio.CancelledError as exc:
            if not cancelled_inside():
                raise  # the timer itself is stopping
            if health is not None:
                health.worker_errors += 1
            log.error("%s failed: cancelled inside (%r); the next round tries again", what, exc)
        except Exception as exc:
            if health is not None:
                health.worker_errors += 1
            if traceback:
                log.exception("%s failed", what)
            else:
                log.error("%s: %s", what, exc)

    return run


def raw_topic(app: faust.App, name: str) -> Any:
    """A Faust topic of raw bytes (validation is ours)."""
    return app.topic(name, value_serializer="raw", key_serializer="raw")


def credentials(settings: Settings) -> faust.auth.Credentials | None:
    """The connection settings as Faust takes them (the same TLS context as every client)."""
    context = ssl_context(settings)
    if settings.security_protocol.startswith("SASL"):
        password = settings.sasl_password.get_secret_value() if settings.sasl_password else None
        return faust.SASLCredentials(username=settings.sasl_username, password=password,
                                     ssl_context=context, mechanism=settings.sasl_mechanism)
    if context is not None:
        return faust.SSLCredentials(context)
    return None


async def retrying(attempt: Callable[[], Awaitable[T]], what: str, health: Health) -> T:
    """Retry broker I/O with backoff instead of letting it escape the agent: the batch
    stays unacknowledged meanwhile, so nothing is lost and nothing is acked early."""
    delay = 0.5
    while True:
        try:
            return await attempt()
        except asyncio.CancelledError as exc:
            if not cancelled_inside():
                raise  # the caller is stopping
            health.worker_errors += 1
            log.error("%s failed: cancelled inside (%r); retrying in %.1f s", what, exc, delay)
        except Exception:
            health.worker_errors += 1
            log.exception("%s failed; retrying in %.1f s", what, delay)
        await asyncio.sleep(delay)
        delay = min(2 * delay, 30.0)


def cancelled_inside() -> bool:
    """Whether a CancelledError being handled was raised inside an awaited call rather
    than by a cancellation of the current task (see `guarded`)."""
    task = asyncio.current_task()
    return task is not None and not task.cancelling()
