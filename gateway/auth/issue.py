"""Issuing API keys: a new secret, only its hash stored, the token shown once. The one
way keys are made, by the admin API and by ``ignara keys create`` alike."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlmodel.ext.asyncio.session import AsyncSession

from gateway.auth.keys import generate_api_key, hash_secret
from tenants.models import ApiKey
from tenants.services.api_keys import add_api_key

__all__ = ["issue_api_key"]


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
    )
    return key, generated.token
