"""Keeps every pending workload's ``estimated_start`` fresh: the leader plays the
engine forward (quota/forecast.py) at most every few seconds, never on a request's
path, and writes each start that moved."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime, timedelta
from multiprocessing import get_context

from sqlalchemy import update
from sqlmodel import col

from gateway.admission.snapshot import ChargedLoader, aware, read_snapshot
from quota.forecast import forecast
from tenants import Database
from tenants.models import WorkloadRow

__all__ = ["ForecastPass"]

# A start that moved less than this is not rewritten (the forecast's own jitter).
_SETTLED = timedelta(seconds=30)
# How often the forecast's process checks that the gateway that started it still runs.
_PARENT_CHECK_SECONDS = 1.0


class ForecastPass:
    def __init__(
        self,
        database: Database,
        *,
        interval: float = 5.0,
        charged: ChargedLoader | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        separate: bool = False,
    ) -> None:
        self.database = database
        # In a process of its own (``separate``); the charged loader is then sent to
        # it, so it must be a module's function.
        self.separate = separate
        self._executor: ProcessPoolExecutor | None = None
        self.interval = interval
        self.charged = charged
        self._monotonic = monotonic
        self._last: float | None = None

    def due(self) -> bool:
        return self._last is None or self._monotonic() - self._last >= self.interval

    async def run(self) -> dict[str, datetime | None]:
        """One forecast; returns the start written (or kept) per pending workload."""
        self._last = self._monotonic()
        if self.separate:
            # Seconds of CPU with twenty thousand pending: in a thread it holds the
            # GIL against the event loop, which then answers requests in seconds. In a
            # process of its own (reading and writing the database itself) it does not.
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(
                self._pool(), _forecast_elsewhere, self.database.url, self.charged
            )
        return await self.run_here()

    def _pool(self) -> ProcessPoolExecutor:
        if self._executor is None:
            # spawn: a fork of a process with an event loop and threads is not safe.
            self._executor = ProcessPoolExecutor(
                1,
                mp_context=get_context("spawn"),
                initializer=exit_with_parent,
                initargs=(os.getpid(), _PARENT_CHECK_SECONDS),
            )
        return self._executor

    def close(self) -> None:
        """End the forecast's process, if it has one."""
        if self._executor is not None:
            executor, self._executor = self._executor, None
            executor.shutdown(wait=False, cancel_futures=True)

    async def run_here(self) -> dict[str, datetime | None]:
        """:meth:`run` in this process (the engine's forecast in a thread)."""
        snapshot = await read_snapshot(self.database, charged=self.charged)
        closed = frozenset(r.id for r in snapshot.closed())
        engine, _ = await snapshot.build_engine(skip=closed)
        if not any(True for _ in engine.pending()):
            return {}
        # Seconds of CPU with a thousand pending: off the event loop, which keeps
        # answering requests meanwhile.
        starts = (await asyncio.to_thread(forecast, engine)).starts
        by_id = snapshot.by_id
        async with self.database.session() as session:
            for name, start in starts.items():
                row = by_id[name]
                if _unmoved(row.estimated_start, start):
                    continue
                await session.exec(
                    update(WorkloadRow)
                    .where(col(WorkloadRow.id) == name, col(WorkloadRow.state) == "pending")
                    .values(estimated_start=start, estimated_at=snapshot.now)
                )
        return starts


def exit_with_parent(parent: int, every: float) -> None:
    """Run in the pool's process as it starts: end it once the gateway that started it
    is gone. A gateway killed outright (SIGKILL, the OOM killer) never shuts its pool
    down, and its forecast process would otherwise live on as an orphan, one more per
    crash, still able to write estimates for a leader that no longer is one."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every)
        os._exit(0)  # nothing of the dead gateway's to finish or flush

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _forecast_elsewhere(url: str, charged: ChargedLoader | None) -> dict[str, datetime | None]:
    """A forecast in the process this runs in (the pool's), on its own connections."""

    async def run() -> dict[str, datetime | None]:
        database = Database(url)
        try:
            return await ForecastPass(database, charged=charged).run_here()
        finally:
            await database.dispose()

    return asyncio.run(run())


def _unmoved(before: datetime | None, after: datetime | None) -> bool:
    if before is None or after is None:
        return before is after
    return abs(aware(before) - after) < _SETTLED
