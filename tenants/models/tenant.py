from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON
from sqlmodel import Field, SQLModel

from tenants.models._base import json_field, timestamp_field

__all__ = ["Tenant"]


class Tenant(SQLModel, table=True):
    """A team or organisation; it reaches quota only through the queues it may use."""

    __tablename__ = "tenants"

    name: str = Field(primary_key=True, max_length=63)
    display_name: str = Field(default="", max_length=200)
    queues: list[str] = json_field(list)  # cluster queues it may submit to
    # Backends its workloads may run on (None: every configured backend).
    backends: list[str] | None = Field(default=None, sa_type=JSON)
    # Caps the admission policy applies: max_pods_per_workload, max_gpus_per_workload,
    # max_runtime_seconds (absent: no cap).
    limits: dict[str, int] = json_field(dict)
    # Models its callers may use (None: every model served by its queues' flavors).
    models: list[str] | None = Field(default=None, sa_type=JSON)
    # Its idle keys: expire_idle_keys (bool), idle_days (absent: the gateway's default).
    key_policy: dict[str, Any] = json_field(dict)
    created_at: datetime = timestamp_field()
    updated_at: datetime = timestamp_field()
    version: int = 1  # bumped on every change, by the admin API or a config apply
    # Soft deletion: the row stays for the history (workloads, usage, audit) that names
    # it; a deleted tenant is unknown to the policies and its keys are revoked.
    deleted_at: datetime | None = timestamp_field(nullable=True)
