"""Usage records in SQL: one INSERT per batch, and per-tenant daily totals per model
grouped by the database, on SQLite and PostgreSQL alike."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any

from sqlalchemy import event, func
from sqlmodel import col, select

from tenants import Database
from tenants.models import UsageRecordRow
from tenants.services.usage import UsageDay, UsageRecord, insert_usage, usage_summary

DAY = date(2026, 11, 22)


def at(day: date, hour: int = 12, minute: int = 0, second: int = 0) -> datetime:
    return datetime(day.year, day.month, day.day, hour, minute, second, tzinfo=UTC)


def usage(
    tenant: str = "alpha",
    model: str = "llama-3-8b",
    *,
    created_at: datetime | None = None,
    status: int = 200,
    prompt: int = 10,
    completion: int = 5,
    **extra: Any,
) -> UsageRecord:
    return UsageRecord(
        tenant=tenant,
        principal=f"{tenant}-bot",
        queue=f"{tenant}-q",
        model=model,
        flavor="llama-pool",
        status=status,
        prompt_tokens=prompt,
        completion_tokens=completion,
        latency_ms=120,
        created_at=created_at or at(DAY),
        **extra,
    )


@contextmanager
def count_inserts(database: Database) -> Iterator[list[str]]:
    """The INSERT statements into usage_records run meanwhile."""
    seen: list[str] = []

    def before(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().upper().startswith("INSERT INTO USAGE_RECORDS"):
            seen.append(statement)

    engine = database.engine.sync_engine
    event.listen(engine, "before_cursor_execute", before)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", before)


async def summary(
    database: Database, tenant: str, start: date = DAY, end: date = DAY, model: str | None = None
) -> list[UsageDay]:
    async with database.session() as session:
        return await usage_summary(session, tenant, start=start, end=end, model=model)


async def test_a_batch_is_one_insert_and_every_field_is_kept(database: Database) -> None:
    records = [usage(api_key_id=f"key{i}", endpoint="http://10.0.0.5:8000/v1") for i in range(300)]
    records.append(usage(api_key_id=None, streamed=True, status=429))  # an OIDC caller
    with count_inserts(database) as inserts:
        async with database.session() as session:
            await insert_usage(session, records)
    assert len(inserts) == 1
    async with database.session() as session:
        rows = (await session.exec(select(UsageRecordRow).order_by(col(UsageRecordRow.id)))).all()
    assert len(rows) == 301
    first, last = rows[0], rows[-1]
    assert (first.tenant, first.api_key_id, first.principal, first.queue) == (
        "alpha",
        "key0",
        "alpha-bot",
        "alpha-q",
    )
    assert (first.model, first.flavor, first.endpoint) == (
        "llama-3-8b",
        "llama-pool",
        "http://10.0.0.5:8000/v1",
    )
    assert (first.prompt_tokens, first.completion_tokens, first.latency_ms) == (10, 5, 120)
    assert (first.status, first.streamed, first.created_at, first.day) == (200, False, at(DAY), DAY)
    assert (last.api_key_id, last.endpoint, last.streamed, last.status) == (None, None, True, 429)


async def test_a_huge_batch_is_one_executemany_of_one_statement(database: Database) -> None:
    with count_inserts(database) as inserts:
        async with database.session() as session:
            await insert_usage(session, [usage() for _ in range(5000)])
            await insert_usage(session, [])  # nothing to do: no statement
    # One cached single-row INSERT, executed for many rows: no bind-parameter limit
    # to split around, nothing to compile per batch.
    assert len(inserts) == 1 and inserts[0].count("?") + inserts[0].count("$") <= 28
    async with database.session() as session:
        count = (await session.exec(select(func.count()).select_from(UsageRecordRow))).one()
    assert count == 5000


async def test_bad_values_are_made_to_fit_rather_than_failing_the_batch(
    database: Database,
) -> None:
    odd = usage(
        model="m" * 300,
        endpoint="http://" + "h" * 600,
        prompt=-3,
        completion=2**40,
        created_at=datetime(2026, 11, 22, 23, 30),  # naive: taken as UTC
    )
    async with database.session() as session:
        await insert_usage(session, [odd, usage()])
    async with database.session() as session:
        rows = (await session.exec(select(UsageRecordRow).order_by(col(UsageRecordRow.id)))).all()
    assert len(rows) == 2
    assert (len(rows[0].model), len(rows[0].endpoint or "")) == (128, 500)
    assert (rows[0].prompt_tokens, rows[0].completion_tokens) == (0, 2**31 - 1)
    assert (rows[0].created_at, rows[0].day) == (at(DAY, 23, 30), DAY)


async def test_summary_groups_by_utc_day_and_model(database: Database) -> None:
    before = DAY - timedelta(days=1)
    records = [
        usage(created_at=at(before, 23, 59, 59)),  # the last second of the day before
        usage(created_at=at(DAY, 0, 0, 0)),  # the first second of the day
        usage(created_at=at(DAY, 23, 59, 59), status=500, prompt=7, completion=0),
        # 01:30 at UTC+2 is 23:30 UTC the day before: days are UTC days.
        usage(created_at=datetime(2026, 11, 22, 1, 30, tzinfo=timezone(timedelta(hours=2)))),
        usage(model="mistral-7b", status=404, prompt=1, completion=1),
        usage(model="mistral-7b", prompt=100, completion=50),
        usage(created_at=at(DAY + timedelta(days=1), 0, 0, 0)),  # after the period
    ]
    async with database.session() as session:
        await insert_usage(session, records)
    days = await summary(database, "alpha", start=before, end=DAY)
    assert days == [
        UsageDay(before, "llama-3-8b", 2, 0, 20, 10, 30),
        UsageDay(DAY, "llama-3-8b", 2, 1, 17, 5, 22),
        UsageDay(DAY, "mistral-7b", 2, 1, 101, 51, 152),
    ]
    assert await summary(database, "alpha", start=DAY, end=DAY, model="mistral-7b") == days[2:]
    assert await summary(database, "alpha", model="no-such-model") == []
    later = DAY + timedelta(days=1)
    assert await summary(database, "alpha", start=later, end=later) == [
        UsageDay(later, "llama-3-8b", 1, 0, 10, 5, 15)
    ]


async def test_a_tenant_never_sees_another_tenants_usage(database: Database) -> None:
    async with database.session() as session:
        await insert_usage(session, [usage("alpha"), usage("alpha"), usage("beta", prompt=99)])
    assert await summary(database, "alpha") == [UsageDay(DAY, "llama-3-8b", 2, 0, 20, 10, 30)]
    assert await summary(database, "beta") == [UsageDay(DAY, "llama-3-8b", 1, 0, 99, 5, 104)]
    assert await summary(database, "gamma") == []


async def test_each_calls_tokens_are_charged_to_the_ledger_once(database: Database) -> None:
    """input-tokens and output-tokens apart (priced apart), on the call's UTC day, with
    the queue's cohort chain; none for a count of zero; a call recorded twice (a
    reclaiming gateway and the call's own late write) is charged once."""
    from decimal import Decimal

    from tenants import parse_config
    from tenants.models import ChargeRow
    from tenants.services import apply_config

    pool = {"tokens-per-minute": {"nominal": 1000}}
    config = {
        "flavors": ["llama-pool"],
        "cohorts": [{"name": "org"}, {"name": "lab", "parent": "org"}],
        "cluster_queues": [
            {
                "name": "alpha-q",
                "cohort": "lab",
                "resource_groups": [
                    {
                        "resources": ["tokens-per-minute"],
                        "flavors": [{"name": "llama-pool", "quotas": pool}],
                    }
                ],
            }
        ],
    }
    async with database.session() as session:
        await apply_config(session, parse_config(config), actor="test")
    late = at(DAY, 23, 59, 59).replace(microsecond=999_999)
    async with database.session() as session:
        await insert_usage(
            session,
            [
                usage(reservation="e1.1", prompt=120, completion=30, created_at=late),
                usage(reservation="e1.2", prompt=7, completion=0, status=502),
                usage("beta", prompt=0, completion=0, status=429),  # refused: nothing
                usage("beta", prompt=5, completion=6),  # a queue no longer configured
            ],
        )
    async with database.session() as session:
        again = usage(reservation="e1.1", prompt=999, completion=999, estimated=True)
        await insert_usage(session, [again])
    async with database.session() as session:
        rows = (await session.exec(select(ChargeRow))).all()
    found = sorted(
        (c.tenant, c.queue, c.cohort_path, c.model, c.call_id, c.resource, c.amount, c.day)
        for c in rows
    )
    assert all(c.flavor == "llama-pool" and c.workload_id is None for c in rows)
    m = "llama-3-8b"
    assert found == [
        ("alpha", "alpha-q", "org/lab", m, "e1.1", "input-tokens", Decimal(120), DAY),
        ("alpha", "alpha-q", "org/lab", m, "e1.1", "output-tokens", Decimal(30), DAY),
        ("alpha", "alpha-q", "org/lab", m, "e1.2", "input-tokens", Decimal(7), DAY),
        ("beta", "beta-q", "", m, None, "input-tokens", Decimal(5), DAY),
        ("beta", "beta-q", "", m, None, "output-tokens", Decimal(6), DAY),
    ]
