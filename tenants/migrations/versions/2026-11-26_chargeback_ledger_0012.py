"""the chargeback ledger: one row per charge (GPU-hours of a training run per flavor,
resource and day; tokens of an inference call), with what it was charged to

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-26 09:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "charges",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("tenant", sa.String(length=63), nullable=False),
        sa.Column("queue", sa.String(length=63), nullable=False),
        sa.Column("cohort_path", sa.String(length=1024), nullable=False),
        sa.Column("flavor", sa.String(length=63), nullable=False),
        sa.Column("resource", sa.String(length=253), nullable=False),
        sa.Column("amount", sa.Numeric(24, 6), nullable=False),
        sa.Column("model", sa.String(length=128), nullable=True),
        sa.Column("workload_id", sa.String(length=32), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=True),
        sa.Column("call_id", sa.String(length=64), nullable=True),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("charges", schema=None) as batch_op:
        batch_op.create_index("ix_charges_tenant_day", ["tenant", "day"], unique=False)
        batch_op.create_index("ix_charges_queue_day", ["queue", "day"], unique=False)
        batch_op.create_index("ix_charges_day", ["day"], unique=False)
        batch_op.create_index(
            "ux_charges_run",
            ["workload_id", "attempt", "flavor", "resource", "day"],
            unique=True,
            postgresql_where=sa.text("workload_id IS NOT NULL"),
            sqlite_where=sa.text("workload_id IS NOT NULL"),
        )
        batch_op.create_index(
            "ux_charges_call",
            ["call_id", "resource"],
            unique=True,
            postgresql_where=sa.text("call_id IS NOT NULL"),
            sqlite_where=sa.text("call_id IS NOT NULL"),
        )


def downgrade() -> None:
    with op.batch_alter_table("charges", schema=None) as batch_op:
        batch_op.drop_index("ux_charges_call")
        batch_op.drop_index("ux_charges_run")
        batch_op.drop_index("ix_charges_day")
        batch_op.drop_index("ix_charges_queue_day")
        batch_op.drop_index("ix_charges_tenant_day")
    op.drop_table("charges")
