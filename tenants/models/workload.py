from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON
from sqlmodel import Field, SQLModel, UniqueConstraint

from tenants.models._base import json_field, new_id, timestamp_field

__all__ = ["WorkloadEventRow", "WorkloadRow"]


class WorkloadRow(SQLModel, table=True):
    """A training workload and where it stands; the durable record the admission
    loop reads and changes."""

    __tablename__ = "workloads"
    __table_args__ = (UniqueConstraint("tenant", "idempotency_key"),)

    id: str = Field(default_factory=new_id, primary_key=True, max_length=32)
    tenant: str = Field(foreign_key="tenants.name", index=True, max_length=63)
    name: str = Field(max_length=253)
    queue: str = Field(index=True, max_length=63)
    priority: int = 0
    spec: dict[str, Any] = json_field()  # pod sets, max runtime, backend, job
    state: str = Field(default="pending", index=True, max_length=20)
    reason_code: str | None = Field(default=None, max_length=64)
    reason_message: str | None = Field(default=None, max_length=2000)
    # What blocks it, as data: [{level, name, flavor, resource, requested, available}]
    reason_detail: list[dict[str, Any]] | None = Field(default=None, sa_type=JSON)
    admission: dict[str, Any] | None = Field(default=None, sa_type=JSON)
    idempotency_key: str | None = Field(default=None, max_length=255)
    request_hash: str | None = Field(default=None, max_length=64)  # what the key was used for
    cancel_requested: bool = False  # the dispatcher stops it, then it is cancelled
    attempt: int = 0  # admissions so far; names the backend job of each run
    job_id: str | None = Field(default=None, max_length=64)  # the backend job, while it exists
    # Where the current (or last) job was sent, and the backend's own id and state for it
    # (e.g. Slurm's job id and "PENDING"): kept after a preemption, so the job can still
    # be stopped there, and shown to the user.
    backend: str | None = Field(default=None, max_length=63)
    backend_job_id: str | None = Field(default=None, max_length=64)
    backend_state: str | None = Field(default=None, max_length=32)
    # When the current (or last) job started running on its backend, and how it exited
    # (the command's status; -N: ended by signal N), as the backend reports them.
    started_at: datetime | None = timestamp_field(nullable=True)
    exit_code: int | None = None
    version: int = 0  # bumped on every change, for optimistic checks
    created_at: datetime = timestamp_field()
    updated_at: datetime = timestamp_field()
    admitted_at: datetime | None = timestamp_field(nullable=True)
    finished_at: datetime | None = timestamp_field(nullable=True)
    # When it was last preempted and put back in its queue: it waits behind those that
    # were waiting then (the engine's ``Workload.queued``).
    queued_at: datetime | None = timestamp_field(nullable=True)
    # While pending: when the forecast expects it to start (None: not within its
    # horizon, or not yet computed), and when that was computed.
    estimated_start: datetime | None = timestamp_field(nullable=True)
    estimated_at: datetime | None = timestamp_field(nullable=True)


class WorkloadEventRow(SQLModel, table=True):
    """One thing that happened to a workload (submitted, admitted, dispatched, running,
    preempted, requeued, lost, adopted, cancelled, finished, failed), written in the same
    transaction as the row change it describes: an event never exists without its change,
    nor a change without its event."""

    __tablename__ = "workload_events"

    id: int | None = Field(default=None, primary_key=True)
    workload_id: str = Field(foreign_key="workloads.id", index=True, max_length=32)
    type: str = Field(max_length=20)
    attempt: int = 0  # the workload's attempt (admissions so far) when it happened
    at: datetime = timestamp_field()
    detail: dict[str, Any] = json_field()
