"""Column helpers shared by every table."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, DateTime
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator
from sqlmodel import Field

__all__ = ["UTCDateTime", "json_field", "new_id", "timestamp_field", "utcnow"]


class UTCDateTime(TypeDecorator[datetime]):
    """Timestamps are UTC and timezone-aware on every database (SQLite drops the zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime: Ignara stores UTC timestamps only")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None or value.tzinfo is not None:
            return value
        return value.replace(tzinfo=UTC)


def utcnow() -> datetime:
    return datetime.now(UTC)


def new_id() -> str:
    return uuid.uuid4().hex


def timestamp_field(*, nullable: bool = False, **kw: Any) -> Any:
    """A timezone-aware timestamp (stored as UTC)."""
    if nullable:
        return Field(default=None, sa_type=UTCDateTime, nullable=True, **kw)
    return Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False, **kw)


def json_field(default_factory: Any = dict) -> Any:
    return Field(default_factory=default_factory, sa_type=JSON, nullable=False)
