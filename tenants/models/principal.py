from __future__ import annotations

from datetime import datetime

from sqlalchemy import Index, text
from sqlmodel import Field, SQLModel, UniqueConstraint

from tenants.models._base import new_id, timestamp_field

__all__ = ["Principal"]


class Principal(SQLModel, table=True):
    """A user or service account: of one tenant, or of the platform (``tenant`` None).

    It holds no roles: each of its keys carries its own. Names are unique per tenant,
    and among platform principals (NULLs are distinct in a unique constraint, hence the
    partial index)."""

    __tablename__ = "principals"
    __table_args__ = (
        UniqueConstraint("tenant", "name"),
        Index(
            "uq_principals_platform_name",
            "name",
            unique=True,
            sqlite_where=text("tenant IS NULL"),
            postgresql_where=text("tenant IS NULL"),
        ),
    )

    id: str = Field(default_factory=new_id, primary_key=True, max_length=32)
    tenant: str | None = Field(
        default=None, foreign_key="tenants.name", index=True, max_length=63, nullable=True
    )
    name: str = Field(max_length=200)
    kind: str = Field(default="user", max_length=20)  # user | service-account
    version: int = 1  # bumped on every change (If-Match)
    created_at: datetime = timestamp_field()
    # Set when its tenant is deleted: none of its keys authenticates any more.
    disabled_at: datetime | None = timestamp_field(nullable=True)
