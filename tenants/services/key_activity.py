"""How much each API key is used, and which keys look abandoned or runaway.

Read from the usage records (one grouped query over the last 30 days of the keys
asked about, on the ``(api_key_id, day)`` index) and the key's own ``last_used_at``.

* **idle**: not used (or, never used, not created) for ``idle_days`` or more: a key
  nobody uses is only a risk, and a tenant may have such keys expired.
* **anomalous**: today's tokens above ``factor`` times the key's daily mean over the
  30 days before today (the days it existed, at least one), and at least ``floor``:
  a leaked or runaway key spends far above its own history.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from sqlalchemy import case, func
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession
from sqlmodel.sql.expression import Select

from tenants.models import ApiKey, Tenant, UsageRecordRow
from tenants.services.api_keys import revoke_api_key

__all__ = [
    "KeyActivity",
    "KeyFlags",
    "expire_idle_keys",
    "idle_days_of",
    "key_activity",
    "key_flags",
]

WINDOW_DAYS = 30


@dataclass(frozen=True, slots=True)
class KeyActivity:
    """One key's calls and tokens (prompt and completion) over the last 7 and 30 days
    (today included), today, and the 30 days before today."""

    calls_7d: int = 0
    tokens_7d: int = 0
    calls_30d: int = 0
    tokens_30d: int = 0
    tokens_today: int = 0
    tokens_before_today: int = 0


@dataclass(frozen=True, slots=True)
class KeyFlags:
    idle: bool
    idle_reason: str | None
    anomalous: bool
    anomalous_reason: str | None


async def key_activity(
    session: AsyncSession, key_ids: Collection[str], today: date
) -> dict[str, KeyActivity]:
    """The activity of each of ``key_ids`` (absent: no usage in the last 30 days)."""
    if not key_ids:
        return {}
    day = col(UsageRecordRow.day)
    tokens = col(UsageRecordRow.prompt_tokens) + col(UsageRecordRow.completion_tokens)
    week = today - timedelta(days=6)
    start = today - timedelta(days=WINDOW_DAYS)  # the 30 days before today, and today

    month = today - timedelta(days=WINDOW_DAYS - 1)

    def within(since: date, value: Any) -> Any:
        return func.coalesce(func.sum(case((day >= since, value), else_=0)), 0)

    # sqlmodel's select() takes at most four columns; its Select class takes any number.
    columns: Select[str, int, int, int, int, int, int] = Select(
        col(UsageRecordRow.api_key_id),
        within(week, 1),
        within(week, tokens),
        within(month, 1),
        within(month, tokens),
        within(today, tokens),
        func.coalesce(func.sum(case((day < today, tokens), else_=0)), 0),
    )
    query = columns.where(col(UsageRecordRow.api_key_id).in_(list(key_ids)), day >= start).group_by(
        col(UsageRecordRow.api_key_id)
    )
    rows = (await session.exec(query)).all()
    return {str(row[0]): KeyActivity(*(int(value) for value in row[1:])) for row in rows}


def key_flags(
    key: ApiKey,
    activity: KeyActivity,
    now: datetime,
    *,
    idle_days: int,
    factor: float,
    floor: int,
) -> KeyFlags:
    """Whether ``key`` is idle or anomalous now, and why (a sentence for its owner)."""
    idle_reason = None
    if key.revoked_at is None:
        last = key.last_used_at
        since = last or key.created_at
        idle_for = (now - since).days
        if idle_for >= idle_days:
            what = f"last used {last.date().isoformat()}" if last else "never used"
            idle_reason = (
                f"{what}: idle {idle_for} days, the threshold is {idle_days} days"
                if last
                else f"{what} since it was created {idle_for} days ago; "
                f"the threshold is {idle_days} days"
            )
    existed = min(WINDOW_DAYS, (now.date() - key.created_at.date()).days)
    mean = activity.tokens_before_today / max(existed, 1)
    anomalous_reason = None
    if activity.tokens_today >= floor and activity.tokens_today > factor * mean:
        anomalous_reason = (
            f"{activity.tokens_today} tokens today, more than {factor:g} times its daily "
            f"mean of {mean:.0f} over the {max(existed, 1)} days before"
        )
    return KeyFlags(
        idle=idle_reason is not None,
        idle_reason=idle_reason,
        anomalous=anomalous_reason is not None,
        anomalous_reason=anomalous_reason,
    )


def idle_days_of(tenant: Tenant | None, default: int) -> int:
    """The idle threshold of ``tenant``'s keys (``None``: a platform key's)."""
    days = None if tenant is None else tenant.key_policy.get("idle_days")
    return days if isinstance(days, int) and days > 0 else default


async def expire_idle_keys(
    session: AsyncSession, now: datetime, *, default_idle_days: int, actor: str
) -> list[ApiKey]:
    """Revoke every live key, idle past its threshold, of each live tenant whose
    ``key_policy`` says ``expire_idle_keys``; each is audited (action ``expire``) and
    its record says why. Platform keys are never expired so: a platform admin locked
    out by a policy could not undo it. Returns the keys expired."""
    tenants = (await session.exec(select(Tenant).where(col(Tenant.deleted_at).is_(None)))).all()
    expired: list[ApiKey] = []
    for tenant in tenants:
        if tenant.key_policy.get("expire_idle_keys") is not True:
            continue
        days = idle_days_of(tenant, default_idle_days)
        cutoff = now - timedelta(days=days)
        used = func.coalesce(col(ApiKey.last_used_at), col(ApiKey.created_at))
        candidates = (
            await session.exec(
                select(ApiKey).where(
                    col(ApiKey.tenant) == tenant.name,
                    col(ApiKey.revoked_at).is_(None),
                    used <= cutoff,
                )
            )
        ).all()
        for key in candidates:
            flags = key_flags(key, KeyActivity(), now, idle_days=days, factor=1.0, floor=1)
            reason = f"expired by tenant {tenant.name}'s idle-key policy: {flags.idle_reason}"
            expired.append(
                await revoke_api_key(
                    session, tenant.name, key.key_id, actor=actor, reason=reason, action="expire"
                )
            )
    return expired
