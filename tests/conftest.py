"""Shared fixtures: `database` runs a test on SQLite and on PostgreSQL."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import pytest

from gateway.settings import (
    AuthSettings,
    BackendSettings,
    DatabaseSettings,
    PolicySettings,
    ServerSettings,
    Settings,
)
from tenants import Database
from tenants.db import migrate
from tests.support.gateways import TEST_KEY_LOOKUP_TIMEOUT, TEST_POLICY_TIMEOUT
from tests.support.postgres import create_database, postgres_server

T = TypeVar("T")


@pytest.fixture(scope="session")
def postgres() -> Iterator[str]:
    with postgres_server() as url:
        yield url


# Migrating a fresh database takes about 0.3 s (SQLite) and more on PostgreSQL; most
# tests start a gateway or a database, so each starts from a copy of one migrated
# once per session, and its own migrate() finds the schema at head.


# Both may first be asked for inside an async fixture, whose event loop is running:
# migrating (Alembic runs its own loop) happens on a thread of its own.


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "ignara.db"
    _on_a_thread(migrate, f"sqlite:///{path}")
    return path


@pytest.fixture(scope="session")
def postgres_template(postgres: str) -> str:
    """The name of a database on the test server migrated to head (a template)."""

    def make() -> str:
        url = asyncio.run(create_database(postgres))
        migrate(url)
        return url

    return _on_a_thread(make).rsplit("/", 1)[1]


def _on_a_thread(fn: Callable[..., T], *args: object) -> T:
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(fn, *args).result()


def fresh_sqlite(template: Path, path: Path) -> str:
    """A copy of the migrated template at ``path``, private like the gateway's own."""
    shutil.copyfile(template, path)
    path.chmod(0o600)
    return f"sqlite:///{path}"


@pytest.fixture(params=["sqlite", "postgresql"])
async def database(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    if request.param == "sqlite":
        url = fresh_sqlite(request.getfixturevalue("sqlite_template"), tmp_path / "ignara.db")
    else:
        url = await create_database(
            request.getfixturevalue("postgres"),
            template=request.getfixturevalue("postgres_template"),
        )
    db = Database(url)
    await db.migrate()
    try:
        yield db
    finally:
        await db.dispose()


ADMIN_KEY = "test-bootstrap-admin-key-0123456789"


@pytest.fixture
def settings(tmp_path: Path, sqlite_template: Path) -> Settings:
    """Gateway settings that keep every file of a test under its temp directory."""
    return Settings(
        server=ServerSettings(),
        database=DatabaseSettings(url=fresh_sqlite(sqlite_template, tmp_path / "gateway.db")),
        auth=AuthSettings(
            admin_key=ADMIN_KEY,
            pepper="test-pepper-0123456789abcdef",
            key_lookup_timeout=TEST_KEY_LOOKUP_TIMEOUT,
        ),
        backends=BackendSettings(local_root=str(tmp_path / "jobs")),
        policy=PolicySettings(timeout_seconds=TEST_POLICY_TIMEOUT),
    )


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A Redis server for the session (``REDIS_URL``, or a throwaway redis-server)."""
    from tests.support.redis import redis_server

    with redis_server() as url:
        yield url
