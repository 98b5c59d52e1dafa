"""Column helpers shared by every table."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, DateTime
from sqlmodel import Field

__all__ = ["json_field", "new_id", "timestamp_field", "utcnow"]


def utcnow() -> datetime:
    return datetime.now(UTC)


def new_id() -> str:
    return uuid.uuid4().hex


def timestamp_field(*, nullable: bool = False, **kw: Any) -> Any:
    """A timezone-aware timestamp (stored as UTC)."""
    if nullable:
        return Field(default=None, sa_type=DateTime(timezone=True), nullable=True, **kw)
    return Field(default_factory=utcnow, sa_type=DateTime(timezone=True), nullable=False, **kw)


def json_field(default_factory: Any = dict) -> Any:
    return Field(default_factory=default_factory, sa_type=JSON, nullable=False)
