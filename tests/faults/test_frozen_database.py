"""A PostgreSQL that is there but answers nothing (frozen, or a network that drops
packets) must not hold requests for the driver's minute: a request that needs the
database fails within the connect bound with a JSON 503, and admission goes on once it
answers again."""

from __future__ import annotations

import time
from urllib.parse import urlsplit

import pytest

from gateway.settings import Settings
from tenants.db import PG_CONNECT_TIMEOUT_SECONDS
from tests.faults.failfast import assert_unavailable, failfast_gateway, until
from tests.support.postgres import create_database
from tests.support.relay import relay

pytestmark = pytest.mark.integration


async def test_a_frozen_database_is_a_fast_json_503(
    settings: Settings, postgres: str, postgres_template: str
) -> None:
    database = urlsplit(await create_database(postgres, template=postgres_template))
    assert database.hostname is not None and database.port is not None
    async with relay(database.hostname, database.port) as pg:
        url = f"postgresql://postgres@127.0.0.1:{pg.port}{database.path}"
        async with failfast_gateway(settings, database_url=url, redis_url=None) as gateway:
            gateway.http.timeout = 30.0  # today the driver waits 60 s to connect
            workloads = gateway.auth("used")
            assert (await gateway.http.get("/api/v1/workloads", headers=workloads)).is_success
            pg.freeze()
            started = time.monotonic()
            frozen = await gateway.http.get("/api/v1/workloads", headers=workloads)
            waited = time.monotonic() - started
            assert_unavailable(frozen, "database_unavailable")
            assert waited < 3 * PG_CONNECT_TIMEOUT_SECONDS, waited
            pg.thaw()
            back = await until(
                lambda: gateway.http.get("/api/v1/workloads", headers=workloads), 200
            )
            assert back.json()["items"] == []
