"""usage records

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-22 13:05:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "usage_records",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            nullable=False,
        ),
        sa.Column("tenant", sa.String(length=63), nullable=False),
        sa.Column("api_key_id", sa.String(length=40), nullable=True),
        sa.Column("principal", sa.String(length=200), nullable=False),
        sa.Column("queue", sa.String(length=63), nullable=False),
        sa.Column("model", sa.String(length=128), nullable=False),
        sa.Column("flavor", sa.String(length=63), nullable=False),
        sa.Column("endpoint", sa.String(length=500), nullable=True),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        sa.Column("latency_ms", sa.Integer(), nullable=False),
        sa.Column("status", sa.Integer(), nullable=False),
        sa.Column("streamed", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("usage_records", schema=None) as batch_op:
        batch_op.create_index(
            "ix_usage_records_tenant_created_at", ["tenant", "created_at"], unique=False
        )
        batch_op.create_index(
            "ix_usage_records_tenant_day_model", ["tenant", "day", "model"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("usage_records", schema=None) as batch_op:
        batch_op.drop_index("ix_usage_records_tenant_day_model")
        batch_op.drop_index("ix_usage_records_tenant_created_at")
    op.drop_table("usage_records")
