"""Work the worker's event loop awaits in a daemon thread of its own (threshold
calibration: seconds to minutes of simulation that must not hold up the fold, the
consumer's heartbeats or the worker's exit)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from contextlib import suppress

__all__ = ["in_daemon_thread"]


def in_daemon_thread(work: Callable[[], None]) -> asyncio.Future[None]:
    """Run `work` in a daemon thread: a calibration (minutes of simulation at worst) never
    holds up the worker's exit, as asyncio.to_thread's pool threads would (the
    interpreter joins those); a threshold not yet calibrated is calibrated on restart."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def settle(error: BaseException | None) -> None:
        if done.done():
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(None)

    def run() -> None:
        error: BaseException | None = None
        try:
            work()
        except BaseException as exc:  # handed to the awaiting task
            error = exc
        with suppress(RuntimeError):  # the loop closed meanwhile: the worker is stopping
            loop.call_soon_threadsafe(settle, error)

    threading.Thread(target=run, name="ragmon-calibration", daemon=True).start()
    return done

