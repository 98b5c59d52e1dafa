"""The authenticator's key store over SQL (tenants' API key rows)."""

from __future__ import annotations

from datetime import datetime

from gateway.auth.keys import StoredKey
from tenants import Database
from tenants.services.api_keys import find_api_key, touch_api_key

__all__ = ["SqlApiKeyStore"]


class SqlApiKeyStore:
    def __init__(self, database: Database) -> None:
        self.database = database

    async def get(self, key_id: str) -> StoredKey | None:
        async with self.database.session() as session:
            found = await find_api_key(session, key_id)
        if found is None:
            return None
        key, principal = found
        return StoredKey(
            key_id=key.key_id,
            tenant=key.tenant,
            principal=principal.name,
            secret_hash=key.secret_hash,
            roles=frozenset(principal.roles),
            scopes=frozenset(key.scopes),
            expires_at=key.expires_at,
            revoked_at=key.revoked_at,
        )

    async def touch(self, key_id: str, when: datetime) -> None:
        async with self.database.session() as session:
            await touch_api_key(session, key_id, when)
