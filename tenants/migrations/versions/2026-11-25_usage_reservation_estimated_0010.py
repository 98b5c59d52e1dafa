"""usage records name their reservation and say whether they are estimated

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25 17:00:00.000000

``reservation``: the ledger reservation a record accounts for (unique: a call is
recorded once, however many gateways try to record it after a crash); NULL for
records written before this revision. ``estimated``: true when a gateway other than
the call's recorded it after the call's gateway died, from the last usage the call
had reported. An index on ``created_at`` serves the rebuild of a ledger's last minute.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("usage_records", schema=None) as batch_op:
        batch_op.add_column(sa.Column("reservation", sa.String(length=64), nullable=True))
        batch_op.add_column(
            sa.Column("estimated", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch_op.create_index("ux_usage_records_reservation", ["reservation"], unique=True)
        batch_op.create_index("ix_usage_records_created_at", ["created_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("usage_records", schema=None) as batch_op:
        batch_op.drop_index("ix_usage_records_created_at")
        batch_op.drop_index("ux_usage_records_reservation")
        batch_op.drop_column("estimated")
        batch_op.drop_column("reservation")
