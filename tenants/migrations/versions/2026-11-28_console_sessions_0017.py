"""the console's sessions and sign-in throttle in the database, shared by replicas

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-28 10:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "console_sessions",
        sa.Column("id_hash", sa.String(length=64), primary_key=True),
        sa.Column("csrf", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("key_id", sa.String(length=40), nullable=True),
        sa.Column("fingerprint", sa.String(length=64), nullable=True),
        sa.Column("tenant", sa.String(length=128), nullable=True),
        sa.Column("principal", sa.String(length=256), nullable=False),
        sa.Column("roles", sa.JSON(), nullable=False),
        sa.Column("scopes", sa.JSON(), nullable=False),
        sa.Column("sealed", sa.String(length=8192), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_console_sessions_kind", "console_sessions", ["kind"])
    op.create_index("ix_console_sessions_key_id", "console_sessions", ["key_id"])
    op.create_index("ix_console_sessions_seen_at", "console_sessions", ["seen_at"])
    op.create_index("ix_console_sessions_expires_at", "console_sessions", ["expires_at"])
    op.create_table(
        "console_sign_in_attempts",
        sa.Column("bucket", sa.String(length=64), primary_key=True),
        sa.Column("window_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("console_sign_in_attempts")
    op.drop_index("ix_console_sessions_expires_at", table_name="console_sessions")
    op.drop_index("ix_console_sessions_seen_at", table_name="console_sessions")
    op.drop_index("ix_console_sessions_key_id", table_name="console_sessions")
    op.drop_index("ix_console_sessions_kind", table_name="console_sessions")
    op.drop_table("console_sessions")
