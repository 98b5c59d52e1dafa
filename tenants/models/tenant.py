from __future__ import annotations

from datetime import datetime

from sqlmodel import Field, SQLModel

from tenants.models._base import json_field, timestamp_field

__all__ = ["Tenant"]


class Tenant(SQLModel, table=True):
    """A team or organisation; it reaches quota only through the queues it may use."""

    __tablename__ = "tenants"

    name: str = Field(primary_key=True, max_length=63)
    display_name: str = Field(default="", max_length=200)
    queues: list[str] = json_field(list)  # cluster queues it may submit to
    created_at: datetime = timestamp_field()
    updated_at: datetime = timestamp_field()
