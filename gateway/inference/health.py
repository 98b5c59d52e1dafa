"""Active health checks: GET ``{base_url}/models`` on every endpoint, every ``interval``."""

from __future__ import annotations

import asyncio
import contextlib

from gateway.inference.registry import Endpoint, ModelRegistry
from gateway.inference.upstreams import UpstreamClient

__all__ = ["HealthChecker"]


class HealthChecker:
    """Marks endpoints healthy or unhealthy on ``client``; ``start``/``stop`` in the lifespan."""

    def __init__(
        self,
        registry: ModelRegistry,
        client: UpstreamClient,
        interval: float = 10.0,
        *,
        timeout: float = 2.0,
    ) -> None:
        self.registry = registry  # replaced when the config changes
        self._client = client
        self._interval = interval
        self._timeout = timeout
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def check_once(self) -> dict[str, bool]:
        """Probe every endpoint once, concurrently; returns base URL -> healthy."""
        endpoints: list[Endpoint] = self.registry.endpoints()
        results = await asyncio.gather(
            *(self._client.probe(endpoint, self._timeout) for endpoint in endpoints)
        )
        for endpoint, healthy in zip(endpoints, results, strict=True):
            self._client.mark(endpoint, healthy)
        return {
            endpoint.base_url: healthy for endpoint, healthy in zip(endpoints, results, strict=True)
        }

    async def start(self) -> None:
        """Run one check now (so the first calls see real health), then loop in the background."""
        if self.running:
            return
        await self.check_once()
        self._task = asyncio.create_task(self._loop(), name="inference-health-checker")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            await self.check_once()
