"""Two gateway processes on one PostgreSQL: a tenant deleted, a queue moved and a key
revoked through one are refused by the other within seconds, though it had the keys
and the decisions cached."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.gateway.access_harness import chat, config, workload
from tests.support.fake_openai import FakeOpenAI
from tests.support.gateways import gateway_processes
from tests.support.postgres import create_database

pytestmark = pytest.mark.integration

ADMIN = "two-gateways-tenants-admin-key-0123456789"
BOUND = 5.0  # seconds: the watcher looks every second


@pytest.fixture
def gateways(postgres: str, tmp_path: Path) -> Iterator[list[str]]:
    env = {
        "DATABASE_URL": asyncio.run(create_database(postgres)),
        "IGNARA_ADMIN_KEY": ADMIN,
        "IGNARA_KEY_PEPPER": "two-gateways-tenants-pepper-0123456789",
        "IGNARA_LOCAL_BACKEND_ROOT": str(tmp_path / "jobs"),
        "IGNARA_LOG_LEVEL": "warning",
        "IGNARA_HEALTH_INTERVAL": "3600",
    }
    with gateway_processes(("a", "b"), env, tmp_path) as processes:
        yield [url for url, _ in processes]


async def soon(probe: Callable[[], Awaitable[int]], wanted: set[int], bound: float = BOUND) -> int:
    """The probe's status once it is one of ``wanted``, or its last one after ``bound``
    seconds."""
    deadline = time.monotonic() + bound
    while True:
        status = await probe()
        if status in wanted or time.monotonic() > deadline:
            return status
        await asyncio.sleep(0.1)


async def test_the_other_replica_refuses_at_once(gateways: list[str]) -> None:
    a, b = gateways
    admin = {"Authorization": f"Bearer {ADMIN}"}
    async with FakeOpenAI() as upstream, httpx.AsyncClient(timeout=30) as http:

        async def call(
            url: str, token: str, method: str, path: str, body: object = None, **headers: str
        ) -> int:
            response = await http.request(
                method,
                f"{url}{path}",
                json=body,
                headers={"Authorization": f"Bearer {token}", **headers},
            )
            return response.status_code

        async def key(tenant: str, principal: str) -> str:
            made = await http.post(
                f"{a}/api/v1/admin/tenants/{tenant}/keys",
                json={"principal": principal},
                headers=admin,
            )
            assert made.status_code == 201, made.text
            token: str = made.json()["token"]
            return token

        applied = await http.post(
            f"{a}/api/v1/admin/config", json=config(upstream.base_url), headers=admin
        )
        assert applied.status_code == 201, applied.text
        alpha, spare, beta = (
            await key("alpha", "bot"),
            await key("alpha", "spare"),
            await key("beta", "b-bot"),
        )
        through_a = {"X-Ignara-Queue": "team-a"}

        def alpha_chat() -> Awaitable[int]:
            return call(b, alpha, "POST", "/v1/chat/completions", chat(), **through_a)

        # b learns the config and the keys, and caches them and its decisions.
        assert await soon(alpha_chat, {200}) == 200
        assert await call(b, spare, "GET", "/api/v1/workloads") == 200

        # A key revoked through a.
        spare_id = spare.split("_")[2]
        revoked = await http.delete(
            f"{a}/api/v1/admin/tenants/alpha/keys/{spare_id}", headers=admin
        )
        assert revoked.status_code == 200
        assert await soon(lambda: call(b, spare, "GET", "/api/v1/workloads"), {401}) == 401

        # team-a moved from alpha to beta through a.
        moved = config(upstream.base_url, alpha=[], beta=["team-b", "team-a"])
        assert (
            await http.post(f"{a}/api/v1/admin/config", json=moved, headers=admin)
        ).status_code == 201
        assert await soon(alpha_chat, {403, 404}) in {403, 404}
        submit = await call(b, alpha, "POST", "/api/v1/workloads", workload())
        assert submit in {403, 404}
        assert await call(b, beta, "POST", "/v1/chat/completions", chat(), **through_a) == 200

        # alpha deleted through a.
        etag = (await http.get(f"{a}/api/v1/admin/tenants/alpha", headers=admin)).headers["etag"]
        deleted = await http.delete(
            f"{a}/api/v1/admin/tenants/alpha", headers={**admin, "If-Match": etag}
        )
        assert deleted.status_code == 200, deleted.text
        assert await soon(lambda: call(b, alpha, "GET", "/api/v1/workloads"), {401}) == 401
        assert await call(b, beta, "GET", "/api/v1/workloads") == 200
