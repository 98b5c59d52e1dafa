"""Schemathesis against a live gateway: every operation of ``/schema/openapi.json``,
with an admin's key and a member's, valid and invalid input. No answer may be a 5xx,
and every answer must be one the document describes: its status, content type,
body and headers.

The gateway (SQLite, the in-process ledger, a fake OpenAI upstream configured as
models, so the ``/v1`` calls can succeed) runs in a thread of its own, with its own
event loop: schemathesis calls it synchronously. The run is bounded (a few examples
per operation, no shrinking) and derandomized, so it asks the same questions on
every run.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from gateway.settings import Settings
from tests.gateway.test_workload_api import workload
from tests.inference.test_v1_api import Gateway, running_gateway
from tests.support.fake_openai import FakeOpenAI

pytestmark = pytest.mark.integration

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]
EXAMPLES = 6  # per operation, key and mode
# Operations that change what the others read run last: a random config or model
# could remove the tenant or point a model at a host that is not there.
# Endless event streams: a generated call would read until its timeout. Their own
# tests read them as a client does (tests/admin/test_live.py).
STREAMS = frozenset({"StreamEvents"})
LAST = (
    "CreatePrincipal",
    "UpdatePrincipal",
    "DeletePrincipal",
    "CreateObject",
    "UpdateObject",
    "DeleteObject",
    "UpdateSettings",
    "CreateTenant",
    "UpdateTenant",
    "RevokeApiKey",
    "RevokePlatformKey",
    "DeleteModel",
    "PutModel",
    "ApplyConfig",
    "DeleteTenant",
)


@contextmanager
def gateway_in_a_thread(settings: Settings) -> Iterator[Gateway]:
    """The gateway of :func:`running_gateway`, served from another thread's loop."""
    ready: list[Gateway] = []
    failed: list[BaseException] = []
    started = threading.Event()
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()

    async def serve() -> None:
        try:
            async with (
                FakeOpenAI(models=("fake-model", "fake-embed"), completion_tokens=5) as upstream,
                running_gateway(settings, upstream, None) as gateway,
            ):
                ready.append(gateway)
                started.set()
                await stop.wait()
        except BaseException as err:  # noqa: BLE001 - handed to the test's thread
            failed.append(err)
            started.set()

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    started.wait(timeout=60)
    try:
        if failed:
            raise failed[0]
        assert ready, "the gateway did not start within 60 s"
        yield ready[0]
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=30)
        loop.close()


def explore(
    operation: Any, headers: dict[str, str], mode: schemathesis.GenerationMode, checks: list[Any]
) -> None:
    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def run(case: schemathesis.Case) -> None:
        case.call_and_validate(headers=headers, checks=checks, timeout=10)

    run()


CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}
GANG = workload(pod_sets=[{"name": "w", "count": 1, "requests": {}}])
# Valid calls, which random input rarely makes: (operation, who, the case's parts).
VALID: list[tuple[str, str, dict[str, Any]]] = [
    ("CreateChatCompletion", "member", {"body": CHAT}),
    ("CreateChatCompletion", "member", {"body": {**CHAT, "stream": True}}),
    ("CreateCompletion", "member", {"body": {"model": "fake-model", "prompt": "a b"}}),
    ("CreateEmbedding", "member", {"body": {"model": "fake-embed", "input": "a"}}),
    ("SubmitWorkload", "member", {"body": GANG}),
    ("ListWorkloads", "member", {"query": {"limit": 1}}),
    ("GetUsage", "member", {}),
    ("CreateApiKey", "admin", {"path_parameters": {"tenant": "alpha"}, "body": {"principal": "b"}}),
    ("ListObjects", "admin", {"path_parameters": {"kind": "cluster-queues"}}),
    ("GetTenant", "admin", {"path_parameters": {"tenant": "alpha"}}),
    ("ListAudit", "admin", {"query": {"limit": 5}}),
    ("CreateObject", "admin", {"path_parameters": {"kind": "cohorts"}, "body": {"name": "fuzz"}}),
]


def test_the_api_answers_as_its_openapi_document_says(settings: Settings) -> None:
    answered: set[str] = set()

    def record(_: Any, response: Any, case: schemathesis.Case) -> None:
        answered.add(case.operation.label)

    checks = [record, *CHECKS]
    failures: list[str] = []
    with gateway_in_a_thread(settings) as gateway:
        keys = {
            who: {"Authorization": f"Bearer {gateway.keys[tenant]}"}
            for who, tenant in (("member", "alpha"), ("admin", "admin"))
        }
        schema = schemathesis.openapi.from_url(f"{gateway.url}/schema/openapi.json")
        operations = {
            result.ok().definition.raw["operationId"]: result.ok()
            for result in schema.get_all_operations()
            if result.ok().definition.raw["operationId"] not in STREAMS
        }
        for operation_id, who, parts in VALID:
            case = operations[operation_id].Case(**parts)
            try:
                response = case.call_and_validate(headers=keys[who], checks=checks, timeout=10)
                assert response.status_code < 300, response.text
            except (Exception, BaseExceptionGroup) as err:  # noqa: BLE001 - all listed at the end
                failures.append(f"{operation_id} ({who}, valid): {err}")
        for operation_id in sorted(
            operations, key=lambda name: LAST.index(name) if name in LAST else -1
        ):
            for who in ("member", "admin"):
                for mode in schemathesis.GenerationMode:
                    try:
                        explore(operations[operation_id], keys[who], mode, checks)
                    except Unsatisfiable:  # no input to make invalid
                        assert mode is schemathesis.GenerationMode.NEGATIVE
                    except (Exception, BaseExceptionGroup) as err:  # noqa: BLE001 - as above
                        failures.append(f"{operation_id} ({who}, {mode.value}): {err}")
    assert not failures, "\n\n".join(failures)
    assert answered == {operation.label for operation in operations.values()}
