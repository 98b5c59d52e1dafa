from __future__ import annotations

from datetime import datetime

from sqlmodel import Field, SQLModel

from tenants.models._base import json_field, timestamp_field

__all__ = ["ApiKey"]


class ApiKey(SQLModel, table=True):
    """An API key: its public id, and its secret only as a keyed hash."""

    __tablename__ = "api_keys"

    key_id: str = Field(primary_key=True, max_length=40)
    tenant: str = Field(foreign_key="tenants.name", index=True, max_length=63)
    principal_id: str = Field(foreign_key="principals.id", max_length=32)
    secret_hash: str = Field(max_length=128)
    scopes: list[str] = json_field(list)
    created_at: datetime = timestamp_field()
    expires_at: datetime | None = timestamp_field(nullable=True)
    revoked_at: datetime | None = timestamp_field(nullable=True)
    last_used_at: datetime | None = timestamp_field(nullable=True)
