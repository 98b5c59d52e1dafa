"""an API key's own token limits (tokens per minute, tokens per day), below its queue's

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-28 10:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("tokens_per_minute", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("tokens_per_day", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("tokens_per_day")
        batch.drop_column("tokens_per_minute")
