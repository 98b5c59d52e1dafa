"""Fail closed: whatever goes wrong, `decide` denies with a reason and never raises."""

from __future__ import annotations

import asyncio
import math
import socket
import time
from collections.abc import Mapping

import pytest

from gateway.policy import (
    Decision,
    EmbeddedOpa,
    FailureKind,
    GolibEvaluator,
    OpaServer,
    PolicyLoadError,
)
from tests.policy.conftest import DATA, MakeEngine
from tests.policy.fake_opa_server import FakeOpaServer

AUTHZ = "ignara.authz.decision"
ALLOWED_INPUT = {
    "principal": {
        "id": "alice",
        "tenant": "acme",
        "roles": ["member"],
        "scopes": ["workloads:read"],
    },
    "action": "workloads.list",
    "resource": {"tenant": "acme"},
}

BROKEN = """
package ignara.broken

# Conflicting outputs for one input: an evaluation error at run time.
conflict := {"allow": true, "reasons": []} if input.a

conflict := {"allow": false, "reasons": ["b"]} if input.b

allow_not_bool := {"allow": "yes", "reasons": []}

reasons_missing := {"allow": true}

reasons_not_strings := {"allow": false, "reasons": [1, 2]}

reasons_a_string := {"allow": false, "reasons": "nope"}

just_true := true

silent_deny := {"allow": false, "reasons": []}

only_if_asked := {"allow": true, "reasons": []} if input.ask
"""


@pytest.fixture
async def broken(make_engine: MakeEngine, policies: dict[str, str]) -> EmbeddedOpa | OpaServer:
    engine = make_engine()
    await engine.load({**policies, "broken.rego": BROKEN}, DATA)
    assert isinstance(engine, EmbeddedOpa | OpaServer)
    return engine


def assert_fail_closed(decision: Decision, failure: FailureKind, *fragments: str) -> None:
    assert decision.allow is False
    assert decision.failure is failure
    assert len(decision.reasons) == 1
    assert decision.reasons[0].endswith("; denying by default")
    for fragment in fragments:
        assert fragment in decision.reasons[0]


@pytest.mark.parametrize("path", ["ignara.broken.only_if_asked", "ignara.nowhere.decision"])
async def test_undefined_decision_is_a_deny(broken: EmbeddedOpa | OpaServer, path: str) -> None:
    decision = await broken.decide(path, {"ask": False})
    assert_fail_closed(decision, FailureKind.UNDEFINED, f"policy decision {path} is undefined")


async def test_runtime_error_is_a_deny(broken: EmbeddedOpa | OpaServer) -> None:
    decision = await broken.decide("ignara.broken.conflict", {"a": True, "b": True})
    assert_fail_closed(decision, FailureKind.ERROR, "policy decision ignara.broken.conflict failed")
    # the same rule still answers when it does not conflict
    assert await broken.decide("ignara.broken.conflict", {"a": True}) == Decision(True)


@pytest.mark.parametrize(
    ("rule", "problem"),
    [
        ("allow_not_bool", '"allow" must be a boolean, got a string'),
        ("reasons_missing", '"reasons" must be an array of strings, got null'),
        ("reasons_not_strings", '"reasons" must be an array of strings'),
        ("reasons_a_string", '"reasons" must be an array of strings, got a string'),
        ("just_true", "expected an object, got a boolean"),
    ],
)
async def test_malformed_result_is_a_deny(
    broken: EmbeddedOpa | OpaServer, rule: str, problem: str
) -> None:
    decision = await broken.decide(f"ignara.broken.{rule}", {})
    assert_fail_closed(decision, FailureKind.MALFORMED, problem)


async def test_policy_deny_without_reasons_gets_one(broken: EmbeddedOpa | OpaServer) -> None:
    decision = await broken.decide("ignara.broken.silent_deny", {})
    assert decision == Decision(
        False, ("policy decision ignara.broken.silent_deny denied without giving a reason",)
    )


@pytest.mark.parametrize(
    "path", ["", "ignara..authz", "ignara.authz.decision; true", "ignara/authz/../x", "a-b.c"]
)
async def test_bad_path_is_a_deny(broken: EmbeddedOpa | OpaServer, path: str) -> None:
    decision = await broken.decide(path, ALLOWED_INPUT)
    assert_fail_closed(decision, FailureKind.INVALID_REQUEST, "is not a dotted or slashed")


@pytest.mark.parametrize("value", [object(), math.nan, {1, 2}])
async def test_input_that_is_not_json_is_a_deny(
    broken: EmbeddedOpa | OpaServer, value: object
) -> None:
    decision = await broken.decide(AUTHZ, {**ALLOWED_INPUT, "extra": value})
    assert_fail_closed(decision, FailureKind.INVALID_REQUEST, "not a JSON object")


async def test_nothing_loaded_is_a_deny(make_engine: MakeEngine) -> None:
    engine = make_engine()
    assert not await engine.ready()
    decision = await engine.decide(AUTHZ, ALLOWED_INPUT)
    assert_fail_closed(decision, FailureKind.NOT_LOADED, "no policies are loaded")


async def test_closed_engine_denies(make_engine: MakeEngine, policies: dict[str, str]) -> None:
    engine = make_engine()
    await engine.load(policies, DATA)
    assert (await engine.decide(AUTHZ, ALLOWED_INPUT)).allow
    await engine.close()
    assert_fail_closed(await engine.decide(AUTHZ, ALLOWED_INPUT), FailureKind.NOT_LOADED)


@pytest.mark.parametrize(
    ("source", "error"),
    [
        ("package ignara.bad\n\nallow { true }\n", "`if` keyword is required"),
        ("package ignara.bad\n\nallow if no_such_function(1)\n", "undefined function"),
    ],
)
async def test_bad_policy_is_refused_and_the_old_ones_stay(
    make_engine: MakeEngine, policies: dict[str, str], source: str, error: str
) -> None:
    engine = make_engine()
    await engine.load(policies, DATA)
    with pytest.raises(PolicyLoadError, match=error):
        await engine.load({**policies, "bad.rego": source}, DATA)
    assert (await engine.decide(AUTHZ, ALLOWED_INPUT)).allow


async def test_data_replaces_data(make_engine: MakeEngine, policies: dict[str, str]) -> None:
    engine = make_engine()
    await engine.load(policies, DATA)
    await engine.load(policies, {"ignara": {"tenants": {"acme": {"suspended": True}}}})
    decision = await engine.decide(AUTHZ, ALLOWED_INPUT)
    assert decision == Decision(False, ('tenant "acme" is suspended',))


# --- the OPA server backend: unreachable and slow servers --------------------------


def _unused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


async def test_load_from_an_unreachable_server_fails_in_time(policies: dict[str, str]) -> None:
    engine = OpaServer(f"http://127.0.0.1:{_unused_port()}", startup_timeout=0.5, retries=0)
    started = time.monotonic()
    try:
        with pytest.raises(PolicyLoadError, match=r"OPA server at http://127\.0\.0\.1"):
            await engine.load(policies, DATA)
        assert time.monotonic() - started < 3
        assert_fail_closed(await engine.decide(AUTHZ, ALLOWED_INPUT), FailureKind.NOT_LOADED)
    finally:
        await engine.close()


@pytest.mark.parametrize("retries", [0, 1])
async def test_server_gone_after_load_is_a_deny(policies: dict[str, str], retries: int) -> None:
    with FakeOpaServer() as fake:
        engine = OpaServer(fake.url, timeout=2.0, retries=retries)
        await engine.load(policies, DATA)
        assert (await engine.decide(AUTHZ, ALLOWED_INPUT)).allow
    try:
        decision = await engine.decide(AUTHZ, ALLOWED_INPUT)
        assert_fail_closed(decision, FailureKind.UNAVAILABLE, "could not be asked (unreachable)")
    finally:
        await engine.close()


async def test_slow_server_is_a_deny_within_the_timeout(policies: dict[str, str]) -> None:
    with FakeOpaServer() as fake:
        # The answer that comes back must come within the timeout on a loaded machine
        # too: 1 s, against a server that holds its answer 3 s.
        engine = OpaServer(fake.url, timeout=1.0, retries=0)
        try:
            await engine.load(policies, DATA)
            fake.delay = 3.0
            started = time.monotonic()
            decision = await engine.decide(AUTHZ, ALLOWED_INPUT)
            elapsed = time.monotonic() - started
            assert_fail_closed(decision, FailureKind.TIMEOUT, "took longer than 1s")
            assert elapsed < 2.5
            assert fake.queries >= 1
            fake.delay = 0.0
            assert (await engine.decide(AUTHZ, ALLOWED_INPUT)).allow
        finally:
            await engine.close()


async def test_server_keeps_exactly_the_loaded_modules(policies: dict[str, str]) -> None:
    with FakeOpaServer() as fake:
        engine = OpaServer(fake.url, timeout=2.0, retries=0)
        try:
            await engine.load({**policies, "broken.rego": BROKEN}, DATA)
            assert fake.policy_ids == sorted([*policies, "broken.rego"])
            await engine.load(policies, DATA)
            assert fake.policy_ids == sorted(policies)
            await engine.run_tests({"t_test.rego": "package t_test\n\ntest_a if true\n"})
            assert fake.policy_ids == sorted(policies)
        finally:
            await engine.close()


async def test_opa_url_must_be_plain() -> None:
    for url in ["opa:8181", "ftp://opa", "http://opa:8181/v1", "http://opa:8181/?x=1"]:
        with pytest.raises(ValueError, match="OPA URL"):
            OpaServer(url)


# --- the embedded backend: a slow evaluation --------------------------------------


class _SlowEvaluator(GolibEvaluator):
    def evaluate(self, ref: str, input: Mapping[str, object] | None) -> object:
        time.sleep(0.5)
        return super().evaluate(ref, input)


async def test_slow_embedded_evaluation_is_a_deny_within_the_timeout(
    policies: dict[str, str],
) -> None:
    engine = EmbeddedOpa(timeout=0.1, evaluator_factory=_SlowEvaluator)
    try:
        await engine.load(policies, DATA)
        started = time.monotonic()
        decision = await engine.decide(AUTHZ, ALLOWED_INPUT)
        assert time.monotonic() - started < 0.4
        assert_fail_closed(decision, FailureKind.TIMEOUT, "took longer than 0.1s")
    finally:
        await engine.close()


async def test_concurrent_decisions_all_answer(
    make_engine: MakeEngine, policies: dict[str, str]
) -> None:
    engine = make_engine()
    await engine.load(policies, DATA)
    async with asyncio.timeout(10):
        decisions = await asyncio.gather(*(engine.decide(AUTHZ, ALLOWED_INPUT) for _ in range(50)))
    assert all(decision == Decision(True) for decision in decisions)
