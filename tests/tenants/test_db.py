"""The database layer's own promises."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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


async def test_a_snapshot_does_not_see_what_commits_while_it_reads(database: Database) -> None:
    """Two reads of one snapshot agree, whatever another session commits in between
    (on SQLite too, whose driver opens no transaction for a SELECT by itself)."""

    async def flavors(connection: Any) -> int:
        return int((await connection.execute(text("SELECT count(*) FROM flavors"))).scalar_one())

    async with database.snapshot() as snapshot:
        reader = await snapshot.connection()
        before = await flavors(reader)
        async with database.session() as writer:
            await (await writer.connection()).execute(
                text(
                    "INSERT INTO flavors (name, position, updated_at, version)"
                    " VALUES ('committed-meanwhile', 0, CURRENT_TIMESTAMP, 1)"
                )
            )
        assert await flavors(reader) == before
    async with database.snapshot() as later:
        assert await flavors(await later.connection()) == before + 1
