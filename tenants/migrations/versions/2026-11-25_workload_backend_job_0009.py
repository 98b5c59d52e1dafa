"""where a workload's job runs: the backend's name, its own job id and state, when the
job started there and how it exited

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25 17:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("workloads", schema=None) as batch_op:
        batch_op.add_column(sa.Column("backend", sa.String(length=63), nullable=True))
        batch_op.add_column(sa.Column("backend_job_id", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("backend_state", sa.String(length=32), nullable=True))
        batch_op.add_column(sa.Column("started_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("exit_code", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("workloads", schema=None) as batch_op:
        batch_op.drop_column("exit_code")
        batch_op.drop_column("started_at")
        batch_op.drop_column("backend_state")
        batch_op.drop_column("backend_job_id")
        batch_op.drop_column("backend")
