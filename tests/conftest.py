"""Shared fixtures: `database` runs a test on SQLite and on PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from gateway.settings import (
    AuthSettings,
    BackendSettings,
    DatabaseSettings,
    ServerSettings,
    Settings,
)
from tenants import Database
from tests.support.postgres import create_database, postgres_server


@pytest.fixture(scope="session")
def postgres() -> Iterator[str]:
    with postgres_server() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
async def database(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'ignara.db'}"
    else:
        url = await create_database(request.getfixturevalue("postgres"))
    db = Database(url)
    await db.migrate()
    try:
        yield db
    finally:
        await db.dispose()


ADMIN_KEY = "test-bootstrap-admin-key-0123456789"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """Gateway settings that keep every file of a test under its temp directory."""
    return Settings(
        server=ServerSettings(),
        database=DatabaseSettings(url=f"sqlite:///{tmp_path / 'gateway.db'}"),
        auth=AuthSettings(admin_key=ADMIN_KEY, pepper="test-pepper-0123456789abcdef"),
        backends=BackendSettings(local_root=str(tmp_path / "jobs")),
    )


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A Redis server for the session (``REDIS_URL``, or a throwaway redis-server)."""
    from tests.support.redis import redis_server

    with redis_server() as url:
        yield url
