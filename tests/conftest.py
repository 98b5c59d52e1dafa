"""Shared fixtures: `database` runs a test on SQLite and on PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

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
