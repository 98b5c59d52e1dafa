"""Usage records: written in batches (one multi-row INSERT each) and read back as a
tenant's daily totals per model.

:class:`UsageRecord` is the plain value the gateway's hot path builds for every
inference call; it lives here, not in the gateway, because ``tenants`` owns the
schema and never imports ``gateway``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

from sqlalchemy import case, func
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlmodel import col
from sqlmodel.ext.asyncio.session import AsyncSession
from sqlmodel.sql.expression import Select

from tenants.models import ApiKey, UsageRecordRow
from tenants.models._base import utcnow
from tenants.services.charges import call_charges, cohort_paths, insert_charges

__all__ = [
    "KeySpend",
    "QueueSpend",
    "RecentQueueSpend",
    "UsageDay",
    "UsageRecord",
    "insert_usage",
    "key_spend",
    "queue_spend",
    "recent_spend",
    "usage_summary",
]

_MAX_INT = 2**31 - 1  # the INTEGER columns


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageRecord:
    """One inference call: who made it, for what, what it used and how it went."""

    tenant: str
    principal: str
    queue: str
    model: str
    flavor: str
    status: int  # the HTTP status the caller got
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_ms: int = 0
    streamed: bool = False
    api_key_id: str | None = None  # None for OIDC callers
    endpoint: str | None = None  # the upstream base URL, if the call reached one
    created_at: datetime = field(default_factory=utcnow)
    reservation: str | None = None  # the ledger's reservation id: one record per call
    estimated: bool = False  # tokens last known of a call whose gateway died


@dataclass(frozen=True, slots=True)
class UsageDay:
    """One tenant's use of one model on one UTC day."""

    day: date
    model: str
    requests: int
    errors: int  # calls answered with an HTTP status >= 400
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


@dataclass(frozen=True, slots=True)
class QueueSpend:
    """The tokens one queue spent on one flavor on a UTC day and in its month."""

    queue: str
    flavor: str
    day: int
    month: int


# Each text column's length.
_LENGTHS: dict[str, int] = {
    c.name: c.type.length
    for c in UsageRecordRow.__table__.columns  # type: ignore[attr-defined]
    if isinstance(getattr(c.type, "length", None), int)
}


def _text(value: str | None, column: str) -> str | None:
    """Cut to the column's length: PostgreSQL refuses a longer value, and one bad
    record must not fail (and so hold back) the whole batch it is written with."""
    return None if value is None else value[: _LENGTHS[column]]


def _count(value: int) -> int:
    return min(max(int(value), 0), _MAX_INT)


def _row(record: UsageRecord) -> dict[str, Any]:
    created = record.created_at
    # A naive timestamp is taken as UTC rather than refused: see _text.
    created = created.replace(tzinfo=UTC) if created.tzinfo is None else created.astimezone(UTC)
    return {
        "tenant": _text(record.tenant, "tenant"),
        "api_key_id": _text(record.api_key_id, "api_key_id"),
        "principal": _text(record.principal, "principal"),
        "queue": _text(record.queue, "queue"),
        "model": _text(record.model, "model"),
        "flavor": _text(record.flavor, "flavor"),
        "endpoint": _text(record.endpoint, "endpoint"),
        "prompt_tokens": _count(record.prompt_tokens),
        "completion_tokens": _count(record.completion_tokens),
        "latency_ms": _count(record.latency_ms),
        "status": _count(record.status),
        "streamed": bool(record.streamed),
        "created_at": created,
        "day": created.date(),
        "reservation": _text(record.reservation, "reservation"),
        "estimated": bool(record.estimated),
    }


async def insert_usage(session: AsyncSession, records: Sequence[UsageRecord]) -> None:
    """Add ``records`` in one executemany of one INSERT, and their token charges to the
    chargeback ledger in another, in the same transaction (a call recorded twice is
    charged once: both skip a reservation already written). The statements are the same
    for every batch, so each is compiled once (SQLAlchemy caches it) and the driver
    sends the rows in as few round trips as it can. The caller's session owns the
    transaction."""
    if not records:
        return
    connection = await session.connection()
    insert = _INSERTS.get(connection.dialect.name, _INSERT)
    rows = [_row(r) for r in records]
    await connection.execute(insert, rows)
    paths = await cohort_paths(session, {row["queue"] for row in rows})
    await insert_charges(session, call_charges(rows, paths))


_TABLE = UsageRecordRow.__table__  # type: ignore[attr-defined]
_INSERT = _TABLE.insert()
# A record whose reservation is recorded already is skipped: after a crash, a gateway
# that reclaims a call and the call's own (late) write may both record it.
_INSERTS = {
    "postgresql": postgresql_insert(_TABLE).on_conflict_do_nothing(index_elements=["reservation"]),
    "sqlite": sqlite_insert(_TABLE).on_conflict_do_nothing(index_elements=["reservation"]),
}


async def usage_summary(
    session: AsyncSession, tenant: str, *, start: date, end: date, model: str | None = None
) -> list[UsageDay]:
    """``tenant``'s use per UTC day and model from ``start`` to ``end`` (both
    included), oldest day first; computed by the database."""
    day, name = col(UsageRecordRow.day), col(UsageRecordRow.model)
    # SUM of INTEGER is BIGINT on PostgreSQL: no overflow however many calls a day has.
    prompt = func.sum(col(UsageRecordRow.prompt_tokens))
    completion = func.sum(col(UsageRecordRow.completion_tokens))
    # sqlmodel's select() takes at most four columns; its Select class takes any number.
    columns: Select[date, str, int, int, int, int, int] = Select(
        day,
        name,
        func.count(),
        func.sum(case((col(UsageRecordRow.status) >= 400, 1), else_=0)),
        prompt,
        completion,
        prompt + completion,
    )
    query = (
        columns.where(col(UsageRecordRow.tenant) == tenant, day >= start, day <= end)
        .group_by(day, name)
        .order_by(day, name)
    )
    if model is not None:
        query = query.where(name == model)
    rows = (await session.exec(query)).all()
    return [
        UsageDay(d, m, int(requests), int(errors), int(p), int(c), int(total))
        for d, m, requests, errors, p, c, total in rows
    ]


@dataclass(frozen=True, slots=True)
class RecentQueueSpend:
    """What one queue spent of one flavor since some moment: tokens, calls that used
    any, and when the latest call was recorded."""

    queue: str
    flavor: str
    tokens: int
    requests: int
    last_at: datetime


async def recent_spend(session: AsyncSession, since: datetime) -> list[RecentQueueSpend]:
    """Per queue and flavor, the calls recorded since ``since`` (to restore the
    per-minute rate windows of a ledger that lost them). Calls that used nothing (given
    back: the upstream failed) are left out, as the ledger refunded them."""
    created, queue, flavor = (
        col(UsageRecordRow.created_at),
        col(UsageRecordRow.queue),
        col(UsageRecordRow.flavor),
    )
    tokens = col(UsageRecordRow.prompt_tokens) + col(UsageRecordRow.completion_tokens)
    columns: Select[str, str, int, int, datetime] = Select(
        queue, flavor, func.sum(tokens), func.count(), func.max(created)
    )
    query = columns.where(created >= since, tokens > 0).group_by(queue, flavor)
    rows = (await session.exec(query)).all()
    return [
        RecentQueueSpend(q, f, int(total or 0), int(calls), _aware(last))
        for q, f, total, calls, last in rows
    ]


async def tenant_tokens_since(session: AsyncSession, since: datetime) -> list[tuple[str, int]]:
    """Tokens per tenant in the calls recorded since ``since``, most first (ties by
    name); tenants that used none are left out."""
    created, tenant = col(UsageRecordRow.created_at), col(UsageRecordRow.tenant)
    tokens = func.sum(col(UsageRecordRow.prompt_tokens) + col(UsageRecordRow.completion_tokens))
    columns: Select[str, int] = Select(tenant, tokens)
    query = columns.where(created >= since).group_by(tenant)
    spent = [(name, int(total or 0)) for name, total in (await session.exec(query)).all()]
    return sorted((t for t in spent if t[1] > 0), key=lambda t: (-t[1], t[0]))


@dataclass(frozen=True, slots=True)
class KeySpend:
    key_id: str
    day: int  # tokens on the UTC day asked for
    recent: int  # tokens since the moment asked for
    last_at: datetime | None  # the latest of those recent calls


async def key_spend(session: AsyncSession, day: date, since: datetime) -> list[KeySpend]:
    """Tokens each API key with limits of its own spent on the UTC ``day`` and since
    ``since`` (to restore the keys' levels of a ledger that lost them)."""
    key, on, created = (
        col(UsageRecordRow.api_key_id),
        col(UsageRecordRow.day),
        col(UsageRecordRow.created_at),
    )
    tokens = col(UsageRecordRow.prompt_tokens) + col(UsageRecordRow.completion_tokens)
    recent = created >= since
    columns: Select[str, int, int, datetime] = Select(
        key,
        func.sum(case((on == day, tokens), else_=0)),
        func.sum(case((recent, tokens), else_=0)),
        func.max(case((recent, created), else_=None)),
    )
    limited = col(ApiKey.tokens_per_minute).is_not(None) | col(ApiKey.tokens_per_day).is_not(None)
    query = (
        columns.join(ApiKey, col(ApiKey.key_id) == key)
        .where(on >= min(day, since.date()), limited, tokens > 0)
        .group_by(key)
    )
    rows = (await session.exec(query)).all()
    return [
        KeySpend(k, int(today or 0), int(last or 0), None if at is None else _aware(at))
        for k, today, last, at in rows
    ]


def _aware(moment: datetime) -> datetime:
    """SQLite gives timestamps back naive; they were written in UTC."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


async def queue_spend(session: AsyncSession, day: date) -> list[QueueSpend]:
    """Tokens (prompt + completion) each queue spent per flavor on the UTC ``day`` and
    in its month up to that day, as the records written so far tell."""
    start = day.replace(day=1)
    on, queue, flavor = (
        col(UsageRecordRow.day),
        col(UsageRecordRow.queue),
        col(UsageRecordRow.flavor),
    )
    tokens = col(UsageRecordRow.prompt_tokens) + col(UsageRecordRow.completion_tokens)
    columns: Select[str, str, int, int] = Select(
        queue, flavor, func.sum(case((on == day, tokens), else_=0)), func.sum(tokens)
    )
    query = columns.where(on >= start, on <= day).group_by(queue, flavor)
    rows = (await session.exec(query)).all()
    return [QueueSpend(q, f, int(today or 0), int(month or 0)) for q, f, today, month in rows]
