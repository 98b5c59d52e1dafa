"""The database layer's own promises."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text

from tenants import Database


async def test_a_sqlite_file_is_written_ahead_and_synced_on_commit(tmp_path: Path) -> None:
    """WAL keeps readers off the writer's back; commits stay durable (FULL = 2)."""
    db = Database(f"sqlite:///{tmp_path / 'gateway.db'}")
    try:
        async with db.session() as session:
            connection = await session.connection()
            mode = (await connection.execute(text("PRAGMA journal_mode"))).scalar_one()
            sync = (await connection.execute(text("PRAGMA synchronous"))).scalar_one()
        assert (mode, sync) == ("wal", 2)
    finally:
        await db.dispose()
