"""What a call's quota answers say, end to end through the gateway: estimates that
count every billed part (parallel calls with large tools cannot overrun a queue),
calls too large or that can never fit refused with a 400, a Retry-After that holds
when obeyed, headers that name their scope on every answer after admission, a
priority header checked on every call, and day budgets that survive a restart of a
gateway without Redis."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from aiohttp import web

from gateway.settings import Settings
from tests.inference.test_v1_api import CHAT, FIRST_BYTE_TIMEOUT, Gateway, running_gateway
from tests.support.fake_openai import FakeOpenAI

pytestmark = pytest.mark.integration


class GatedOpenAI(FakeOpenAI):
    """Holds every inference call at the door while ``gate`` is closed."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.gate = asyncio.Event()
        self.gate.set()
        self.arrived = 0

    async def _prelude(self, request: web.Request) -> tuple[dict[str, Any], web.Response | None]:
        self.arrived += 1
        await self.gate.wait()
        return await super()._prelude(request)


class Clock:
    """The ledger's time in a test: it moves only when told."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def upstream() -> AsyncIterator[GatedOpenAI]:
    async with GatedOpenAI(models=("fake-model", "fake-embed"), completion_tokens=5) as fake:
        yield fake


@pytest.fixture(params=["memory", "redis"])
async def gateway(
    request: pytest.FixtureRequest, settings: Settings, upstream: GatedOpenAI
) -> AsyncIterator[Gateway]:
    redis_url = request.getfixturevalue("redis_url") if request.param == "redis" else None
    async with running_gateway(settings, upstream, redis_url) as gateway:
        yield gateway


def tools(chars: int) -> list[dict[str, Any]]:
    schema = {"type": "object", "properties": {"q": {"type": "string", "description": "x" * chars}}}
    return [{"type": "function", "function": {"name": "lookup", "parameters": schema}}]


async def post(
    gateway: Gateway, tenant: str, body: dict[str, Any], **headers: str
) -> httpx.Response:
    async with httpx.AsyncClient(base_url=gateway.url, timeout=10) as http:
        return await http.post(
            "/v1/chat/completions",
            json={"model": "fake-model", **body},
            headers={"Authorization": f"Bearer {gateway.keys[tenant]}", **headers},
        )


# -- 1: estimates ------------------------------------------------------------------------------


async def test_a_call_with_large_tools_reserves_in_proportion(gateway: Gateway) -> None:
    small = await post(gateway, "alpha", {"messages": CHAT, "max_tokens": 10})
    large = await post(
        gateway, "alpha", {"messages": CHAT, "max_tokens": 10, "tools": tools(12_000)}
    )
    assert small.status_code == large.status_code == 200
    # remaining is counted right after the reservation: 10,000 less this call's estimate
    # (the earlier call was reconciled to the 8 tokens it used by then)
    assert 10_000 - int(small.headers["x-ratelimit-remaining-tokens"]) < 40
    reserved = 10_000 - 8 - int(large.headers["x-ratelimit-remaining-tokens"])
    assert 3000 <= reserved < 3300


async def test_parallel_calls_with_large_tools_cannot_overrun_the_queue(
    gateway: Gateway,
) -> None:
    upstream = gateway.upstream
    assert isinstance(upstream, GatedOpenAI)
    upstream.gate.clear()  # admitted calls stay in flight: nothing is reconciled meanwhile
    body = {"messages": CHAT, "max_tokens": 10, "tools": tools(12_000)}  # ~3,030 tokens
    calls = [asyncio.create_task(post(gateway, "alpha", body)) for _ in range(8)]
    # every call is either held at the upstream or answered (only refusals can be)
    async with asyncio.timeout(10):
        while upstream.arrived + sum(call.done() for call in calls) < len(calls):
            await asyncio.sleep(0.01)
    assert upstream.arrived == 3  # 3 x ~3,030 of team-a's 10,000 tokens a minute
    upstream.gate.set()
    answers = await asyncio.gather(*calls)
    assert sorted(a.status_code for a in answers) == [200] * 3 + [429] * 5
    refused = next(a for a in answers if a.status_code == 429)
    assert refused.json()["error"]["ignara"]["resource"] == "tokens-per-minute"


# -- 1 and 3: calls refused before the quota ---------------------------------------------------


async def test_a_call_over_the_per_call_cap_is_a_400_saying_why(gateway: Gateway) -> None:
    # 9,000 tokens of tools: team-a could take it (10,000), but one call may take 8,000
    answer = await post(gateway, "alpha", {"messages": CHAT, "tools": tools(36_000)})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "call_too_large"
    assert "inference.max_call_tokens" in error["message"] and "8000" in error["message"]
    assert gateway.upstream.total_requests == 0
    assert await gateway.usage("team-a") == 0


async def test_a_call_that_can_never_fit_is_a_400_not_a_429(gateway: Gateway) -> None:
    answer = await post(gateway, "tight", {"messages": CHAT, "max_tokens": 100})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "exceeds_quota_limit"
    assert error["ignara"] == {
        "queue": "team-tight",
        "flavor": "llama",
        "resource": "tokens-per-minute",
        "limit": 60,
        "estimate": error["ignara"]["estimate"],
    }
    assert error["ignara"]["estimate"] > 100
    assert "team-tight" in error["message"] and "Lower max_tokens" in error["message"]
    assert "retry-after" not in answer.headers
    # max_tokens unset: the default (16) for each of 5 completions is what does not fit
    unset = await post(gateway, "tight", {"messages": CHAT, "n": 5})
    assert unset.status_code == 400
    assert "the default of 16" in unset.json()["error"]["message"]
    assert gateway.upstream.total_requests == 0


async def test_a_waiting_queue_does_not_hold_a_call_that_can_never_fit(gateway: Gateway) -> None:
    # team-wait (100 tokens a minute) makes refused calls wait up to 5 s: not this one
    answer = await post(gateway, "waiter", {"messages": CHAT, "max_tokens": 200})
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "exceeds_quota_limit"


# -- 2: Retry-After -----------------------------------------------------------------------------


async def test_a_client_that_waits_as_retry_after_says_is_admitted(gateway: Gateway) -> None:
    clock = Clock()
    gateway.services.inference.clock = clock
    # team-a, in the same cohort, holds the window's earliest reservation; it frees
    # nothing for team-tight, whose own limit binds (it may not borrow)
    assert (await post(gateway, "alpha", {"messages": CHAT, "max_tokens": 50})).status_code == 200
    clock.now += 5
    first = await post(gateway, "tight", {"messages": CHAT, "max_tokens": 40})
    assert first.status_code == 200  # reconciled to the 8 tokens it used
    await gateway.settled()
    clock.now += 5
    refused = await post(gateway, "tight", {"messages": CHAT, "max_tokens": 45})
    assert refused.status_code == 429
    wait = int(refused.headers["retry-after"])
    assert wait == 55  # team-tight's own reservation goes at +65 s, not team-a's at +60
    assert refused.headers["x-ratelimit-reset-tokens"] == "55s"
    clock.now += wait - 1
    assert (await post(gateway, "tight", {"messages": CHAT, "max_tokens": 45})).status_code == 429
    clock.now += 1
    admitted = await post(gateway, "tight", {"messages": CHAT, "max_tokens": 45})
    assert admitted.status_code == 200, admitted.text


# -- 5: headers ---------------------------------------------------------------------------------

SCOPE = {
    "x-ignara-ratelimit-scope": "cluster-queue team-a, with borrowing",
    "x-ignara-ratelimit-tokens-resource": "tokens-per-minute",
    "x-ratelimit-limit-tokens": "10000",
    "x-ignara-ratelimit-nominal-tokens": "10000",
    "x-ratelimit-limit-requests": "1000",
    "x-ignara-ratelimit-nominal-requests": "1000",
}


def scope_of(response: httpx.Response) -> dict[str, str]:
    return {name: response.headers.get(name, "") for name in SCOPE}


async def test_every_answer_after_admission_names_its_scope(gateway: Gateway) -> None:
    ok = await post(gateway, "alpha", {"messages": CHAT, "max_tokens": 10})
    assert scope_of(ok) == SCOPE
    assert ok.headers["x-ratelimit-reset-tokens"] == "1m0s"  # when all it holds has gone
    budget = await post(gateway, "saver", {"messages": CHAT, "max_tokens": 10})
    assert budget.headers["x-ignara-ratelimit-tokens-resource"] == "tokens-per-day"
    assert budget.headers["x-ratelimit-limit-tokens"] == "1000"
    assert "x-ratelimit-limit-requests" not in budget.headers  # team-budget has no such limit
    for knob, value, status in [("fail_status", 400, 400), ("fail_status", 500, 502)]:
        setattr(gateway.upstream, knob, value)
        failed = await post(gateway, "alpha", {"messages": CHAT, "max_tokens": 10})
        assert failed.status_code == status
        assert scope_of(failed) == SCOPE
        # what the failed call had reserved is counted as given back
        assert failed.headers["x-ratelimit-remaining-requests"] == "999"
    gateway.upstream.fail_status = None
    gateway.upstream.delay = 2 * FIRST_BYTE_TIMEOUT  # past the gateway's: a 504
    timed_out = await post(gateway, "alpha", {"messages": CHAT, "max_tokens": 10})
    assert timed_out.status_code == 504 and scope_of(timed_out) == SCOPE


# -- 6: priority --------------------------------------------------------------------------------


@pytest.mark.parametrize("priority", ["1001", "-1001", "99999999999", "high", ""])
async def test_a_priority_out_of_range_is_a_400_on_any_queue(
    gateway: Gateway, priority: str
) -> None:
    answer = await post(gateway, "alpha", {"messages": CHAT}, **{"X-Ignara-Priority": priority})
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "invalid_priority"
    assert gateway.upstream.total_requests == 0


async def test_a_priority_in_range_is_taken(gateway: Gateway) -> None:
    for priority in ("1000", "-1000", "0"):
        answer = await post(gateway, "alpha", {"messages": CHAT}, **{"X-Ignara-Priority": priority})
        assert answer.status_code == 200


# -- 4: budgets without Redis ---------------------------------------------------------------------


async def test_a_day_budget_survives_a_restart_without_redis(
    settings: Settings, upstream: GatedOpenAI
) -> None:
    async with running_gateway(settings, upstream, None) as first:
        for _ in range(3):
            answer = await post(first, "saver", {"messages": CHAT, "max_tokens": 50})
            assert answer.status_code == 200
        assert await first.usage("team-budget", "tokens-per-day") == 3 * 8
    # stopped gracefully: every usage record was written; a new process, the same database
    async with running_gateway(settings, upstream, None) as second:
        assert await second.usage("team-budget", "tokens-per-day") == 3 * 8
        answer = await post(second, "saver", {"messages": CHAT, "max_tokens": 50})
        assert answer.status_code == 200
        estimate = 50 + 12
        assert int(answer.headers["x-ratelimit-remaining-tokens"]) == 1000 - 3 * 8 - estimate
