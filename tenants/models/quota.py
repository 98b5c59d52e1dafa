"""The quota configuration as rows: each object keeps its spec in the scenario
vocabulary (see quota.config), so the engine reads it exactly as from a file."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlmodel import Field, SQLModel

from tenants.models._base import json_field, timestamp_field

__all__ = ["ClusterQueueRow", "CohortRow", "FlavorRow"]


class FlavorRow(SQLModel, table=True):
    __tablename__ = "flavors"

    name: str = Field(primary_key=True, max_length=63)
    position: int = 0  # keeps the configured order
    updated_at: datetime = timestamp_field()
    version: int = 1  # bumped on every change, by the admin API or a config apply


class CohortRow(SQLModel, table=True):
    __tablename__ = "cohorts"

    name: str = Field(primary_key=True, max_length=63)
    position: int = 0
    spec: dict[str, Any] = json_field()
    updated_at: datetime = timestamp_field()
    version: int = 1  # bumped on every change, by the admin API or a config apply


class ClusterQueueRow(SQLModel, table=True):
    __tablename__ = "cluster_queues"

    name: str = Field(primary_key=True, max_length=63)
    position: int = 0
    spec: dict[str, Any] = json_field()
    updated_at: datetime = timestamp_field()
    version: int = 1  # bumped on every change, by the admin API or a config apply
