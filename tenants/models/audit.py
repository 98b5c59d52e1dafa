from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlmodel import Field, SQLModel

from tenants.models._base import json_field, timestamp_field

__all__ = ["AuditEntry"]


class AuditEntry(SQLModel, table=True):
    """One change: who did what to which object, and the values it set."""

    __tablename__ = "audit_log"

    id: int | None = Field(default=None, primary_key=True)
    at: datetime = timestamp_field(index=True)
    actor: str = Field(max_length=200)
    action: str = Field(max_length=40)  # create | update | delete | revoke | apply ...
    kind: str = Field(max_length=40)  # tenant | api_key | flavor | cohort | cluster_queue ...
    name: str = Field(max_length=253)
    tenant: str | None = Field(default=None, index=True, max_length=63)
    detail: dict[str, Any] = json_field()
