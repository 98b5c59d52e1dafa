"""Two gateway processes sharing one Redis token ledger under concurrent /v1 load
from several tenants, through both processes at once.

Cohort ``org`` (tokens-per-minute of flavor ``llama``; Kueue arithmetic, checked
against the in-process ledger below):

    borrower  nominal 1000, borrowing_limit 300  -> at most 1300
    third     nominal 1000, borrowing_limit 100  -> at most 1100
    lender    nominal 1000, lending_limit 400    -> 600 never lent; at most 600 + 3400
    greedy    nominal  500, no limits            -> at most the whole pool, 3400
    rival     nominal  500, no limits            -> at most the whole pool, 3400
    org       subtree quota 1000 + 1000 + 400 + 500 + 500 = 3400

Holds, sampled from the shared ledger throughout (usage includes in-flight
reservations): no queue ever holds more than it could ever get, and ``org`` never
more than its subtree quota. Phase A (borrower and third only; their caps sum to less
than the pool): every refusal is the queue's own borrowing limit, and each queue can
be filled to exactly nominal + borrowing limit and not one token past it. Phase B
(greedy and rival fight over the rest of the pool while borrower and third keep
calling): the lender's 600 non-lendable tokens are all granted once the pool is
full. At every quiet point the shared ledger grants exactly what the in-process
ledger says is available and refuses one token more; the cohort holds exactly what
its queues hold beyond their guaranteed parts. No call gets anything but 200 or 429.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.ledgers import Ledger, MemoryLedger, Refusal, create_ledger
from quota.config import parse_quota_config
from quota.model import QuotaConfig
from tests.support.fake_openai import FakeOpenAI
from tests.support.gateways import gateway_processes
from tests.support.postgres import create_database
from tests.support.redis import redis_server

pytestmark = pytest.mark.integration

ADMIN = "two-gateways-inference-admin-key-0123456789"
MODEL, FLAVOR = "fake-model", "llama"
LEDGER_PREFIX = "ignara"  # the gateways' default; the Redis server is this test's own
TPM, RPM = "tokens-per-minute", "requests-per-minute"
UPSTREAM_COMPLETION = 40  # the fake upstream writes at most this many tokens

QUEUES = {  # tenant -> (queue, tokens-per-minute quota)
    "borrower": ("borrower-queue", {"nominal": 1000, "borrowing_limit": 300}),
    "third": ("third-queue", {"nominal": 1000, "borrowing_limit": 100}),
    "lender": ("lender-queue", {"nominal": 1000, "lending_limit": 400}),
    "greedy": ("greedy-queue", {"nominal": 500}),
    "rival": ("rival-queue", {"nominal": 500}),
}
POOL = 3400  # org's subtree quota: everything but the lender's 600
NOMINAL = {"borrower": 1000, "third": 1000, "lender": 1000, "greedy": 500, "rival": 500}
GUARANTEED = {"borrower": 0, "third": 0, "lender": 600, "greedy": 0, "rival": 0}
LIMIT = {"borrower": 1300, "third": 1100, "lender": 600 + POOL, "greedy": POOL, "rival": POOL}

QUOTA = {
    "flavors": [FLAVOR],
    "cohorts": [{"name": "org"}],
    "cluster_queues": [
        {
            "name": queue,
            "cohort": "org",
            "resource_groups": [
                {
                    "resources": [TPM, RPM],
                    "flavors": [
                        {
                            "name": FLAVOR,
                            # requests never bind: the test is about tokens
                            "quotas": {TPM: tokens, RPM: {"nominal": 100_000}},
                        }
                    ],
                }
            ],
        }
        for queue, tokens in QUEUES.values()
    ],
}


def config(upstream: str) -> dict[str, Any]:
    return {
        **QUOTA,
        "tenants": [{"name": t, "queues": [q]} for t, (q, _) in QUEUES.items()],
        "models": [{"name": MODEL, "flavor": FLAVOR, "endpoints": [{"base_url": upstream}]}],
    }


def quota_config() -> QuotaConfig:
    return parse_quota_config(QUOTA)


# -- processes -------------------------------------------------------------------------------


@pytest.fixture
def own_redis(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A throwaway redis-server of this test's own, even when REDIS_URL names a shared
    one: nothing else may write under the gateways' ledger prefix."""
    monkeypatch.delenv("REDIS_URL", raising=False)
    with redis_server() as url:
        yield url


@pytest.fixture
def gateways(postgres: str, own_redis: str, tmp_path: Path) -> Iterator[list[str]]:
    env = {
        "DATABASE_URL": asyncio.run(create_database(postgres)),
        "REDIS_URL": own_redis,
        "IGNARA_LEDGER_PREFIX": LEDGER_PREFIX,
        "IGNARA_ADMIN_KEY": ADMIN,
        "IGNARA_KEY_PEPPER": "two-gateways-inference-pepper-0123456789",
        "IGNARA_LOCAL_BACKEND_ROOT": str(tmp_path / "jobs"),
        "IGNARA_LOG_LEVEL": "warning",
        "IGNARA_UPSTREAM_TIMEOUT": "10",
        "IGNARA_UPSTREAM_TOTAL_TIMEOUT": "20",
        "IGNARA_HEALTH_INTERVAL": "3600",
    }
    with gateway_processes(("a", "b"), env, tmp_path) as processes:
        yield [url for url, _ in processes]
        for _, process in processes:
            assert process.poll() is None, "a gateway died during the test"


# -- calls -----------------------------------------------------------------------------------


@dataclass
class Outcome:
    tenant: str
    status: int
    requested: int  # the gateway's estimate, what it reserved
    used: int = 0  # what the upstream reported (a granted call)
    error: dict[str, Any] | None = None  # the body's ``error`` of a refusal

    @property
    def refusal(self) -> dict[str, Any]:
        assert self.error is not None
        detail: dict[str, Any] = self.error["ignara"]
        return detail


@dataclass
class Load:
    """Calls through both gateways; every answer is kept."""

    http: httpx.AsyncClient
    urls: list[str]
    keys: dict[str, str]
    outcomes: list[Outcome] = field(default_factory=list)
    calls: int = 0

    async def load_call(self, tenant: str) -> Outcome:
        """A sizable call: estimate 40, 60 or 100 tokens; the upstream uses 40 or 50 of
        it (the rest is refunded on reconcile). Half of them stream."""
        n = self.calls
        self.calls += 1
        max_tokens = (30, 50, 90)[n % 3]
        return await self.call(tenant, n, words=10, max_tokens=max_tokens, stream=n % 2 == 0)

    async def exact(self, tenant: str, size: int, gateway: int) -> Outcome:
        """A call whose estimate is exactly what the upstream then reports: ``size``."""
        max_tokens = min(UPSTREAM_COMPLETION, size)
        return await self.call(tenant, gateway, words=size - max_tokens, max_tokens=max_tokens)

    async def call(
        self, tenant: str, gateway: int, *, words: int, max_tokens: int, stream: bool = False
    ) -> Outcome:
        # Words of three letters and a space: the estimate ceil(chars / 4) is the word
        # count, and the fake upstream counts prompt tokens as words.
        body = {
            "model": MODEL,
            "prompt": " ".join(["abc"] * words),
            "max_tokens": max_tokens,
            "stream": stream,
        }
        url = f"{self.urls[gateway % len(self.urls)]}/v1/completions"
        headers = {"Authorization": f"Bearer {self.keys[tenant]}"}
        async with self.http.stream("POST", url, json=body, headers=headers) as response:
            raw = await response.aread()
        outcome = Outcome(tenant, response.status_code, words + max_tokens)
        if response.status_code == 200:
            outcome.used = words + min(max_tokens, UPSTREAM_COMPLETION)
            if stream:
                assert raw.rstrip().endswith(b"data: [DONE]"), raw[-200:]
            else:
                assert response.json()["usage"]["total_tokens"] == outcome.used
            assert int(response.headers["x-ratelimit-limit-tokens"]) == LIMIT[tenant]
        else:
            assert response.status_code == 429, (response.status_code, raw[:500])
            outcome.error = response.json()["error"]
            assert outcome.error["code"] == "rate_limit_exceeded", outcome.error
            assert outcome.refusal["queue"] == QUEUES[tenant][0]
            assert outcome.refusal["requested"] == outcome.requested
        self.outcomes.append(outcome)
        return outcome


async def flood(
    jobs: Sequence[Callable[[], Awaitable[Outcome]]], concurrency: int
) -> list[Outcome]:
    gate = asyncio.Semaphore(concurrency)

    async def one(job: Callable[[], Awaitable[Outcome]]) -> Outcome:
        async with gate:
            return await job()

    return list(await asyncio.gather(*(one(job) for job in jobs)))


# -- the shared ledger, seen from the test process ------------------------------------------------


@dataclass
class Sampler:
    """Reads the shared ledger over and over while the load runs."""

    ledger: Ledger
    samples: int = 0
    peak: dict[str, int] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            held = await usages(self.ledger)
            for tenant, used in held.items():
                self.peak[tenant] = max(self.peak.get(tenant, 0), used)
                limit = POOL if tenant == "org" else LIMIT[tenant]
                if used > limit:
                    self.violations.append(f"{tenant} holds {used} > {limit}")
            self.samples += 1
            await asyncio.sleep(0.003)


async def usages(ledger: Ledger) -> dict[str, int]:
    """What each queue and the cohort hold, read together (one round trip in Redis)."""
    nodes = {tenant: queue for tenant, (queue, _) in QUEUES.items()} | {"org": "org"}
    held = await asyncio.gather(*(ledger.usage(node, FLAVOR, TPM) for node in nodes.values()))
    return dict(zip(nodes, held, strict=True))


async def quiet(ledger: Ledger, load: Load) -> dict[str, int]:
    """Usage once every granted call has been settled (a stream is settled just after
    it ends): then each queue holds exactly what the upstream reported for its calls,
    and the cohort what the queues hold beyond their guaranteed parts."""
    settled = {t: sum(o.used for o in load.outcomes if o.tenant == t) for t in QUEUES}
    settled["org"] = sum(max(0, settled[t] - GUARANTEED[t]) for t in QUEUES)
    deadline = time.monotonic() + 15
    while (held := await usages(ledger)) != settled and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert held == settled
    return held


async def model_available(held: dict[str, int], tenant: str) -> int:
    """What the in-process ledger says ``tenant`` may still take, given what every
    queue holds now (one reservation per queue: the pool's share is the same)."""
    model = MemoryLedger(quota_config())
    now = time.time()
    for t, amount in held.items():
        if t != "org" and amount:
            grant = await model.reserve(QUEUES[t][0], FLAVOR, {TPM: amount}, now=now)
            assert not isinstance(grant, Refusal), (t, amount, grant)
    refused = await model.reserve(QUEUES[tenant][0], FLAVOR, {TPM: 10**9}, now=now)
    assert isinstance(refused, Refusal)
    return max(0, refused.available)


async def fill_exactly(load: Load, ledger: Ledger, tenant: str, gateway: int) -> Outcome:
    """The shared ledger refuses one token more than the model says is available, grants
    exactly that much, and then refuses a single token (returned)."""
    available = await model_available(await quiet(ledger, load), tenant)
    over = await load.exact(tenant, available + 1, gateway)
    assert over.status == 429, over
    assert over.refusal["resource"] == TPM and over.refusal["available"] == available, over
    if available:
        assert (await load.exact(tenant, available, gateway + 1)).status == 200
    last = await load.exact(tenant, 1, gateway)
    assert last.status == 429 and last.refusal["available"] == 0, last
    return last


# -- the scenario ------------------------------------------------------------------------------


async def scenario(urls: list[str], redis: str) -> None:
    memory = MemoryLedger(quota_config())
    for tenant, (queue, _) in QUEUES.items():
        assert memory.limit(queue, FLAVOR, TPM) == LIMIT[tenant]
    assert await model_available({}, "lender") == LIMIT["lender"]
    # Borrower and third at their caps leave 1000 of the pool; the lender has 1600.
    at_caps = {"borrower": 1300, "third": 1100, "lender": 0, "greedy": 0, "rival": 0}
    assert await model_available(at_caps, "greedy") == 1000
    assert await model_available(at_caps, "lender") == 1600
    assert await model_available({**at_caps, "greedy": 600}, "rival") == 400
    full = {**at_caps, "greedy": 600, "rival": 400}
    assert await model_available(full, "borrower") == 0
    assert await model_available(full, "lender") == 600
    assert await model_available({**full, "lender": 600}, "lender") == 0

    admin = {"Authorization": f"Bearer {ADMIN}"}
    ledger = create_ledger(redis, quota_config(), prefix=LEDGER_PREFIX)
    upstream = FakeOpenAI(models=(MODEL,), completion_tokens=UPSTREAM_COMPLETION)
    upstream.delay = 0.02  # reservations stay in flight a while
    upstream.chunk_delay = 0.002
    stop = asyncio.Event()
    sampler = Sampler(ledger)
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=100)
    async with upstream, httpx.AsyncClient(timeout=30, limits=limits) as http:
        applied = await http.post(
            f"{urls[0]}/api/v1/admin/config", json=config(upstream.base_url), headers=admin
        )
        assert applied.status_code == 201, applied.text
        keys = {}
        for tenant in QUEUES:
            made = await http.post(
                f"{urls[1]}/api/v1/admin/tenants/{tenant}/keys",
                json={"principal": f"{tenant}-bot", "roles": ["member"]},
                headers=admin,
            )
            assert made.status_code == 201, made.text
            keys[tenant] = made.json()["token"]
        # Each replica reloads the configuration within about a second of a change.
        for url in urls:
            for tenant in QUEUES:
                bearer = {"Authorization": f"Bearer {keys[tenant]}"}
                for _ in range(100):
                    probe = await http.get(f"{url}/v1/models", headers=bearer)
                    if probe.status_code == 200 and probe.json()["data"]:
                        break
                    await asyncio.sleep(0.1)
                assert [m["id"] for m in probe.json()["data"]] == [MODEL], probe.text
        assert ledger.limit(QUEUES["lender"][0], FLAVOR, TPM) == LIMIT["lender"]
        assert await usages(ledger) == dict.fromkeys([*QUEUES, "org"], 0)

        load = Load(http, urls, keys)
        watching = asyncio.create_task(sampler.run(stop))
        try:
            # Phase A: borrower and third borrow until their borrowing limits stop them.
            # Their caps (1300 + 1100) are less than the pool (3400): only the queues'
            # own limits can refuse them.
            jobs = [partial(load.load_call, t) for _ in range(100) for t in ("borrower", "third")]
            phase_a = await flood(jobs, concurrency=24)
            for tenant in ("borrower", "third"):
                mine = [o for o in phase_a if o.tenant == tenant]
                refused = [o for o in mine if o.status == 429]
                assert refused and len(refused) < len(mine), tenant
                for outcome in refused:
                    detail = outcome.refusal
                    assert detail["level"] == "ClusterQueue", detail
                    assert detail["name"] == QUEUES[tenant][0], detail
                    assert detail["resource"] == TPM, detail
                    assert detail["available"] < detail["requested"], detail
                    # It held more than its nominal quota when refused: it was borrowing.
                    assert LIMIT[tenant] - detail["available"] > NOMINAL[tenant], detail
            # Filled to exactly nominal + borrowing limit, and not one token more.
            for gateway, tenant in enumerate(("borrower", "third")):
                over = await fill_exactly(load, ledger, tenant, gateway)
                assert over.refusal["available"] == 0
                assert over.refusal["level"] == "ClusterQueue", over
                assert (await quiet(ledger, load))[tenant] == LIMIT[tenant]
            held = await quiet(ledger, load)
            assert held["org"] == LIMIT["borrower"] + LIMIT["third"], held

            # Phase B: greedy and rival fight over what is left of the pool (borrower and
            # third keep trying); once the pool is full, the lender takes its 600
            # non-lendable tokens in 12 concurrent calls through both gateways while the
            # flood goes on.
            full_pool = asyncio.Event()
            lender_done = asyncio.Event()

            async def flooder(tenant: str) -> None:
                sent = 0
                while sent < 40 or not lender_done.is_set():
                    outcome = await load.load_call(tenant)
                    sent += 1
                    if outcome.status == 429 and outcome.refusal["level"] == "Cohort":
                        full_pool.set()

            async def lender() -> list[Outcome]:
                try:
                    await asyncio.wait_for(full_pool.wait(), timeout=20)
                    return list(
                        await asyncio.gather(*(load.exact("lender", 50, i) for i in range(12)))
                    )
                finally:
                    lender_done.set()

            floods = [flooder(t) for _ in range(8) for t in ("greedy", "rival")]
            floods += [flooder(t) for t in ("borrower", "third") for _ in range(2)]
            lending = asyncio.create_task(lender())
            await asyncio.gather(lending, *floods)
            lent = lending.result()
            assert [o.status for o in lent] == [200] * 12, [o.error for o in lent]
            phase_b = load.outcomes[len(phase_a) :]
            pooled = [o for o in phase_b if o.tenant in ("greedy", "rival")]
            assert any(o.status == 200 for o in pooled)
            assert any(o.status == 429 and o.refusal["name"] == "org" for o in pooled)
            held = await quiet(ledger, load)
            assert held["lender"] == 600 and held["org"] <= POOL, held
            assert held["borrower"] <= LIMIT["borrower"] and held["third"] <= LIMIT["third"]

            # Quiet again: every queue gets exactly what the model says and no more.
            for gateway, tenant in enumerate(("borrower", "third", "greedy", "rival")):
                await fill_exactly(load, ledger, tenant, gateway)
            held = await quiet(ledger, load)
            assert held["org"] == POOL, held  # the pool is full ...
            over = await fill_exactly(load, ledger, "lender", 1)
            assert over.refusal["available"] == 0  # ... and the lender has all of its 600
            assert over.refusal["level"] == "Cohort" and over.refusal["name"] == "org", over
            assert (await quiet(ledger, load))["lender"] == 600
        finally:
            stop.set()
            await watching
            await ledger.aclose()

    assert not sampler.violations, sampler.violations[:10]
    assert sampler.samples >= 50, sampler.samples
    assert sampler.peak["borrower"] == LIMIT["borrower"]
    assert sampler.peak["third"] == LIMIT["third"]
    assert sampler.peak["org"] == POOL
    statuses = {o.status for o in load.outcomes}
    assert statuses == {200, 429}, statuses  # never a 5xx
    # Only granted calls reached the upstream.
    assert upstream.requests["/v1/completions"] == sum(o.status == 200 for o in load.outcomes)


def test_two_gateways_share_one_token_ledger_under_load(
    gateways: list[str], own_redis: str
) -> None:
    asyncio.run(scenario(gateways, own_redis))
