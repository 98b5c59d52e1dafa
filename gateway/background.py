"""Background work done in rounds, stopped between rounds rather than in the middle
of one."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

__all__ = ["Rounds"]

log = logging.getLogger(__name__)


class Rounds:
    """Runs ``one_round`` now and then every ``interval`` seconds in a task, until
    :meth:`stop`.

    A round that holds a database session and is cancelled may leave its pooled
    connection to the garbage collector, so :meth:`stop` lets the round in progress
    finish and cancels it only after ``grace`` seconds. A round handles its own errors:
    one that escapes ends the rounds, and is logged then.

    Usage::

        rounds = Rounds(check_config, interval=1.0, name="ignara-config-watch")
        rounds.start()
        ...
        await rounds.stop()
    """

    def __init__(
        self,
        one_round: Callable[[], Awaitable[object]],
        *,
        interval: float,
        name: str,
        grace: float = 5.0,
    ) -> None:
        self._one_round = one_round
        self._interval = interval
        self._name = name
        self._grace = grace
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._stopping = asyncio.Event()  # an Event keeps to the loop it first waits on
            self._task = asyncio.create_task(self._run(), name=self._name)
            self._task.add_done_callback(self._report)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        self._stopping.set()
        done, _ = await asyncio.wait({task}, timeout=self._grace)
        if not done:
            log.warning("%s: a round took over %s s to end; cancelled", self._name, self._grace)
            task.cancel()
            await asyncio.wait({task})

    def _report(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and (err := task.exception()) is not None:
            log.error("%s ended", self._name, exc_info=err)

    async def _run(self) -> None:
        while not self._stopping.is_set():
            await self._one_round()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self._interval)
