"""tenant limits and backends

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22 12:27:13.652199
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("tenants", schema=None) as batch_op:
        batch_op.add_column(sa.Column("backends", sa.JSON(), nullable=True))
        batch_op.add_column(
            sa.Column("limits", sa.JSON(), nullable=False, server_default=sa.text("'{}'"))
        )


def downgrade() -> None:
    with op.batch_alter_table("tenants", schema=None) as batch_op:
        batch_op.drop_column("limits")
        batch_op.drop_column("backends")
