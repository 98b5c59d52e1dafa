"""PostgreSQL stopped under a running gateway: keys verified before keep working for
inference (from the bounded stale cache), a key never seen is a JSON 503 (it may be
valid: not a 401, and never a plain-text 500), every route that needs the database
answers a JSON 503 with Retry-After, and everything works again once it is back."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator, Iterator

import pytest

from gateway.settings import Settings
from tests.faults.failfast import FailfastGateway, assert_unavailable, failfast_gateway, until
from tests.support.faults import OwnedPostgres

pytestmark = pytest.mark.integration

GANG = {
    "name": "train",
    "queue": "team-a",
    "pod_sets": [{"name": "workers", "count": 1, "requests": {"nvidia.com/gpu": 1}}],
    "max_runtime_seconds": 60,
    "job": {"command": ["/usr/bin/python3", "-c", "print('done')"]},
}
# A well-formed key of an id no database ever held.
UNKNOWN_KEY = "ign_live_0123456789ab_" + "A" * 43


@pytest.fixture
def owned_postgres() -> Iterator[tuple[OwnedPostgres, str]]:
    with OwnedPostgres() as server:
        yield server, server.database_url("ignara")


@pytest.fixture
async def gateway(
    settings: Settings, owned_postgres: tuple[OwnedPostgres, str], redis_url: str
) -> AsyncIterator[FailfastGateway]:
    # A short key cache, so that the test need not wait 5 s for entries to expire.
    settings = dataclasses.replace(
        settings, auth=dataclasses.replace(settings.auth, key_cache_seconds=0.2)
    )
    _, url = owned_postgres
    async with failfast_gateway(settings, database_url=url, redis_url=redis_url) as gateway:
        yield gateway


async def test_while_postgres_is_down_known_keys_still_call_models_and_the_rest_is_a_json_503(
    gateway: FailfastGateway,
    owned_postgres: tuple[OwnedPostgres, str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    server, _ = owned_postgres
    caplog.set_level(logging.INFO, logger="gateway")
    await asyncio.to_thread(server.stop)
    await asyncio.sleep(0.5)  # past the key cache's freshness: every lookup asks the database

    for _ in range(3):
        answer = await gateway.chat("used")
        assert answer.status_code == 200, answer.text
    models = await gateway.http.get("/v1/models", headers=gateway.auth("used"))
    assert models.status_code == 200, models.text
    for key in ("spare", UNKNOWN_KEY):
        error = assert_unavailable(await gateway.chat(key), "database_unavailable")
        assert "database" in error["message"]
        for path in ("/v1/models", "/api/v1/workloads"):
            assert_unavailable(
                await gateway.http.get(path, headers=gateway.auth(key)), "database_unavailable"
            )

    used = gateway.auth("used")
    admin = gateway.auth("admin")
    for response in (
        await gateway.http.post("/api/v1/workloads", json=GANG, headers=used),
        await gateway.http.get("/api/v1/workloads", headers=used),
        await gateway.http.get(f"/api/v1/workloads/{'0' * 32}", headers=used),
        await gateway.http.get(f"/api/v1/workloads/{'0' * 32}/logs", headers=used),
        await gateway.http.delete(f"/api/v1/workloads/{'0' * 32}", headers=used),
        await gateway.http.get("/api/v1/usage", headers=used),
        await gateway.http.get("/api/v1/admin/tenants", headers=admin),
        await gateway.http.get("/api/v1/admin/config", headers=admin),
        await gateway.http.get("/api/v1/admin/models", headers=admin),
        await gateway.http.get("/api/v1/admin/keys", headers=admin),
        await gateway.http.post(
            "/api/v1/admin/tenants/alpha/keys", json={"principal": "x"}, headers=admin
        ),
    ):
        assert_unavailable(response, "database_unavailable")

    await asyncio.to_thread(server.start)
    await until(lambda: gateway.chat("spare"), 200)
    created = await gateway.http.post("/api/v1/workloads", json=GANG, headers=used)
    assert created.status_code == 201, created.text
    listed = await gateway.http.get("/api/v1/workloads", headers=used)
    assert listed.status_code == 200 and len(listed.json()["items"]) == 1, listed.text
    unknown = await gateway.chat(UNKNOWN_KEY)
    assert unknown.status_code == 401, unknown.text

    messages = [r.getMessage() for r in caplog.records if r.name.startswith("gateway")]
    down = [m for m in messages if m.startswith("database down: ")]
    assert len(down) == 1, messages
    assert any(m.startswith("database back after ") for m in messages), messages
