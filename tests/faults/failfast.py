"""A gateway over real HTTP for the fail-fast fault tests: one tenant with token quota,
one model on a local OpenAI-compatible upstream, and keys made through the admin API."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx

from gateway.app import create_app
from gateway.services import Services
from gateway.settings import AuthSettings, InferenceSettings, Settings
from tests.conftest import ADMIN_KEY
from tests.support.fake_openai import FakeOpenAI
from tests.support.redis import unique_prefix
from tests.support.serve import serving

__all__ = ["CHAT", "FailfastGateway", "assert_unavailable", "failfast_gateway", "until"]

CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}

# What a client waits at most for any answer here: today a frozen Redis holds a call
# for ever, so a hang fails the test by this timeout (generous for a loaded machine).
CLIENT_TIMEOUT = 3.0


def _config(upstream: str) -> dict[str, Any]:
    quotas = {
        "tokens-per-minute": {"nominal": 10_000_000, "borrowing_limit": 0},
        "requests-per-minute": {"nominal": 1_000_000, "borrowing_limit": 0},
    }
    return {
        "flavors": ["llama", "h100"],
        "cohorts": [{"name": "org"}],
        "cluster_queues": [
            {
                "name": "team-a",
                "cohort": "org",
                "resource_groups": [
                    {
                        "resources": ["tokens-per-minute", "requests-per-minute"],
                        "flavors": [{"name": "llama", "quotas": quotas}],
                    },
                    {
                        "resources": ["nvidia.com/gpu"],
                        "flavors": [{"name": "h100", "quotas": {"nvidia.com/gpu": {"nominal": 4}}}],
                    },
                ],
            }
        ],
        "tenants": [{"name": "alpha", "queues": ["team-a"]}],
        "models": [
            {"name": "fake-model", "flavor": "llama", "endpoints": [{"base_url": upstream}]}
        ],
    }


@dataclasses.dataclass
class FailfastGateway:
    url: str
    services: Services
    http: httpx.AsyncClient
    keys: dict[str, str]
    upstream: FakeOpenAI

    def auth(self, key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys.get(key, key)}"}

    async def chat(self, key: str = "used") -> httpx.Response:
        return await self.http.post("/v1/chat/completions", json=CHAT, headers=self.auth(key))


@asynccontextmanager
async def failfast_gateway(
    settings: Settings, *, database_url: str, redis_url: str | None
) -> AsyncIterator[FailfastGateway]:
    """A gateway on ``database_url`` (and the Redis of ``redis_url``) with two keys of
    tenant alpha: ``used`` (one call made with it) and ``spare`` (never used)."""
    settings = dataclasses.replace(
        settings,
        database=dataclasses.replace(settings.database, url=database_url),
        # Production's bound: how long a request waits on a database that does not answer.
        auth=dataclasses.replace(settings.auth, key_lookup_timeout=AuthSettings.key_lookup_timeout),
        inference=InferenceSettings(
            redis_url=redis_url,
            ledger_prefix=unique_prefix("failfast"),
            first_byte_timeout=2.0,
            total_timeout=5.0,
            health_interval=3600,
        ),
    )
    app = create_app(settings)
    services: Services = app.state["services"]
    async with (
        FakeOpenAI() as upstream,
        serving(app) as url,
        httpx.AsyncClient(base_url=url, timeout=CLIENT_TIMEOUT) as http,
    ):
        admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
        applied = await http.post(
            "/api/v1/admin/config", json=_config(upstream.base_url), headers=admin
        )
        assert applied.status_code == 201, applied.text
        await services.reload_config()
        keys = {"admin": ADMIN_KEY}
        for name in ("used", "spare"):
            made = await http.post(
                "/api/v1/admin/tenants/alpha/keys",
                json={"principal": f"{name}-bot", "roles": ["member"]},
                headers=admin,
            )
            assert made.status_code == 201, made.text
            keys[name] = made.json()["token"]
        gateway = FailfastGateway(url, services, http, keys, upstream)
        first = await gateway.chat("used")
        assert first.status_code == 200, first.text
        await services.inference.drain()  # its accounting done before any fault
        yield gateway


def assert_unavailable(response: httpx.Response, code: str) -> dict[str, Any]:
    """A 503 in the one JSON error shape, naming what is down, with Retry-After."""
    assert response.status_code == 503, (response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/json"), response.headers
    assert response.headers["retry-after"].isdigit(), response.headers
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] == code, error
    assert error["type"] == "api_error", error
    assert "Traceback" not in response.text
    return error


async def until(
    attempt: Callable[[], Awaitable[httpx.Response]], status: int, *, within: float = 15.0
) -> httpx.Response:
    """The first answer with ``status``, trying again every 0.1 s for ``within`` seconds
    (a dependency that came back may take a moment to be seen back)."""
    deadline = time.monotonic() + within
    while True:
        try:
            response = await attempt()
        except httpx.TimeoutException:
            response = None
        if response is not None and response.status_code == status:
            return response
        if time.monotonic() > deadline:
            seen = "a timeout" if response is None else f"{response.status_code} {response.text}"
            raise AssertionError(f"never answered {status}; last: {seen}")
        await asyncio.sleep(0.1)
