"""One admission loop at a time: a PostgreSQL advisory lock held on its own
connection (released by the server the moment that connection dies), or for a
SQLite file an exclusive lock on a file beside it."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection

from tenants import Database

__all__ = ["LeaderLock"]

# Any fixed 64-bit key; it names "the admission loop" among advisory locks.
ADVISORY_KEY = 0x1A6A_AD11


class LeaderLock:
    def __init__(self, database: Database) -> None:
        self.database = database
        self._connection: AsyncConnection | None = None
        self._file: int | None = None

    @property
    def held(self) -> bool:
        return self._connection is not None or self._file is not None

    async def try_acquire(self) -> bool:
        """Take the lock if free; True if this process now leads (or already did)."""
        if self.held:
            return await self.still_held()
        url = make_url(self.database.url)
        if url.get_backend_name() == "sqlite":
            return self._lock_file(Path(url.database or "ignara.db"))
        connection = await self.database.engine.connect()
        got = (
            await connection.execute(
                text("SELECT pg_try_advisory_lock(:key)"), {"key": ADVISORY_KEY}
            )
        ).scalar_one()
        if got:
            self._connection = connection
            return True
        await connection.close()
        return False

    async def still_held(self) -> bool:
        """A lost connection means a lost lock: check before acting as leader. The
        error that lost it is raised after letting the lock go, so the caller knows
        the database is out of reach rather than that another process leads."""
        if self._file is not None:
            return True
        if self._connection is None:
            return False
        try:
            await self._connection.execute(text("SELECT 1"))
        except (SQLAlchemyError, OSError):
            await self.release()
            raise
        return True

    async def release(self) -> None:
        if self._connection is not None:
            connection, self._connection = self._connection, None
            # The lock lives and dies with this connection: if unlocking fails the
            # connection is broken, and closing it (or its loss) frees the lock.
            with contextlib.suppress(SQLAlchemyError, OSError):
                await connection.execute(
                    text("SELECT pg_advisory_unlock(:key)"), {"key": ADVISORY_KEY}
                )
            with contextlib.suppress(SQLAlchemyError, OSError):
                await connection.close()
        if self._file is not None:
            fd, self._file = self._file, None
            os.close(fd)  # closing drops the flock

    def _lock_file(self, database: Path) -> bool:
        fd = os.open(f"{database}.leader", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._file = fd
        return True
