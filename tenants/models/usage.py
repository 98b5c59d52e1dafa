from __future__ import annotations

from datetime import date, datetime

from sqlalchemy import BigInteger, Index, Integer, false
from sqlmodel import Field, SQLModel

from tenants.models._base import timestamp_field

__all__ = ["UsageRecordRow"]

# PostgreSQL needs a 64-bit id at thousands of rows a second; SQLite only makes an
# auto-incrementing rowid of a column typed exactly INTEGER.
_ID = BigInteger().with_variant(Integer(), "sqlite")


class UsageRecordRow(SQLModel, table=True):
    """One inference call, as billed: who made it, for which model, and what it used.

    No foreign keys: the table is written in batches at a high rate, and its rows
    outlive the tenants and keys they name (usage is history, not state).
    """

    __tablename__ = "usage_records"
    __table_args__ = (
        Index("ix_usage_records_tenant_created_at", "tenant", "created_at"),
        # The summary reads one tenant's days, optionally for one model.
        Index("ix_usage_records_tenant_day_model", "tenant", "day", "model"),
        # A rebuilt ledger reads the last minute of every queue.
        Index("ix_usage_records_created_at", "created_at"),
        # Each key's calls and tokens of the last 30 days (idle and anomalous keys).
        Index("ix_usage_records_key_day", "api_key_id", "day"),
        # A call is recorded once, however many gateways record it after a crash.
        Index("ux_usage_records_reservation", "reservation", unique=True),
    )

    id: int | None = Field(default=None, primary_key=True, sa_type=_ID)
    tenant: str = Field(max_length=63)
    api_key_id: str | None = Field(default=None, max_length=40)  # OIDC callers have none
    principal: str = Field(max_length=200)
    queue: str = Field(max_length=63)
    model: str = Field(max_length=128)
    flavor: str = Field(max_length=63)
    endpoint: str | None = Field(default=None, max_length=500)  # the upstream, if one answered
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_ms: int = 0
    status: int  # the HTTP status the caller got
    streamed: bool = False
    created_at: datetime = timestamp_field()
    # The UTC day of created_at, stored so that every database groups by it alike.
    day: date
    # The ledger reservation it accounts for (None: recorded before revision 0010, or
    # by a gateway without a shared ledger); and whether its tokens are the last ones
    # known of a call whose gateway died (recorded by another gateway), not reported.
    reservation: str | None = Field(default=None, max_length=64)
    estimated: bool = Field(default=False, sa_column_kwargs={"server_default": false()})
