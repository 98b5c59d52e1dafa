"""Budgets spent before a restart, read back from the usage records (both databases)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from gateway.usage import UsageRecord
from gateway.usage.budgets import spent_budgets
from tenants import Database
from tenants.services.usage import insert_usage

NOW = datetime(2026, 11, 22, 12, tzinfo=UTC)
TPD, TPMONTH = "tokens-per-day", "tokens-per-month"


def record(queue: str, flavor: str, at: datetime, prompt: int, completion: int) -> UsageRecord:
    return UsageRecord(
        tenant="alpha",
        principal="bot",
        queue=queue,
        model="m",
        flavor=flavor,
        status=200,
        prompt_tokens=prompt,
        completion_tokens=completion,
        created_at=at,
    )


async def test_spend_is_summed_per_queue_and_flavor_for_the_day_and_the_month(
    database: Database,
) -> None:
    today = record("q", "pool", NOW.replace(hour=1), 100, 10)
    records = [
        today,
        replace(today, created_at=NOW.replace(hour=23, minute=59), completion_tokens=0),
        replace(today, created_at=NOW - timedelta(days=3)),  # this month, not today
        replace(today, created_at=NOW.replace(day=1, hour=0)),  # the month's first moment
        replace(today, created_at=NOW.replace(month=10, day=31, hour=23)),  # last month
        replace(today, created_at=NOW + timedelta(days=1)),  # tomorrow: not yet spent
        replace(today, flavor="other"),
        replace(today, queue="r", status=502, prompt_tokens=0, completion_tokens=0),
    ]
    async with database.session() as session:
        await insert_usage(session, records)
    async with database.session() as session:
        spent = await spent_budgets(session, NOW.timestamp())
    assert spent.measured_at == NOW.timestamp()
    assert spent.spent == {
        ("q", "pool", TPD): 110 + 100,
        ("q", "pool", TPMONTH): 110 + 100 + 110 + 110,
        ("q", "other", TPD): 110,
        ("q", "other", TPMONTH): 110,
        ("r", "pool", TPD): 0,
        ("r", "pool", TPMONTH): 0,
    }
