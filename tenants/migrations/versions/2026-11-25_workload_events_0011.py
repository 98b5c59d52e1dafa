"""a timeline per workload: its events (submitted, admitted, dispatched, running,
preempted, requeued, lost, adopted, cancelled, finished, failed) with times

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-25 18:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "workload_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("workload_id", sa.String(length=32), nullable=False),
        sa.Column("type", sa.String(length=20), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["workload_id"], ["workloads.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("workload_events", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_workload_events_workload_id"), ["workload_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("workload_events", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_workload_events_workload_id"))
    op.drop_table("workload_events")
