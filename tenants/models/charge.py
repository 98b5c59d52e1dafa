from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal

from sqlalchemy import BigInteger, Index, Integer, Numeric, text
from sqlmodel import Field, SQLModel

from tenants.models._base import timestamp_field

__all__ = ["AMOUNT_SCALE", "HOURS_SUFFIX", "INPUT_TOKENS", "OUTPUT_TOKENS", "ChargeRow"]

AMOUNT_SCALE = 6  # decimals kept of an amount: a micro-GPU-hour, a millionth of a token
# The resources charged: "<resource>-hours" for a metered resource's use over time
# (nvidia.com/gpu-hours), and an inference call's prompt and completion tokens.
HOURS_SUFFIX = "-hours"
INPUT_TOKENS, OUTPUT_TOKENS = "input-tokens", "output-tokens"
_ID = BigInteger().with_variant(Integer(), "sqlite")


class ChargeRow(SQLModel, table=True):
    """One charge of the chargeback ledger: an amount of one resource that a tenant's
    queue used of one flavor on one UTC day. A training run's GPU-hours are charged
    when the run ends (one row per flavor, resource and day it ran on); an inference
    call's tokens when its usage record is written (``input-tokens``, ``output-tokens``).

    No foreign keys, as for usage records: charges are history, and outlive the
    tenants, queues and workloads they name.
    """

    __tablename__ = "charges"
    __table_args__ = (
        # Reports read one tenant's days, or one queue's; the admission loop all days.
        Index("ix_charges_tenant_day", "tenant", "day"),
        Index("ix_charges_queue_day", "queue", "day"),
        Index("ix_charges_day", "day"),
        # A charge written twice (a retry after a crash, two gateways) lands once: per
        # run, flavor, resource and day; per call and resource.
        Index(
            "ux_charges_run",
            "workload_id",
            "attempt",
            "flavor",
            "resource",
            "day",
            unique=True,
            postgresql_where=text("workload_id IS NOT NULL"),
            sqlite_where=text("workload_id IS NOT NULL"),
        ),
        Index(
            "ux_charges_call",
            "call_id",
            "resource",
            unique=True,
            postgresql_where=text("call_id IS NOT NULL"),
            sqlite_where=text("call_id IS NOT NULL"),
        ),
    )

    id: int | None = Field(default=None, primary_key=True, sa_type=_ID)
    tenant: str = Field(max_length=63)
    queue: str = Field(max_length=63)
    # The queue's cohorts, root first, joined with "/" ("" if it has none), as they
    # stood when the charge was made.
    cohort_path: str = Field(default="", max_length=1024)
    flavor: str = Field(max_length=63)
    resource: str = Field(max_length=253)  # e.g. nvidia.com/gpu-hours, input-tokens
    # In the resource's unit (hours of the metered resource, tokens).
    amount: Decimal = Field(sa_type=Numeric(24, AMOUNT_SCALE))
    model: str | None = Field(default=None, max_length=128)  # inference only
    workload_id: str | None = Field(default=None, max_length=32)  # training only
    attempt: int | None = None  # the run of the workload (training only)
    call_id: str | None = Field(default=None, max_length=64)  # the reservation (inference)
    day: date  # the UTC day the use happened on
    at: datetime = timestamp_field()  # when it was charged
