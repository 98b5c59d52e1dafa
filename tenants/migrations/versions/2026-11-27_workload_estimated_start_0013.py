"""when a pending workload is expected to start (the forecast's answer) and when that
was computed

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-27 10:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("workloads") as batch:
        batch.add_column(sa.Column("estimated_start", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("estimated_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("workloads") as batch:
        batch.drop_column("estimated_at")
        batch.drop_column("estimated_start")
