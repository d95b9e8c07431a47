"""The worker's timers and broker retries (monitor/worker/wiring.py `guarded`, `retrying`): a
failing round or attempt is counted and the next one runs; only the caller's own
cancellation stops it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from monitor.export.snapshot import Health
from monitor.worker.wiring import guarded, retrying


async def cancelled_under_the_call() -> None:
    """What aiokafka does when a client's metadata update is cancelled under a waiting
    call: the waiter gets a CancelledError although nobody cancelled its task."""
    update = asyncio.get_running_loop().create_future()
    update.cancel()  # a client closed under the call
    await asyncio.shield(update)


async def broker_away() -> None:
    raise ConnectionError("broker away")


def cancel_while_waiting(start: Callable[[Callable[[], Awaitable[None]]], Awaitable[None]]) -> None:
    """Run `start` on a step that waits, cancel its task, and wait for it to end."""
    async def step() -> None:
        await asyncio.sleep(60)

    async def scenario() -> None:
        task = asyncio.ensure_future(start(step))
        await asyncio.sleep(0.01)
        task.cancel()
        await task

    asyncio.run(scenario())


@pytest.mark.parametrize("failure", [broker_away, cancelled_under_the_call])
def test_a_failing_round_is_counted_and_the_next_one_runs(failure) -> None:
    health = Health()
    rounds: list[int] = []

    async def step() -> None:
        rounds.append(len(rounds))
        await failure()

    async def timer() -> None:
        run = guarded(step, "merging partitions", health)
        for _ in range(3):
            await run()

    asyncio.run(timer())
    assert rounds == [0, 1, 2]
    assert health.worker_errors == 3


def test_the_timer_own_cancellation_still_stops_it() -> None:
    with pytest.raises(asyncio.CancelledError):
        cancel_while_waiting(lambda step: guarded(step, "a step", Health())())


def test_a_cancellation_from_inside_an_attempt_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    health = Health()
    attempts: list[int] = []
    real_sleep = asyncio.sleep
    monkeypatch.setattr(asyncio, "sleep", lambda _: real_sleep(0))  # no backoff here

    async def send() -> str:
        attempts.append(len(attempts))
        if len(attempts) < 3:
            await cancelled_under_the_call()
        return "delivered"

    assert asyncio.run(retrying(send, "checkpoint", health)) == "delivered"
    assert attempts == [0, 1, 2]
    assert health.worker_errors == 2


def test_the_callers_own_cancellation_stops_the_retries() -> None:
    with pytest.raises(asyncio.CancelledError):
        cancel_while_waiting(lambda step: retrying(step, "checkpoint", Health()))
