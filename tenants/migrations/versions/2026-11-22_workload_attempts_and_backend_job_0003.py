"""workload attempts and backend job

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 12:07:04.100348
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("workloads", schema=None) as batch_op:
        batch_op.add_column(sa.Column("attempt", sa.Integer(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("job_id", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("workloads", schema=None) as batch_op:
        batch_op.drop_column("job_id")
        batch_op.drop_column("attempt")
