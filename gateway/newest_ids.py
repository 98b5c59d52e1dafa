"""The newest workload event and audit ids, shared by every event stream of a process.

An open stream (``GET /api/v1/admin/events``, the console's live updates) used to read
both tables twice a second for as long as it lasted, whether anything had happened or
not: a load each caller chose, times the streams open. A stream now reads rows only
when these ids have passed its own, and they are read once per interval for all of a
process's streams (single flight: a stream that asks while a read is under way waits
for it). An idle stream then costs the database nothing of its own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from sqlalchemy import func
from sqlmodel import select
from sqlmodel.ext.asyncio.session import AsyncSession

from tenants import Database
from tenants.models import AuditEntry, WorkloadEventRow

__all__ = ["POLL_SECONDS", "NewestIds", "newest_ids"]

POLL_SECONDS = 0.5  # how often an event stream looks for new rows


async def newest_ids(session: AsyncSession) -> tuple[int, int]:
    """The newest workload event id and audit id (0 for an empty table)."""
    events = (await session.exec(select(func.max(WorkloadEventRow.id)))).one()
    audit = (await session.exec(select(func.max(AuditEntry.id)))).one()
    return int(events or 0), int(audit or 0)


class NewestIds:
    """:func:`newest_ids`, read at most once per ``interval`` however many ask."""

    def __init__(
        self,
        database: Database,
        interval: float = POLL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._database = database
        self._interval = interval
        self._clock = clock
        self._lock = asyncio.Lock()
        self._ids = (0, 0)
        self._read_at: float | None = None
        self.reads = 0  # for tests and the curious

    async def read(self) -> tuple[int, int]:
        async with self._lock:
            asked = self._clock()
            if self._read_at is None or asked - self._read_at >= self._interval:
                async with self._database.session() as session:
                    self._ids = await newest_ids(session)
                # From when it was asked: a row committed during the read may be missed,
                # and the next read (an interval on) sees it.
                self._read_at = asked
                self.reads += 1
            return self._ids
