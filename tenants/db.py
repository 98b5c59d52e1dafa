"""Database URLs, engines and migrations. SQLite file by default, PostgreSQL when
the URL names it; both through SQLAlchemy's async drivers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import event, text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine
from sqlmodel.ext.asyncio.session import AsyncSession

__all__ = ["Database", "async_url", "migrate"]

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def async_url(url: str) -> str:
    """``postgresql://`` and ``sqlite:///`` URLs with the async driver named."""
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "postgresql":
        parsed = parsed.set(drivername="postgresql+asyncpg")
    elif backend == "sqlite":
        parsed = parsed.set(drivername="sqlite+aiosqlite")
    else:
        raise ValueError(f"unsupported database {backend!r}: use sqlite or postgresql")
    return parsed.render_as_string(hide_password=False)


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", async_url(url).replace("%", "%%"))
    return config


def migrate(url: str, revision: str = "head") -> None:
    """Bring the schema to ``revision`` (Alembic upgrade); safe to repeat."""
    command.upgrade(alembic_config(url), revision)


def _write_ahead_log(dbapi_connection: Any, _: Any) -> None:
    """SQLite in WAL mode: readers never wait for the writer (the admission loop, the
    usage writer and the admin API share one file), and a commit syncs one log append
    instead of a rollback journal and the database, still durable (synchronous FULL).
    In-memory databases keep their own mode."""
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.close()


# How long PostgreSQL may keep a caller waiting. asyncpg's own defaults (60 s to
# connect, no bound on a query) let a frozen or unreachable server hold every request
# for a minute; with these a request fails (503 database_unavailable) within seconds.
PG_CONNECT_TIMEOUT_SECONDS = 5.0
PG_COMMAND_TIMEOUT_SECONDS = 30.0  # the longest statement: an admission pass's read
POOL_TIMEOUT_SECONDS = 10.0  # waiting for a pooled connection


def _bounds(url: str) -> dict[str, Any]:
    if make_url(url).get_backend_name() != "postgresql":
        return {}
    return {
        "pool_timeout": POOL_TIMEOUT_SECONDS,
        "connect_args": {
            "timeout": PG_CONNECT_TIMEOUT_SECONDS,
            "command_timeout": PG_COMMAND_TIMEOUT_SECONDS,
        },
    }


class Database:
    """One engine and its session factory, made lazily: nothing connects on import."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._engine: AsyncEngine | None = None
        self._sessions: async_sessionmaker[AsyncSession] | None = None
        self._snapshots: async_sessionmaker[AsyncSession] | None = None

    @property
    def engine(self) -> AsyncEngine:
        if self._engine is None:
            self._engine = create_async_engine(
                async_url(self.url), pool_pre_ping=True, **_bounds(self.url)
            )
            if self._engine.dialect.name == "sqlite":
                event.listen(self._engine.sync_engine, "connect", _write_ahead_log)
            self._sessions = async_sessionmaker(
                self._engine, class_=AsyncSession, expire_on_commit=False
            )
            # Reads that must agree with each other (several tables, one moment).
            level = (
                "REPEATABLE READ" if self._engine.dialect.name == "postgresql" else "SERIALIZABLE"
            )
            self._snapshots = async_sessionmaker(
                self._engine.execution_options(isolation_level=level),
                class_=AsyncSession,
                expire_on_commit=False,
            )
        return self._engine

    @asynccontextmanager
    async def session(self) -> AsyncIterator[AsyncSession]:
        """A session whose transaction commits on success and rolls back on error."""
        self.engine  # noqa: B018 - makes the session factories
        assert self._sessions is not None
        async with self._sessions() as session, session.begin():
            yield session

    @asynccontextmanager
    async def snapshot(self) -> AsyncIterator[AsyncSession]:
        """A read transaction that sees the database at one moment: a change that
        commits meanwhile is either wholly seen or not at all."""
        engine = self.engine
        assert self._snapshots is not None
        async with self._snapshots() as session, session.begin():
            if engine.dialect.name == "sqlite":
                # SQLite's Python driver opens a transaction only before a write, so each
                # SELECT would see the latest commit; BEGIN makes the first read take a
                # snapshot (WAL) that the later ones share. Committed as usual at the end.
                await (await session.connection()).exec_driver_sql("BEGIN")
            yield session

    async def ping(self) -> None:
        """Run ``SELECT 1``: raises the driver's error when the database cannot answer."""
        async with self.engine.connect() as connection:
            await connection.execute(text("SELECT 1"))

    async def migrate(self) -> None:
        await asyncio.to_thread(migrate, self.url)

    async def dispose(self) -> None:
        if self._engine is not None:
            await self._engine.dispose()
            self._engine = None
