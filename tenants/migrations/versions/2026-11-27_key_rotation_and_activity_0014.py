"""key rotation (the previous secret, valid until its grace ends), why a key was
revoked, each tenant's idle-key policy, and an index for each key's recent usage

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-27 11:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("previous_secret_hash", sa.String(length=128), nullable=True))
        batch.add_column(
            sa.Column("previous_valid_until", sa.DateTime(timezone=True), nullable=True)
        )
        batch.add_column(sa.Column("rotated_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("revoked_reason", sa.String(length=500), nullable=True))
    with op.batch_alter_table("tenants") as batch:
        batch.add_column(
            sa.Column("key_policy", sa.JSON(), nullable=False, server_default=sa.text("'{}'"))
        )
    op.create_index("ix_usage_records_key_day", "usage_records", ["api_key_id", "day"])


def downgrade() -> None:
    op.drop_index("ix_usage_records_key_day", table_name="usage_records")
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("key_policy")
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("revoked_reason")
        batch.drop_column("rotated_at")
        batch.drop_column("previous_valid_until")
        batch.drop_column("previous_secret_hash")
