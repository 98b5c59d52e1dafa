"""A gateway over real HTTP (in the test's event loop) in front of a fake OpenAI-style
upstream, two tenants with GPU and token quota, and a client that issues keys."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from gateway.app import create_app
from gateway.services import Services
from gateway.settings import InferenceSettings, Settings
from tests.conftest import ADMIN_KEY
from tests.support.fake_openai import FakeOpenAI
from tests.support.serve import serving

__all__ = ["ADMIN_KEY", "Api", "chat", "config", "running", "workload"]


def queue(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "resource_groups": [
            {
                "resources": ["nvidia.com/gpu"],
                "flavors": [{"name": "h100", "quotas": {"nvidia.com/gpu": {"nominal": 4}}}],
            },
            {
                "resources": ["tokens-per-minute", "requests-per-minute"],
                "flavors": [
                    {
                        "name": "llama",
                        "quotas": {
                            "tokens-per-minute": {"nominal": 100_000},
                            "requests-per-minute": {"nominal": 1000},
                        },
                    }
                ],
            },
        ],
    }


def config(
    upstream: str, alpha: list[str] | None = None, beta: list[str] | None = None
) -> dict[str, Any]:
    return {
        "flavors": ["h100", "llama"],
        "cluster_queues": [queue("team-a"), queue("team-b")],
        "tenants": [
            {"name": "alpha", "queues": ["team-a"] if alpha is None else alpha},
            {"name": "beta", "queues": ["team-b"] if beta is None else beta},
        ],
        "models": [
            {"name": "fake-model", "flavor": "llama", "endpoints": [{"base_url": upstream}]},
            {"name": "fake-embed", "flavor": "llama", "endpoints": [{"base_url": upstream}]},
        ],
    }


def workload(
    name: str = "train", queue: str = "team-a", gpus: int = 1, **job: Any
) -> dict[str, Any]:
    return {
        "name": name,
        "queue": queue,
        "pod_sets": [{"name": "w", "count": 1, "requests": {"nvidia.com/gpu": gpus}}],
        "max_runtime_seconds": 60,
        "job": {"command": ["/usr/bin/python3", "-c", "print('ok')"], **job},
    }


def chat(model: str = "fake-model") -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


@dataclasses.dataclass
class Api:
    http: httpx.AsyncClient
    services: Services

    async def call(
        self, token: str, method: str, path: str, body: Any = None, **headers: str
    ) -> httpx.Response:
        return await self.http.request(
            method, path, json=body, headers={"Authorization": f"Bearer {token}", **headers}
        )

    async def key(
        self,
        tenant: str | None,
        principal: str,
        roles: list[str] | None = None,
        scopes: list[str] | None = None,
        by: str = ADMIN_KEY,
    ) -> dict[str, Any]:
        """A new key's answer (its ``token`` included): of ``tenant``, or a platform key."""
        body: dict[str, Any] = {"principal": principal}
        if roles is not None:
            body["roles"] = roles
        if scopes is not None:
            body["scopes"] = scopes
        path = "/api/v1/admin/keys" if tenant is None else f"/api/v1/admin/tenants/{tenant}/keys"
        made = await self.call(by, "POST", path, body)
        assert made.status_code == 201, made.text
        answer: dict[str, Any] = made.json()
        return answer

    async def token(self, tenant: str | None, principal: str, **options: Any) -> str:
        token: str = (await self.key(tenant, principal, **options))["token"]
        return token


@asynccontextmanager
async def running(settings: Settings, upstream: FakeOpenAI) -> AsyncIterator[Api]:
    settings = dataclasses.replace(settings, inference=InferenceSettings(health_interval=3600))
    app = create_app(settings)
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        api = Api(http, app.state["services"])
        applied = await api.call(
            ADMIN_KEY, "POST", "/api/v1/admin/config", config(upstream.base_url)
        )
        assert applied.status_code == 201, applied.text
        yield api
