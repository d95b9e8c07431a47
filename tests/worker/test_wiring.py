"""The worker's timers and broker retries (monitor/worker/wiring.py `guarded`, `retrying`): a
failing round or attempt is counted and the next one runs; only the caller's own
cancellation stops it."""

from __future__ import annotations

import asyncio

import pytest

from monitor.export.snapshot import Health
from monitor.worker.wiring import guarded, retrying


def test_a_failing_round_is_counted_and_the_next_one_runs() -> None:
    health = Health()
    rounds: list[int] = []

    async def step() -> None:
        rounds.append(len(rounds))
        raise ConnectionError("broker away")

    async def timer() -> None:
        run = guarded(step, "a step", health)
        for _ in range(3):
            await run()

    asyncio.run(timer())
    assert rounds == [0, 1, 2]
    assert health.worker_errors == 3


def test_a_cancellation_from_inside_a_round_does_not_end_the_timer() -> None:
    """What aiokafka does when a client's metadata update is cancelled under a waiting
    call: the waiter gets a CancelledError although nobody cancelled its task."""
    health = Health()
    rounds: list[int] = []

    async def step() -> None:
        rounds.append(len(rounds))
        update = asyncio.get_running_loop().create_future()
        update.cancel()  # a client closed under the call
        await asyncio.shield(update)

    async def timer() -> None:
        run = guarded(step, "merging partitions", health)
        for _ in range(3):
            await run()

    asyncio.run(timer())
    assert rounds == [0, 1, 2]
    assert health.worker_errors == 3


def test_the_timer_own_cancellation_still_stops_it() -> None:
    async def step() -> None:
        await asyncio.sleep(60)

    async def scenario() -> None:
        task = asyncio.ensure_future(guarded(step, "a step", Health())())
        await asyncio.sleep(0.01)
        task.cancel()
        await task

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(scenario())


def test_a_cancellation_from_inside_an_attempt_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    health = Health()
    attempts: list[int] = []
    real_sleep = asyncio.sleep
    monkeypatch.setattr(asyncio, "sleep", lambda _: real_sleep(0))  # no backoff here

    async def send() -> str:
        attempts.append(len(attempts))
        if len(attempts) < 3:
            update = asyncio.get_running_loop().create_future()
            update.cancel()  # a client closed under the call
            await asyncio.shield(update)
        return "delivered"

    assert asyncio.run(retrying(send, "checkpoint", health)) == "delivered"
    assert attempts == [0, 1, 2]
    assert health.worker_errors == 2


def test_the_callers_own_cancellation_stops_the_retries() -> None:
    async def send() -> None:
        await asyncio.sleep(60)

    async def scenario() -> None:
        task = asyncio.ensure_future(retrying(send, "checkpoint", Health()))
        await asyncio.sleep(0.01)
        task.cancel()
        await task

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(scenario())
