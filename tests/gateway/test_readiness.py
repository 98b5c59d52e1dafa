"""`/readyz` asks the database, the token ledger's Redis and the policy engine for
real, and answers 503 naming whichever of them cannot answer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from gateway.app import create_app
from gateway.settings import DatabaseSettings, InferenceSettings, Settings
from tests.policy.fake_opa_server import FakeOpaServer
from tests.support.postgres import create_database
from tests.support.redis import unique_prefix
from tests.support.relay import Relay, relay
from tests.support.serve import serving

pytestmark = pytest.mark.integration


def _host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    return parts.hostname, parts.port


@pytest.fixture
async def relays(postgres: str, redis_url: str) -> AsyncIterator[tuple[Relay, Relay, str, str]]:
    database = await create_database(postgres)
    async with relay(*_host_port(database)) as pg, relay(*_host_port(redis_url)) as rd:
        name = urlsplit(database).path
        yield (
            pg,
            rd,
            f"postgresql://postgres@127.0.0.1:{pg.port}{name}",
            (f"redis://127.0.0.1:{rd.port}/0?socket_timeout=1"),
        )


async def _ready(client: httpx.AsyncClient) -> tuple[int, dict[str, Any]]:
    response = await client.get("/readyz")
    return response.status_code, response.json()


async def _until(client: httpx.AsyncClient, status: int) -> dict[str, Any]:
    """The first /readyz answer with ``status`` (a dependency may take a moment to be
    seen back), within ten seconds."""
    for _ in range(100):
        code, body = await _ready(client)
        if code == status:
            return body
        await asyncio.sleep(0.1)
    raise AssertionError(f"/readyz never answered {status}: {code} {body}")


async def test_readyz_names_the_dependency_that_does_not_answer(
    settings: Settings, relays: tuple[Relay, Relay, str, str]
) -> None:
    pg, rd, database_url, redis_url = relays
    with FakeOpaServer() as opa:
        app = create_app(
            replace(
                settings,
                database=DatabaseSettings(url=database_url),
                inference=InferenceSettings(redis_url=redis_url, ledger_prefix=unique_prefix()),
                policy=replace(settings.policy, opa_url=opa.url),
            )
        )
        async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
            code, body = await _ready(client)
            assert code == 200, body
            assert body["checks"] == {"database": "ok", "ledger": "ok", "policy": "ok"}

            await rd.stop()
            body = await _until(client, 503)
            assert body["status"] == "not ready"
            assert body["checks"]["ledger"] != "ok"
            assert body["checks"]["database"] == body["checks"]["policy"] == "ok"
            assert body["error"]["code"] == "not_ready"
            assert body["error"]["message"].startswith("not ready: ledger: ")
            await rd.start()
            await _until(client, 200)

            await pg.stop()
            body = await _until(client, 503)
            assert body["checks"]["database"] != "ok" and body["checks"]["ledger"] == "ok"
            assert "database: " in body["error"]["message"]
            await pg.start()
            await _until(client, 200)

            opa.stop()
            body = await _until(client, 503)
            assert body["checks"]["policy"].startswith("unreachable: ")
            assert body["checks"]["database"] == body["checks"]["ledger"] == "ok"
