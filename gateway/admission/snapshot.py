"""The admission state as of one moment, and the engine built from it.

The admission loop, the start-time forecast and the estimate endpoint all decide on
the same picture: the quota configuration, which queues each tenant may use, every
pending and quota-holding workload, and what each queue was charged of its GPU-hour
budgets this period (from the chargeback ledger, so a restart forgets nothing).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction

from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from quota import QuotaConfig, QuotaEngine, WorkloadError
from quota.budgets import is_budget
from quota.model import Admission, Workload
from quota.periods import period_end, period_start
from tenants import Database
from tenants.models import WorkloadRow
from tenants.services import HOLDING_STATES, load_quota_config
from tenants.services.tenants import open_queues
from tenants.services.workloads import admission_from_row, workload_from_row

__all__ = ["CHUNK", "ChargedLoader", "Snapshot", "aware", "read_snapshot"]

CHUNK = 200
"""Rows read, or added to an engine, between two turns of the event loop: with a
hundred thousand live workloads a pass is seconds of work, and requests are served
between its slices (each a few tens of milliseconds) instead of after all of it."""

# (session, period start, period end) -> (queue, flavor, budget resource) -> hours
ChargedLoader = Callable[
    [AsyncSession, datetime, datetime], Awaitable[Mapping[tuple[str, str, str], Decimal]]
]


def aware(moment: datetime) -> datetime:
    """SQLite hands back naive datetimes; every stored time is UTC."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


@dataclass
class Snapshot:
    config: QuotaConfig
    opened: dict[str, frozenset[str]]
    rows: Sequence[WorkloadRow]
    now: datetime
    charged: Mapping[tuple[str, str, str], Decimal] = field(default_factory=dict)
    # id -> the engine's view of the row, parsed once however many engines are built
    # from this snapshot (a preview builds two); shared by its dataclasses.replace copies.
    parsed: dict[str, tuple[Workload, Admission | None]] = field(default_factory=dict)
    # The ids holding quota in the last engine built from it (with its ``skip``).
    held: frozenset[str] | None = None

    @property
    def by_id(self) -> dict[str, WorkloadRow]:
        return {row.id: row for row in self.rows}

    def closed(self) -> list[WorkloadRow]:
        """Pending workloads whose queue is no longer their tenant's: never admitted."""
        return [
            r
            for r in self.rows
            if r.state == "pending" and r.queue not in self.opened.get(r.tenant, ())
        ]

    def engine(
        self, *, clock: Callable[[], float] = time.time, skip: frozenset[str] = frozenset()
    ) -> tuple[QuotaEngine, set[str]]:
        """A fresh engine holding this picture (but the rows in ``skip``); returns it
        and the ids of the workloads that hold quota."""
        engine = self._empty(clock)
        holding: set[str] = set()
        self._add(engine, self.rows, skip, holding)
        self.held = frozenset(holding)
        return engine, holding

    async def build_engine(
        self, *, clock: Callable[[], float] = time.time, skip: frozenset[str] = frozenset()
    ) -> tuple[QuotaEngine, set[str]]:
        """:meth:`engine`, yielding to the event loop every :data:`CHUNK` rows."""
        engine = self._empty(clock)
        holding: set[str] = set()
        for start in range(0, len(self.rows), CHUNK):
            self._add(engine, self.rows[start : start + CHUNK], skip, holding)
            await asyncio.sleep(0)
        self.held = frozenset(holding)
        return engine, holding

    def _parse(self, row: WorkloadRow, *, admitted: bool) -> tuple[Workload, Admission | None]:
        known = self.parsed.get(row.id)
        if known is None:
            admission = admission_from_row(row) if admitted else None
            known = self.parsed[row.id] = (workload_from_row(row), admission)
        return known

    def _empty(self, clock: Callable[[], float]) -> QuotaEngine:
        engine = QuotaEngine(self.config, clock=clock, now=self.now)
        for (queue, flavor, resource), hours in self.charged.items():
            if is_budget(resource) and queue in engine.state.queues:
                engine.charge(queue, flavor, resource, Fraction(hours))
        return engine

    def _add(
        self,
        engine: QuotaEngine,
        rows: Sequence[WorkloadRow],
        skip: frozenset[str],
        holding: set[str],
    ) -> None:
        for row in rows:
            if row.id in skip:
                continue
            try:
                if row.state in HOLDING_STATES and row.admission is not None:
                    began = aware(row.admitted_at or row.created_at)
                    workload, admission = self._parse(row, admitted=True)
                    assert admission is not None
                    engine.add_admitted(
                        workload, admission, admitted_at=began.timestamp(), started=began
                    )
                    holding.add(row.id)
                elif row.state == "pending" and not row.cancel_requested:
                    engine.add(self._parse(row, admitted=False)[0])
            except WorkloadError:
                continue  # its queue was removed; it waits, unexplained, until it returns


async def read_snapshot(
    database: Database, *, now: datetime | None = None, charged: ChargedLoader | None = None
) -> Snapshot:
    """Read as of one moment (a config change committing meanwhile is wholly seen or
    not at all)."""
    moment = now or datetime.now(UTC)
    async with database.snapshot() as session:
        config = await load_quota_config(session)
        opened = await open_queues(session)
        rows = await _live_rows(session)
        spent: Mapping[tuple[str, str, str], Decimal] = {}
        if charged is not None:
            period = config.budget_period
            spent = await charged(session, period_start(period, moment), period_end(period, moment))
    return Snapshot(config, opened, rows, moment, spent)


async def _live_rows(session: AsyncSession) -> list[WorkloadRow]:
    """Every pending and quota-holding row, :data:`CHUNK` at a time by id (all in the
    session's one transaction), the event loop's turn between chunks."""
    rows: list[WorkloadRow] = []
    after: str | None = None
    live = col(WorkloadRow.state).in_(("pending", *HOLDING_STATES))
    while True:
        statement = select(WorkloadRow).where(live).order_by(col(WorkloadRow.id)).limit(CHUNK)
        if after is not None:
            statement = statement.where(col(WorkloadRow.id) > after)
        chunk = (await session.exec(statement)).all()
        rows.extend(chunk)
        if len(chunk) < CHUNK:
            return rows
        after = chunk[-1].id
        await asyncio.sleep(0)
