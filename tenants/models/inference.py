"""The model registry as rows: each model keeps its config entry (flavor, endpoints)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlmodel import Field, SQLModel

from tenants.models._base import json_field, timestamp_field

__all__ = ["ModelRow"]


class ModelRow(SQLModel, table=True):
    __tablename__ = "models"

    name: str = Field(primary_key=True, max_length=128)
    position: int = 0
    spec: dict[str, Any] = json_field()  # {"name", "flavor", "endpoints": [...]}
    updated_at: datetime = timestamp_field()
    version: int = 1  # bumped on every change, by the admin API or a config apply
