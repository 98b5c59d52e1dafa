"""Keeps every pending workload's ``estimated_start`` fresh: the leader plays the
engine forward (quota/forecast.py) at most every few seconds, never on a request's
path, and writes each start that moved."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from sqlalchemy import update
from sqlmodel import col

from gateway.admission.snapshot import ChargedLoader, aware, read_snapshot
from quota.forecast import forecast
from tenants import Database
from tenants.models import WorkloadRow

__all__ = ["ForecastPass"]

# A start that moved less than this is not rewritten (the forecast's own jitter).
_SETTLED = timedelta(seconds=30)


class ForecastPass:
    def __init__(
        self,
        database: Database,
        *,
        interval: float = 5.0,
        charged: ChargedLoader | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.database = database
        self.interval = interval
        self.charged = charged
        self._monotonic = monotonic
        self._last: float | None = None

    def due(self) -> bool:
        return self._last is None or self._monotonic() - self._last >= self.interval

    async def run(self) -> dict[str, datetime | None]:
        """One forecast; returns the start written (or kept) per pending workload."""
        self._last = self._monotonic()
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


def _unmoved(before: datetime | None, after: datetime | None) -> bool:
    if before is None or after is None:
        return before is after
    return abs(aware(before) - after) < _SETTLED
