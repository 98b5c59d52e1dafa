"""Rounds: background work stopped between rounds, not in the middle of one."""

from __future__ import annotations

import asyncio
import logging

import pytest

from gateway.background import Rounds


class Counted:
    """A round that only counts itself."""

    def __init__(self) -> None:
        self.count = 0

    async def __call__(self) -> None:
        self.count += 1

    async def reach(self, count: int) -> None:
        """Wait (5 s at most) until ``count`` rounds have run."""

        async def poll() -> None:
            while self.count < count:
                await asyncio.sleep(0.01)

        await asyncio.wait_for(poll(), timeout=5)


async def test_rounds_repeat_every_interval_until_stopped() -> None:
    counted = Counted()
    rounds = Rounds(counted, interval=0.01, name="test")
    rounds.start()
    await counted.reach(3)
    await rounds.stop()
    stopped_at = counted.count
    await asyncio.sleep(0.05)
    assert counted.count == stopped_at  # no round after stop


async def test_stop_lets_the_round_in_progress_finish() -> None:
    started, finished = asyncio.Event(), asyncio.Event()

    async def one_round() -> None:
        started.set()
        await asyncio.sleep(0.05)  # e.g. a transaction on its way to commit
        finished.set()

    rounds = Rounds(one_round, interval=60, name="test")
    rounds.start()
    await started.wait()
    await rounds.stop()
    assert finished.is_set()


async def test_stop_does_not_wait_out_the_interval() -> None:
    rounds = Rounds(lambda: asyncio.sleep(0), interval=3600, name="test")
    rounds.start()
    await asyncio.sleep(0.01)  # the first round is done; the rounds wait for the next
    await asyncio.wait_for(rounds.stop(), timeout=1)


async def test_a_round_that_outlasts_the_grace_is_cancelled(
    caplog: pytest.LogCaptureFixture,
) -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def one_round() -> None:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    rounds = Rounds(one_round, interval=1, name="stuck", grace=0.05)
    rounds.start()
    await started.wait()
    with caplog.at_level(logging.WARNING, logger="gateway.background"):
        await asyncio.wait_for(rounds.stop(), timeout=1)
    assert cancelled.is_set()
    assert "stuck: a round took over 0.05 s to end; cancelled" in caplog.text


async def test_an_error_that_escapes_a_round_ends_the_rounds_and_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    count = 0

    async def one_round() -> None:
        nonlocal count
        count += 1
        raise RuntimeError("broken round")

    rounds = Rounds(one_round, interval=0.01, name="fragile")
    with caplog.at_level(logging.ERROR, logger="gateway.background"):
        rounds.start()
        await asyncio.sleep(0.1)
        await rounds.stop()
    assert count == 1
    assert "fragile ended" in caplog.text and "broken round" in caplog.text


async def test_rounds_can_start_again_after_a_stop() -> None:
    counted = Counted()
    rounds = Rounds(counted, interval=0.01, name="test")
    rounds.start()
    await rounds.stop()
    first = counted.count
    rounds.start()
    await counted.reach(first + 2)
    await rounds.stop()
