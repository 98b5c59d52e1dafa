"""The outage log: an outage of many failed calls is a few lines (its start, a count
now and then, its end); and which errors mean the database is out of reach."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from gateway.auth.errors import DatabaseUnavailableError
from gateway.auth.store import CachedApiKeyStore, SqlApiKeyStore
from gateway.outages import Outage, database_unavailable
from tenants import Database
from tests.support.gateways import free_port


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_thousand_failed_calls_make_a_few_lines(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="gateway")
    clock = Clock()
    outage = Outage("redis", report_every=30, clock=clock)
    for n in range(1000):
        clock.now = 100.0 + n * 0.1  # a hundred seconds of refused calls
        outage.failed(ConnectionError("Connection refused"))
    assert outage.down and outage.failures == 1000
    outage.recovered()
    outage.recovered()  # nothing more: it is up
    assert not outage.down

    lines = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert lines[0] == (logging.ERROR, "redis down: ConnectionError: Connection refused")
    assert [level for level, _ in lines[1:-1]] == [logging.WARNING] * 3
    assert lines[1][1] == (
        "redis still down after 30 s: 301 calls failed so far "
        "(last: ConnectionError: Connection refused)"
    )
    assert lines[-1] == (logging.INFO, "redis back after 99.9 s: 1000 calls failed meanwhile")


def test_a_new_outage_after_the_end_of_one_is_told_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gateway")
    clock = Clock()
    outage = Outage("database", clock=clock)
    for _ in range(2):
        outage.failed(TimeoutError())
        outage.failed(TimeoutError())
        clock.now += 1.5
        outage.recovered()
    assert [r.getMessage() for r in caplog.records] == [
        "database down: TimeoutError",
        "database back after 1.5 s: 2 calls failed meanwhile",
    ] * 2


async def test_a_database_nobody_listens_for_is_unavailable() -> None:
    gone = Database(f"postgresql://postgres@127.0.0.1:{free_port()}/ignara")
    try:
        with pytest.raises(OSError) as refused:
            await gone.ping()
    finally:
        await gone.dispose()
    assert database_unavailable(refused.value)


async def test_a_bad_statement_or_an_unrelated_oserror_is_not_an_outage(tmp_path: Path) -> None:
    database = Database(f"sqlite:///{tmp_path / 'x.db'}")
    try:
        async with database.session() as session:
            await session.exec(text("CREATE TABLE t (id INTEGER PRIMARY KEY)"))
        with pytest.raises(IntegrityError) as duplicate:
            async with database.session() as session:
                await session.exec(text("INSERT INTO t VALUES (1), (1)"))
    finally:
        await database.dispose()
    assert not database_unavailable(duplicate.value)
    with pytest.raises(FileNotFoundError) as missing:
        (tmp_path / "nowhere").read_text()
    assert not database_unavailable(missing.value)
    assert not database_unavailable(RuntimeError("a bug"))


def test_a_call_begun_before_the_outage_does_not_end_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A call that started before the server went away may still finish well (on a
    connection the server was closing): that proves nothing about it being back."""
    caplog.set_level(logging.INFO, logger="gateway")
    clock = Clock()
    outage = Outage("database", clock=clock)
    early = outage.now()
    clock.now += 0.01
    outage.failed(ConnectionRefusedError())
    clock.now += 0.01
    outage.recovered(early)
    assert outage.down
    later = outage.now()
    clock.now += 0.5
    outage.recovered(later)
    assert not outage.down
    assert [r.getMessage() for r in caplog.records] == [
        "database down: ConnectionRefusedError",
        "database back after 0.5 s: 1 calls failed meanwhile",
    ]


async def test_many_callers_of_one_key_lookup_all_hear_the_database_is_down() -> None:
    """Callers that share one lookup get its error re-raised each: every one must be told
    "unavailable" (503), not the bare driver error (a 500), however many there are."""
    database = Database("postgresql://ignara@127.0.0.1:1/nothing-listens")
    store = CachedApiKeyStore(SqlApiKeyStore(database))
    try:
        results = await asyncio.gather(
            *(store.get("k" * 12) for _ in range(32)), return_exceptions=True
        )
    finally:
        await database.dispose()
    assert [type(r) for r in results] == [DatabaseUnavailableError] * 32, results
