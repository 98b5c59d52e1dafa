"""A rotated key: the new secret always, the replaced one only until its grace ends
(to the second), and a revoked key by neither."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from gateway.auth import (
    AuthenticationError,
    Authenticator,
    InMemoryApiKeyStore,
    StoredKey,
    generate_api_key,
    hash_secret,
)

PEPPER = b"pepper-for-tests-0123456789"
NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


async def test_the_replaced_secret_works_until_the_grace_ends() -> None:
    old = generate_api_key("live")
    new_secret = generate_api_key("live").secret
    new = f"ign_live_{old.key_id}_{new_secret}"
    until = NOW + timedelta(hours=1)
    stored = StoredKey(
        key_id=old.key_id,
        tenant="alpha",
        principal="ci",
        secret_hash=hash_secret(new_secret, PEPPER),
        roles=frozenset({"member"}),
        scopes=frozenset({"inference"}),
        previous_secret_hash=hash_secret(old.secret, PEPPER),
        previous_valid_until=until,
    )
    store = InMemoryApiKeyStore([stored])
    now = [NOW]
    auth = Authenticator(api_keys=store, pepper=PEPPER, clock=lambda: now[0])
    assert (await auth.authenticate_token(old.token)).key_id == old.key_id
    assert (await auth.authenticate_token(new)).key_id == old.key_id
    now[0] = until - timedelta(microseconds=1)
    await auth.authenticate_token(old.token)
    now[0] = until
    with pytest.raises(AuthenticationError) as refused:
        await auth.authenticate_token(old.token)
    assert refused.value.status_code == 401
    assert (await auth.authenticate_token(new)).principal == "ci"  # the new one goes on
    # Revoked, the key is refused by either secret, inside the grace too.
    now[0] = NOW
    store.add(replace(stored, revoked_at=NOW))
    for token in (old.token, new):
        with pytest.raises(AuthenticationError):
            await auth.authenticate_token(token)
