"""`EmbeddedOpa`: the default backend, OPA's Go engine inside the gateway process."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, TypeVar

from gateway.policy.checks import decision_ref, json_input
from gateway.policy.decision import Decision, FailureKind
from gateway.policy.errors import EvaluationError, PolicyLoadError, UndefinedDocumentError
from gateway.policy.failclosed import decide_fail_closed
from gateway.policy.golib import GolibEvaluator
from gateway.policy.rego_tests import RegoTestResult, discover_tests, run_rego_tests

__all__ = ["EmbeddedOpa", "RegoEvaluator"]

_log = logging.getLogger(__name__)
_T = TypeVar("_T")


class RegoEvaluator(Protocol):
    """A blocking Rego engine; `GolibEvaluator` is the real one."""

    def add_policy(self, module_id: str, source: str) -> None: ...

    def add_data(self, data: Mapping[str, object]) -> None: ...

    def check(self) -> None: ...

    def evaluate(self, ref: str, input: Mapping[str, object] | None) -> object: ...

    def close(self) -> None: ...


class EmbeddedOpa:
    """Policies evaluated in-process by a real OPA engine (see `golib`).

    Evaluations block, so they run on one worker thread, created on first use
    (one engine per process is enough: the engine serializes evaluations
    anyway). A decision not back within `timeout` seconds is a deny; the
    evaluation itself finishes in the background. `load` builds a new engine,
    checks that everything compiles, then swaps it in.

    The engine prepares a decision's query the first time it is asked, which costs
    tens of times an evaluation: `load` asks each of ``warm`` once, with an empty
    input and whatever the answer, before the new engine serves, so the first
    request after a start or a policy change does not pay it (nor time out on a
    busy machine and fail closed).

    Create it after worker processes fork (e.g. in the app's lifespan hook): the
    engine starts a Go runtime.
    """

    def __init__(
        self,
        *,
        timeout: float = 0.5,
        evaluator_factory: Callable[[], RegoEvaluator] = GolibEvaluator,
        warm: tuple[str, ...] = (),
    ) -> None:
        self._timeout = timeout
        self._factory = evaluator_factory
        self._warm = tuple(decision_ref(path) for path in warm)
        self._evaluator: RegoEvaluator | None = None
        self._policies: dict[str, str] = {}
        self._data: dict[str, object] = {}
        self._pool: ThreadPoolExecutor | None = None

    async def load(self, policies: Mapping[str, str], data: Mapping[str, object]) -> None:
        policies, data = dict(policies), _plain_data(data)
        fresh = await self._run(self._build, policies, data)
        await self._run(self._prepare, fresh)
        stale, self._evaluator = self._evaluator, fresh
        self._policies, self._data = policies, data
        if stale is not None:
            await self._run(stale.close)

    async def decide(self, path: str, input: Mapping[str, object]) -> Decision:
        try:
            ref = decision_ref(path)
            document = json_input(input)
        except ValueError as exc:
            return Decision.fail_closed(FailureKind.INVALID_REQUEST, str(exc))
        evaluator = self._evaluator
        if evaluator is None:
            return Decision.fail_closed(FailureKind.NOT_LOADED, "no policies are loaded")
        return await decide_fail_closed(
            ref, self._run(evaluator.evaluate, ref, document), self._timeout, "embedded OPA"
        )

    async def run_tests(self, tests: Mapping[str, str]) -> list[RegoTestResult]:
        modules = {**self._policies, **tests}
        evaluator = await self._run(self._build, modules, self._data)
        try:
            return await run_rego_tests(
                discover_tests(tests), lambda ref: self._run(evaluator.evaluate, ref, None)
            )
        finally:
            await self._run(evaluator.close)

    async def ready(self) -> bool:
        return self._evaluator is not None

    async def close(self) -> None:
        evaluator, self._evaluator = self._evaluator, None
        pool, self._pool = self._pool, None
        if pool is None:
            return
        if evaluator is not None:
            pool.submit(evaluator.close)  # after any evaluation still running
        pool.shutdown(wait=False)

    def _build(self, policies: Mapping[str, str], data: Mapping[str, object]) -> RegoEvaluator:
        evaluator = self._factory()
        try:
            for module_id, source in policies.items():
                evaluator.add_policy(module_id, source)
            if data:
                evaluator.add_data(data)
            evaluator.check()
        except PolicyLoadError:
            evaluator.close()
            raise
        return evaluator

    def _prepare(self, evaluator: RegoEvaluator) -> None:
        for ref in self._warm:
            # The query is prepared whatever an empty input gets: real inputs decide.
            with contextlib.suppress(EvaluationError, UndefinedDocumentError):
                evaluator.evaluate(ref, {})

    async def _run(self, fn: Callable[..., _T], *args: object) -> _T:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ignara-opa")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, fn, *args)


def _plain_data(data: Mapping[str, object]) -> dict[str, object]:
    try:
        return json_input(data)
    except ValueError as exc:
        raise PolicyLoadError(f"policy data is not a JSON object: {exc}") from exc
