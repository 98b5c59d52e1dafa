"""Times every policy decision the gateway asks for (cached ones are not asked)."""

from __future__ import annotations

import time
from collections.abc import Mapping

from prometheus_client import Histogram

from gateway.policy import Decision, PolicyEngine
from gateway.policy.rego_tests import RegoTestResult

__all__ = ["TimedPolicy"]


class TimedPolicy:
    """``engine``, its decisions timed into ``histogram`` by decision path."""

    def __init__(self, engine: PolicyEngine, histogram: Histogram) -> None:
        self.engine = engine
        self._histogram = histogram
        self._children: dict[str, Histogram] = {}

    async def load(self, policies: Mapping[str, str], data: Mapping[str, object]) -> None:
        await self.engine.load(policies, data)

    async def decide(self, path: str, input: Mapping[str, object]) -> Decision:
        began = time.perf_counter()
        try:
            return await self.engine.decide(path, input)
        finally:
            child = self._children.get(path)
            if child is None:
                # The paths are the gateway's own constants: a bounded label.
                child = self._children[path] = self._histogram.labels(path.replace("/", "."))
            child.observe(time.perf_counter() - began)

    async def run_tests(self, tests: Mapping[str, str]) -> list[RegoTestResult]:
        return await self.engine.run_tests(tests)

    async def ready(self) -> bool:
        return await self.engine.ready()

    async def close(self) -> None:
        await self.engine.close()
