"""Failed console sign-ins are limited per client address and per key: the counters
(in memory, in the database, in Redis) hold under concurrent guesses, a success takes
back only its own attempt, and over real HTTP a brute-force loop gets 429s with
Retry-After while another address still signs in."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from dataclasses import replace

import httpx
import pytest
from redis.asyncio import Redis

from gateway.app import create_app
from gateway.console.throttle import (
    MemoryThrottle,
    RedisThrottle,
    SignInThrottle,
    SqlThrottle,
    buckets_for,
)
from gateway.settings import ConsoleSettings, Settings
from tenants import Database
from tests.conftest import ADMIN_KEY
from tests.gateway.test_workload_api import CONFIG, bearer
from tests.support.serve import serving

A = buckets_for("10.0.0.1", None)
B = buckets_for("10.0.0.2", None)
KEYED = buckets_for("10.0.0.3", "abc123")
SAME_KEY = buckets_for("10.0.0.4", "abc123")


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["memory", "database", "redis"])
async def throttle(
    request: pytest.FixtureRequest, database: Database
) -> AsyncIterator[tuple[SignInThrottle, Clock | None]]:
    if request.param == "memory":
        clock = Clock()
        yield MemoryThrottle(limit=5, window=60, clock=clock), clock
    elif request.param == "database":
        clock = Clock()
        yield SqlThrottle(database, limit=5, window=60, clock=clock), clock
    else:  # played once per database parameter too: the same store each time
        redis = Redis.from_url(request.getfixturevalue("redis_url"))
        await redis.flushdb()
        limiter = RedisThrottle(redis, prefix="test", limit=5, window=1.0)
        try:
            yield limiter, None
        finally:
            await limiter.aclose()


async def test_five_tries_then_a_wait_for_that_bucket_only(
    throttle: tuple[SignInThrottle, Clock | None],
) -> None:
    limiter, clock = throttle
    assert [await limiter.attempt(A) for _ in range(5)] == [None] * 5
    wait = await limiter.attempt(A)
    assert wait is not None and 0 < wait <= limiter.window
    assert await limiter.attempt(B) is None  # another address is not held back
    # A success elsewhere takes back its own attempt only: A stays held back.
    await limiter.succeeded(B)
    assert await limiter.attempt(A) is not None
    if clock is not None:
        clock.now += limiter.window + 1
    else:
        await asyncio.sleep(limiter.window + 0.1)
    assert await limiter.attempt(A) is None  # a new window


async def test_a_key_is_held_back_from_every_address(
    throttle: tuple[SignInThrottle, Clock | None],
) -> None:
    limiter, _ = throttle
    for _ in range(5):
        assert await limiter.attempt(KEYED) is None
    assert await limiter.attempt(SAME_KEY) is not None  # the key's count, from elsewhere
    assert await limiter.attempt(buckets_for("10.0.0.4", None)) is None


async def test_successes_do_not_count(throttle: tuple[SignInThrottle, Clock | None]) -> None:
    limiter, _ = throttle
    for _ in range(20):
        assert await limiter.attempt(A) is None
        await limiter.succeeded(A)


async def test_concurrent_guesses_cannot_slip_past_the_count(
    throttle: tuple[SignInThrottle, Clock | None],
) -> None:
    limiter, _ = throttle
    answers = await asyncio.gather(*(limiter.attempt(A) for _ in range(30)))
    assert answers.count(None) == 5


async def _sign_in(client: httpx.AsyncClient, key: str) -> httpx.Response:
    form = await client.get("/console/login")
    match = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert match is not None
    return await client.post("/console/login", data={"csrf": match.group(1), "key": key})


def _client(url: str, address: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=url,
        transport=httpx.AsyncHTTPTransport(local_address=address),
        timeout=20,
        follow_redirects=True,
    )


@pytest.mark.parametrize("shared", ["database", "redis"])
async def test_a_brute_force_loop_is_held_back_and_others_still_sign_in(
    settings: Settings, shared: str, request: pytest.FixtureRequest
) -> None:
    console = ConsoleSettings(sign_in_failures=5, sign_in_window=60)
    settings = replace(settings, console=console)
    if shared == "redis":
        prefix = f"throttle-{id(request)}"
        settings = replace(
            settings,
            inference=replace(
                settings.inference,
                redis_url=request.getfixturevalue("redis_url"),
                ledger_prefix=prefix,
            ),
        )
    async with serving(create_app(settings)) as url:
        async with httpx.AsyncClient(base_url=url) as admin:
            answer = await admin.post(
                "/api/v1/admin/config", json=CONFIG, headers=bearer(ADMIN_KEY)
            )
            assert answer.status_code == 201, answer.text
        async with _client(url, "127.0.0.2") as attacker, _client(url, "127.0.0.3") as other:
            statuses = []
            for n in range(25):  # guessing the bootstrap key, and keys
                guess = f"guess-{n:04d}-of-the-admin-key" if n % 2 else f"ign_live_{n:012x}_x"
                answer = await _sign_in(attacker, guess)
                statuses.append(answer.status_code)
            assert statuses[:5] == [401] * 5 and set(statuses[5:]) == {429}
            assert 0 < int(answer.headers["retry-after"]) <= 60
            assert "Too many failed sign-ins" in answer.text
            assert 'data-testid="login-error"' in answer.text
            # Held back even with the right key, until the window ends ...
            assert (await _sign_in(attacker, ADMIN_KEY)).status_code == 429
            # ... while another address signs in, and its success frees no one.
            signed = await _sign_in(other, ADMIN_KEY)
            assert signed.status_code == 200 and "platform admin" in signed.text
            assert (await _sign_in(attacker, "one-more-guess-0000000")).status_code == 429
