from __future__ import annotations

from datetime import datetime

from sqlmodel import Field, SQLModel, UniqueConstraint

from tenants.models._base import json_field, new_id, timestamp_field

__all__ = ["Principal"]


class Principal(SQLModel, table=True):
    """A user or service account of one tenant, with its roles."""

    __tablename__ = "principals"
    __table_args__ = (UniqueConstraint("tenant", "name"),)

    id: str = Field(default_factory=new_id, primary_key=True, max_length=32)
    tenant: str = Field(foreign_key="tenants.name", index=True, max_length=63)
    name: str = Field(max_length=200)
    kind: str = Field(default="user", max_length=20)  # user | service-account
    roles: list[str] = json_field(list)  # admin | tenant-admin | member
    created_at: datetime = timestamp_field()
