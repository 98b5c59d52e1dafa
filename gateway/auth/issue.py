"""Issuing API keys: a new secret, only its hash stored, the token shown once. The one
way keys are made, by the admin API and by ``ignara keys create`` alike."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from sqlmodel.ext.asyncio.session import AsyncSession

from gateway.auth.keys import KEY_PREFIX, generate_api_key, hash_secret
from tenants.models import ApiKey
from tenants.services.api_keys import add_api_key, rotate_api_key

__all__ = ["MAX_ROTATION_GRACE", "issue_api_key", "rotate_api_key_secret"]

MAX_ROTATION_GRACE = timedelta(days=7)  # time enough to roll a secret out everywhere


async def issue_api_key(
    session: AsyncSession,
    pepper: bytes,
    *,
    tenant: str | None,
    principal: str,
    roles: Sequence[str],
    scopes: Sequence[str] | None,
    expires_at: datetime | None,
    actor: str,
    limits: Mapping[str, int | None] | None = None,
) -> tuple[ApiKey, str]:
    """Store a new key of ``tenant`` (``None``: a platform key) in the caller's
    transaction; returns it and its token, which exists nowhere else. Raises as
    :func:`tenants.services.api_keys.add_api_key` does."""
    generated = generate_api_key("live")
    key = await add_api_key(
        session,
        tenant=tenant,
        principal=principal,
        roles=roles,
        scopes=scopes,
        key_id=generated.key_id,
        secret_hash=hash_secret(generated.secret, pepper),
        expires_at=expires_at,
        actor=actor,
        limits=limits,
    )
    return key, generated.token


async def rotate_api_key_secret(
    session: AsyncSession,
    pepper: bytes,
    *,
    tenant: str | None,
    key_id: str,
    grace: timedelta,
    actor: str,
) -> tuple[ApiKey, str]:
    """A new secret for an existing key, in the caller's transaction; returns the key
    and its new token (same key id), which exists nowhere else. The old secret works
    for ``grace`` more (0 to ``MAX_ROTATION_GRACE``; ``ValueError`` otherwise). Raises
    as :func:`tenants.services.api_keys.rotate_api_key` does."""
    if not timedelta(0) <= grace <= MAX_ROTATION_GRACE:
        raise ValueError("the grace period must be between 0 seconds and 7 days")
    env, secret = "live", generate_api_key("live").secret
    key = await rotate_api_key(
        session,
        tenant,
        key_id,
        secret_hash=hash_secret(secret, pepper),
        grace=grace,
        actor=actor,
    )
    return key, f"{KEY_PREFIX}{env}_{key_id}_{secret}"
