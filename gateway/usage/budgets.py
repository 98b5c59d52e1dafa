"""Token budgets a restart must not hand out twice.

Without Redis the ledger lives in the gateway's memory and a restart would start
every ``tokens-per-day`` and ``tokens-per-month`` budget afresh. The usage records
are the durable account of every call, so at start-up the gateway reads what each
queue spent per flavor today and this month (UTC) and charges it to the new ledger
(:meth:`gateway.ledgers.Ledger.restore_budgets`), again after every config reload
(a queue may have gained a budget). Calls whose records were not yet written when
the process died (at most the recorder's flush interval, or its buffer during a
database outage) are not counted; a graceful stop writes every record first.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlmodel.ext.asyncio.session import AsyncSession

from gateway.ledgers import KeySpend, RecentSpend, Spent
from quota.ledger import RATE_WINDOW_SECONDS
from tenants import Database
from tenants.services.usage import key_spend, queue_spend, recent_spend

__all__ = ["SpentBudgets", "spent", "spent_budgets"]


@dataclass(frozen=True)
class SpentBudgets:
    measured_at: float  # seconds since the epoch: the day and month the spend is of
    # (queue, flavor, budget resource) -> tokens
    spent: dict[tuple[str, str, str], int] = field(default_factory=dict)
    # API key (with limits of its own) -> what it spent that day and in the last window
    keys: dict[str, KeySpend] = field(default_factory=dict)

    @property
    def key_days(self) -> dict[str, int]:
        return {key: spend.day for key, spend in self.keys.items()}


async def spent_budgets(session: AsyncSession, now: float | None = None) -> SpentBudgets:
    at = time.time() if now is None else now
    day = datetime.fromtimestamp(at, UTC).date()
    rows = await queue_spend(session, day)
    spent: dict[tuple[str, str, str], int] = {}
    for row in rows:
        spent[(row.queue, row.flavor, "tokens-per-day")] = row.day
        spent[(row.queue, row.flavor, "tokens-per-month")] = row.month
    since = datetime.fromtimestamp(at - RATE_WINDOW_SECONDS, UTC)
    keys = {
        row.key_id: KeySpend(row.day, row.recent, row.last_at.timestamp() if row.last_at else 0.0)
        for row in await key_spend(session, day, since)
    }
    return SpentBudgets(at, spent, keys)


async def spent(database: Database, now: float | None = None) -> Spent:
    """What the usage records say was spent: this day's and month's budgets, and the
    last rate window (for a shared ledger whose Redis lost its state). Calls not yet
    recorded (the recorder's last half second, or a crashed gateway's) are missing."""
    at = time.time() if now is None else now
    async with database.session() as session:
        budgets = await spent_budgets(session, at)
        since = datetime.fromtimestamp(at - RATE_WINDOW_SECONDS, UTC)
        rows = await recent_spend(session, since)
    recent = {
        (row.queue, row.flavor): RecentSpend(row.tokens, row.requests, row.last_at.timestamp())
        for row in rows
    }
    return Spent(at, budgets.spent, recent, budgets.keys)
