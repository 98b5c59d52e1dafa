"""Every Rego `test_` rule in policies/rego passes on every backend."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from gateway.policy import (
    PolicyEngine,
    RegoOutcome,
    RegoTestResult,
    discover_tests,
    load_policies,
    load_tests,
)
from tests.policy.conftest import BACKENDS, DATA, POLICY_DIR, MakeEngine, new_engine
from tests.policy.fake_opa_server import FakeOpaServer

REGO_TESTS = discover_tests(load_tests(POLICY_DIR))


async def _run_suite(backend: str) -> dict[str, RegoTestResult]:
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(FakeOpaServer()).url if backend == "server" else None
        engine: PolicyEngine = new_engine(backend, url)
        try:
            await engine.load(load_policies(POLICY_DIR), DATA)
            async with asyncio.timeout(20):
                results = await engine.run_tests(load_tests(POLICY_DIR))
        finally:
            await engine.close()
    return {result.test.ref: result for result in results}


@pytest.fixture(scope="module")
def suite_results() -> dict[str, dict[str, RegoTestResult]]:
    """The whole suite, run once per backend (each in its own event loop)."""
    return {backend: asyncio.run(_run_suite(backend)) for backend in BACKENDS}


def test_the_suite_is_substantial() -> None:
    packages = {test.package for test in REGO_TESTS}
    assert {"ignara.authz_test", "ignara.admission_test"} <= packages
    assert len(REGO_TESTS) >= 20


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("ref", [test.ref for test in REGO_TESTS])
def test_rego_rule_passes(
    suite_results: dict[str, dict[str, RegoTestResult]], backend: str, ref: str
) -> None:
    result = suite_results[backend][ref]
    assert result.outcome is RegoOutcome.PASSED, result.detail


def test_every_backend_ran_every_test(
    suite_results: dict[str, dict[str, RegoTestResult]],
) -> None:
    for results in suite_results.values():
        assert sorted(results) == sorted(test.ref for test in REGO_TESTS)


RUNNER_CHECK = """
package ignara.runner_check_test

test_passes if true

test_fails if 1 == 2

# Two outputs for one argument: an evaluation error, in OPA as in golib.
conflicting(x) := 1 if x > 0

conflicting(x) := 2 if x > 1

test_errs if conflicting(5) == 1

todo_test_later if false
"""


async def test_runner_reports_failures_errors_and_todos(
    make_engine: MakeEngine, policies: dict[str, str], backend: str
) -> None:
    engine = make_engine()
    await engine.load(policies, DATA)
    results = await engine.run_tests({"runner_check_test.rego": RUNNER_CHECK})
    outcomes = {result.test.name: result.outcome for result in results}
    assert outcomes == {
        "test_passes": RegoOutcome.PASSED,
        "test_fails": RegoOutcome.FAILED,
        "test_errs": RegoOutcome.ERROR,
        "todo_test_later": RegoOutcome.SKIPPED,
    }


async def test_test_modules_are_not_left_loaded(
    make_engine: MakeEngine, policies: dict[str, str]
) -> None:
    engine = make_engine()
    await engine.load(policies, DATA)
    await engine.run_tests(load_tests(POLICY_DIR))
    decision = await engine.decide("ignara.authz_test.test_member_submits_to_own_tenant", {})
    assert not decision.allow
