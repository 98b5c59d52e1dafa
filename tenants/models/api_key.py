from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger
from sqlmodel import Field, SQLModel

from tenants.models._base import json_field, timestamp_field

__all__ = ["ApiKey"]


class ApiKey(SQLModel, table=True):
    """An API key: its public id, its secret only as a keyed hash, and its powers.

    A key's roles and scopes are its own, fixed when it is issued: issuing another key
    to the same principal never changes them. ``tenant`` is None for a platform key (a
    platform admin's, belonging to no tenant)."""

    __tablename__ = "api_keys"

    key_id: str = Field(primary_key=True, max_length=40)
    tenant: str | None = Field(
        default=None, foreign_key="tenants.name", index=True, max_length=63, nullable=True
    )
    principal_id: str = Field(foreign_key="principals.id", max_length=32)
    secret_hash: str = Field(max_length=128)
    roles: list[str] = json_field(list)  # member | tenant-admin; admin on platform keys only
    scopes: list[str] = json_field(list)  # never empty: what the key may do within its roles
    created_at: datetime = timestamp_field()
    expires_at: datetime | None = timestamp_field(nullable=True)
    revoked_at: datetime | None = timestamp_field(nullable=True)
    last_used_at: datetime | None = timestamp_field(nullable=True)
    # After a rotation, the old secret's hash, accepted until previous_valid_until.
    previous_secret_hash: str | None = Field(default=None, max_length=128, nullable=True)
    previous_valid_until: datetime | None = timestamp_field(nullable=True)
    rotated_at: datetime | None = timestamp_field(nullable=True)
    # Why it was revoked, told to its owner (e.g. expired after so many idle days).
    revoked_reason: str | None = Field(default=None, max_length=500, nullable=True)
    # The key's own token limits, below its queue's (None: only the queue's apply).
    tokens_per_minute: int | None = Field(default=None, sa_type=BigInteger, nullable=True)
    tokens_per_day: int | None = Field(default=None, sa_type=BigInteger, nullable=True)
