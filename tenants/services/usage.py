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
from sqlmodel import col
from sqlmodel.ext.asyncio.session import AsyncSession
from sqlmodel.sql.expression import Select

from tenants.models import UsageRecordRow
from tenants.models._base import utcnow

__all__ = ["QueueSpend", "UsageDay", "UsageRecord", "insert_usage", "queue_spend", "usage_summary"]

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
    }


async def insert_usage(session: AsyncSession, records: Sequence[UsageRecord]) -> None:
    """Add ``records`` in one executemany of one INSERT. The statement is the same for
    every batch, so it is compiled once (SQLAlchemy caches it) and the driver sends
    the rows in as few round trips as it can. The caller's session owns the transaction."""
    if not records:
        return
    connection = await session.connection()
    await connection.execute(_INSERT, [_row(r) for r in records])


_INSERT = UsageRecordRow.__table__.insert()  # type: ignore[attr-defined]


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
