"""Each key's recent use and its idle and anomalous flags, as the admin API shows them
in key listings (the rules are in :mod:`tenants.services.key_activity`)."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
from sqlmodel.ext.asyncio.session import AsyncSession

from gateway.settings import AuthSettings
from tenants.models import ApiKey, Tenant
from tenants.models._base import utcnow
from tenants.services.key_activity import KeyActivity, idle_days_of, key_activity, key_flags

__all__ = ["KeyActivityOut", "keys_out"]


class KeyActivityOut(msgspec.Struct):
    calls_7d: int
    tokens_7d: int
    calls_30d: int
    tokens_30d: int
    tokens_today: int
    idle: bool
    idle_reason: str | None
    anomalous: bool
    anomalous_reason: str | None


async def keys_out(
    session: AsyncSession, keys: Sequence[ApiKey], auth: AuthSettings
) -> dict[str, KeyActivityOut]:
    """The activity of each of ``keys``, by key id (one query for them all)."""
    now = utcnow()
    found = await key_activity(session, [key.key_id for key in keys], now.date())
    tenants = {name: await session.get(Tenant, name) for name in {k.tenant for k in keys} if name}
    out: dict[str, KeyActivityOut] = {}
    for key in keys:
        activity = found.get(key.key_id, KeyActivity())
        owner = tenants.get(key.tenant) if key.tenant else None
        flags = key_flags(
            key,
            activity,
            now,
            idle_days=idle_days_of(owner, auth.key_idle_days),
            factor=auth.key_anomaly_factor,
            floor=auth.key_anomaly_floor,
        )
        out[key.key_id] = KeyActivityOut(
            calls_7d=activity.calls_7d,
            tokens_7d=activity.tokens_7d,
            calls_30d=activity.calls_30d,
            tokens_30d=activity.tokens_30d,
            tokens_today=activity.tokens_today,
            idle=flags.idle,
            idle_reason=flags.idle_reason,
            anomalous=flags.anomalous,
            anomalous_reason=flags.anomalous_reason,
        )
    return out
