"""The ledger contract: MemoryLedger and RedisLedger give the same answers.

Each case is a sequence of steps (reserve, settle, read usage) with what each step
must answer, played against both implementations (``make_ledger``). Times are
seconds after T0 (2026-11-22 12:00 UTC); amounts are whole tokens and requests.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field

import pytest

from gateway.ledgers import (
    Grant,
    Ledger,
    MemoryLedger,
    RedisLedger,
    Refusal,
    UnknownQueueError,
    create_ledger,
)
from quota.ledger import period_end
from quota.model import QuotaConfig
from tests.ledgers.configs import (
    MIDNIGHT,
    MONTH_END,
    POOL,
    RPM,
    T0,
    TPD,
    TPM,
    TPMONTH,
    deep,
    team,
)
from tests.ledgers.conftest import MakeLedger
from tests.support.redis import unique_prefix

# -- steps ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reserve:
    """Reserve, expecting a grant, or a refusal by (level, name, resource)."""

    queue: str
    amounts: dict[str, int]
    at: float = 0.0
    refused_by: tuple[str, str, str] | None = None
    available: int | None = None  # of a refusal
    retry_after: float | None = None  # of a refusal
    remaining: dict[str, int] | None = None
    reset_after: dict[str, float] | None = None

    async def run(self, ledger: Ledger, grants: list[Grant]) -> None:
        result = await ledger.reserve(self.queue, POOL, self.amounts, now=T0 + self.at)
        if self.refused_by is None:
            assert isinstance(result, Grant), result
            assert (result.queue, result.flavor, result.amounts) == (
                self.queue,
                POOL,
                self.amounts,
            )
            grants.append(result)
        else:
            assert isinstance(result, Refusal), result
            assert (result.level, result.name, result.resource) == self.refused_by
            assert result.requested == self.amounts[self.refused_by[2]]
            if self.available is not None:
                assert result.available == self.available
            if self.retry_after is not None:
                assert result.retry_after == pytest.approx(self.retry_after)
        if self.remaining is not None:
            assert result.remaining == self.remaining
        if self.reset_after is not None:
            assert result.reset_after == pytest.approx(self.reset_after)


@dataclass(frozen=True)
class Settle:
    """Reconcile the n-th grant with what was used, or release it (``actual`` None)."""

    grant: int
    actual: dict[str, int] | None = None
    at: float = 0.0

    async def run(self, ledger: Ledger, grants: list[Grant]) -> None:
        if self.actual is None:
            await ledger.release(grants[self.grant], now=T0 + self.at)
        else:
            await ledger.reconcile(grants[self.grant], self.actual, now=T0 + self.at)


@dataclass(frozen=True)
class Usage:
    node: str
    resource: str
    expect: int
    at: float = 0.0

    async def run(self, ledger: Ledger, grants: list[Grant]) -> None:
        got = await ledger.usage(self.node, POOL, self.resource, now=T0 + self.at)
        assert got == self.expect, f"usage of {self.node} {self.resource}"


Step = Reserve | Settle | Usage


@dataclass(frozen=True)
class Case:
    steps: list[Step]
    config: QuotaConfig = field(default_factory=team)


def org(resource: str) -> tuple[str, str, str]:
    return ("Cohort", "org", resource)


CASES: dict[str, Case] = {
    "a reservation within nominal quota is granted and reports what is left": Case(
        [
            Reserve(
                "a",
                {TPM: 900, RPM: 1, TPD: 900},
                remaining={TPM: 300, RPM: 19, TPD: 9100},
                reset_after={TPM: 60, RPM: 60, TPD: MIDNIGHT},
            ),
            Usage("a", TPM, 900),
            Usage("org", TPM, 900),  # a keeps nothing back: all it uses is the pool's
            Usage("b", TPM, 0),
        ]
    ),
    "the cluster queue level refuses past its own borrowing limit": Case(
        [
            Reserve("x", {TPM: 150}, remaining={TPM: 0}),  # 100 + at most 50 borrowed
            Reserve(
                "x",
                {TPM: 1},
                at=5,
                refused_by=("ClusterQueue", "x", TPM),
                available=0,
                retry_after=55,
            ),
            Reserve("y", {TPM: 950}, remaining={TPM: 0}),  # the rest of lab's pool
        ]
    ),
    "a queue without a cohort has only its own quota": Case(
        [
            Reserve("solo", {TPM: 100}),
            Reserve("solo", {TPM: 1}, refused_by=("ClusterQueue", "solo", TPM), available=0),
        ]
    ),
    "a queue without quota for a resource gets none of it": Case(
        [
            Reserve(
                "lonely",
                {TPM: 1},
                refused_by=("ClusterQueue", "lonely", TPM),
                available=0,
                retry_after=60,  # nothing holds it: the window's length
            ),
            Reserve("lonely", {RPM: 1}, remaining={RPM: 4}),
        ]
    ),
    "a queue borrows what its cohort lends, then the cohort refuses": Case(
        [
            Reserve("a", {TPM: 1000}, remaining={TPM: 200}),
            # b lends only 200 of its 1000: a may take 200 more, not its 500
            Reserve("a", {TPM: 200}, remaining={TPM: 0}),
            Reserve("a", {TPM: 1}, refused_by=org(TPM), available=0, retry_after=60),
        ]
    ),
    "a lender's non-lendable share stays its own while others borrow": Case(
        [
            Reserve("a", {TPM: 1200}),
            Reserve("b", {TPM: 800}, remaining={TPM: 0}),
            Reserve("b", {TPM: 1}, refused_by=org(TPM), available=0),
            Usage("org", TPM, 1200),  # b's 800 is its guaranteed part: not in the pool
        ]
    ),
    "a reservation takes every resource or none": Case(
        [
            *(Reserve("a", {TPM: 10, RPM: 1}) for _ in range(20)),  # a's 10 + b's 10
            Reserve("a", {TPM: 10, RPM: 1}, refused_by=org(RPM), available=0),
            Usage("a", TPM, 200),  # nothing half-taken
            Usage("a", RPM, 20),
        ]
    ),
    "a rate frees up a minute after it was reserved": Case(
        [
            Reserve("a", {TPM: 1000}),
            Usage("a", TPM, 1000, at=59.9),
            Usage("a", TPM, 0, at=60),
            Reserve("a", {TPM: 1200}, at=60),
        ]
    ),
    "a day budget resets at UTC midnight": Case(
        [
            Reserve("a", {TPD: 10_000}, remaining={TPD: 0}, reset_after={TPD: MIDNIGHT}),
            Reserve("a", {TPD: 1}, at=1, refused_by=org(TPD), retry_after=MIDNIGHT - 1),
            Usage("a", TPD, 10_000, at=MIDNIGHT - 0.5),
            Reserve(
                "a",
                {TPD: 1},
                at=MIDNIGHT,
                remaining={TPD: 9999},
                reset_after={TPD: 86400},
            ),
            Usage("a", TPD, 1, at=MIDNIGHT),
        ]
    ),
    "a budget's period lasts to its very end": Case(
        [
            Reserve("a", {TPD: 10_000}, remaining={TPD: 0}),
            Reserve("a", {TPD: 1}, at=MIDNIGHT - 0.002, refused_by=org(TPD)),
            Reserve("a", {TPD: 1}, at=MIDNIGHT - 1e-6, refused_by=org(TPD)),
            Reserve("a", {TPD: 1}, at=MIDNIGHT, remaining={TPD: 9999}),
            Reserve("a", {TPD: 1}, at=MIDNIGHT + 1e-6, remaining={TPD: 9998}),
        ]
    ),
    "a month budget resets when the month ends": Case(
        [
            Reserve("b", {TPMONTH: 200_000}),
            Reserve(
                "a",
                {TPMONTH: 1},
                at=MIDNIGHT,
                refused_by=org(TPMONTH),
                retry_after=MONTH_END - MIDNIGHT,
            ),
            Usage("b", TPMONTH, 200_000, at=MONTH_END - 1),
            Reserve("a", {TPMONTH: 200_000}, at=MONTH_END),
        ]
    ),
    "reconcile refunds what was not used": Case(
        [
            Reserve("a", {TPM: 900, TPD: 900}),
            Settle(0, {TPM: 300, TPD: 300}, at=1),
            Usage("a", TPM, 300, at=1),
            Usage("a", TPD, 300, at=1),
            Reserve("a", {TPM: 900}, at=2, remaining={TPM: 0}),
        ]
    ),
    "an overrun is charged past the quota and the next call is refused": Case(
        [
            Reserve("a", {TPM: 1000}),
            Settle(0, {TPM: 1500}, at=1),
            Usage("a", TPM, 1500, at=1),
            Usage("org", TPM, 1500, at=1),
            Reserve("a", {TPM: 1}, at=2, refused_by=org(TPM), available=0),
            # the pool is 300 short: b has its 800 less that (quota.tree.available)
            Reserve("b", {TPM: 501}, at=2, refused_by=org(TPM), available=500),
            Reserve("b", {TPM: 500}, at=2),
        ]
    ),
    "release refunds everything": Case(
        [
            Reserve("a", {TPM: 900, RPM: 1, TPD: 900}),
            Settle(0, None, at=1),
            Usage("a", TPM, 0, at=1),
            Usage("a", RPM, 0, at=1),
            Usage("a", TPD, 0, at=1),
            Usage("org", TPM, 0, at=1),
        ]
    ),
    "a resource left out of the actual usage keeps its estimate": Case(
        [
            Reserve("a", {TPM: 900, TPD: 900}),
            Settle(0, {TPM: 100}),
            Usage("a", TPM, 100),
            Usage("a", TPD, 900),
        ]
    ),
    "a grant is settled once": Case(
        [
            Reserve("a", {TPM: 900}),
            Settle(0, {TPM: 300}),
            Settle(0, {TPM: 900}),
            Settle(0, None),
            Usage("a", TPM, 300),
        ]
    ),
    "a reconcile after the rate window corrects only the budget": Case(
        [
            Reserve("a", {TPM: 900, TPD: 900}),
            Settle(0, {TPM: 100, TPD: 100}, at=61),
            Usage("a", TPM, 0, at=61),
            Usage("a", TPD, 100, at=61),
            Usage("org", TPM, 0, at=200),  # nothing left behind for ever
        ]
    ),
    "a refused call learns when enough of the window has passed": Case(
        [
            Reserve("a", {TPM: 600}),
            Reserve("a", {TPM: 600}, at=10),
            # 700 needs both to expire (the second at 70); 500 only the first (at 60)
            Reserve("a", {TPM: 700}, at=20, refused_by=org(TPM), retry_after=50),
            Reserve("a", {TPM: 500}, at=20, refused_by=org(TPM), retry_after=40),
            Reserve("a", {TPM: 600}, at=60),
        ]
    ),
    "a grant's reset_after is when all it holds has gone (its own reservation last)": Case(
        [
            Reserve("a", {TPM: 100, TPD: 100}, reset_after={TPM: 60, TPD: MIDNIGHT}),
            Reserve("b", {TPM: 100}, at=30, reset_after={TPM: 60}),
            Reserve("a", {TPM: 100, TPD: 1}, at=61, reset_after={TPM: 60, TPD: MIDNIGHT - 61}),
        ]
    ),
    "retry_after waits for the queue's own reservations when its own limit binds": Case(
        [
            Reserve("y", {TPM: 500}),  # earlier, in the same cohort: frees nothing for x
            Reserve("x", {TPM: 150}, at=10),
            Reserve("x", {TPM: 1}, at=20, refused_by=("ClusterQueue", "x", TPM), retry_after=50),
            Reserve("x", {TPM: 1}, at=69, refused_by=("ClusterQueue", "x", TPM), retry_after=1),
            Reserve("x", {TPM: 150}, at=70),
        ]
    ),
    "retry_after ignores reservations in another cohort": Case(
        [
            Reserve("a", {TPM: 600}),  # org's, expiring first
            Reserve("y", {TPM: 1100}, at=10, remaining={TPM: 0}),
            Reserve("y", {TPM: 100}, at=20, refused_by=("Cohort", "lab", TPM), retry_after=50),
            Reserve("y", {TPM: 100}, at=70),
        ]
    ),
    "retry_after counts what a reservation charged to the refusing cohort": Case(
        [
            Reserve("b", {TPM: 900}),  # 800 of it is b's own: only 100 is org's
            Reserve("a", {TPM: 1100}, at=10, remaining={TPM: 0}),
            # b's expiry frees 100 of org: enough for 100, not for 500
            Reserve("a", {TPM: 100}, at=20, refused_by=org(TPM), retry_after=40),
            Reserve("a", {TPM: 500}, at=20, refused_by=org(TPM), retry_after=50),
            Reserve("a", {TPM: 100}, at=60),
            Reserve("a", {TPM: 500}, at=70),
        ]
    ),
    "a refusal names the resource that fits last and waits for it": Case(
        [
            Reserve("a", {TPM: 1200}),
            Reserve("a", {RPM: 20}, at=10),
            Reserve(
                "a",
                {TPM: 100, RPM: 1},
                at=20,
                refused_by=org(RPM),
                retry_after=50,
                remaining={TPM: 0, RPM: 0},
                reset_after={TPM: 40, RPM: 50},
            ),
            Reserve("a", {TPM: 100, RPM: 1}, at=60, refused_by=org(RPM), retry_after=10),
            Reserve("a", {TPM: 100, RPM: 1}, at=70),
        ]
    ),
    "a budget's refusal waits for the period's end, then the call fits": Case(
        [
            Reserve("a", {TPM: 10, TPD: 10_000}),
            Reserve(
                "a",
                {TPM: 10, TPD: 10},
                at=30,
                refused_by=org(TPD),
                retry_after=MIDNIGHT - 30,
                reset_after={TPM: 0, TPD: MIDNIGHT - 30},
            ),
            Reserve("a", {TPM: 10, TPD: 10}, at=MIDNIGHT),
        ]
    ),
    "a refusal reports remaining and reset_after of every resource": Case(
        [
            Reserve("a", {TPM: 1200}),
            Reserve(
                "a",
                {RPM: 1, TPM: 1},
                at=10,
                refused_by=org(TPM),
                remaining={RPM: 20, TPM: 0},
                reset_after={RPM: 0, TPM: 50},
            ),
        ]
    ),
    "a cohort's own borrowing limit binds before the root": Case(
        [
            Reserve("d", {TPM: 300}, remaining={TPM: 0}),  # its 100 + org's limit of 200
            Reserve("d", {TPM: 1}, refused_by=("Cohort", "org", TPM), available=0),
            Reserve("e", {TPM: 300}, remaining={TPM: 0}),  # company has 600 in all
            Reserve("e", {TPM: 1}, refused_by=("Cohort", "company", TPM), available=0),
            Usage("company", TPM, 600),
        ],
        config=deep(),
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
async def test_contract(make_ledger: MakeLedger, case: Case) -> None:
    ledger = make_ledger(case.config)
    grants: list[Grant] = []
    for step in case.steps:
        await step.run(ledger, grants)


# -- the rest of the interface ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("queue", "resource", "limit"),
    [
        ("a", TPM, 1200),  # its 1000 + what b lends (its own limit, 500, is looser)
        ("b", TPM, 2000),  # its guaranteed 800 + the whole pool
        ("x", TPM, 150),  # its 100 + its borrowing limit
        ("y", TPM, 1100),
        ("a", RPM, 20),
        ("a", TPD, 10_000),
        ("solo", TPM, 100),
        ("lonely", TPM, 0),
        ("lonely", RPM, 5),
    ],
)
async def test_limit(make_ledger: MakeLedger, queue: str, resource: str, limit: int) -> None:
    assert make_ledger(team()).limit(queue, POOL, resource) == limit


async def test_limit_through_cohorts_with_limits(make_ledger: MakeLedger) -> None:
    ledger = make_ledger(deep())
    assert (ledger.limit("d", POOL, TPM), ledger.limit("e", POOL, TPM)) == (300, 600)


async def test_covers_names_what_the_queue_has_quota_for(make_ledger: MakeLedger) -> None:
    ledger = make_ledger(team())
    assert ledger.covers("a", POOL, TPM) and ledger.covers("lonely", POOL, RPM)
    assert not ledger.covers("lonely", POOL, TPM)
    assert not ledger.covers("a", "other-pool", TPM)
    assert not ledger.covers("nobody", POOL, TPM)


async def test_unknown_queues_and_bad_amounts_raise(make_ledger: MakeLedger) -> None:
    ledger = make_ledger(team())
    with pytest.raises(UnknownQueueError, match="nobody"):
        await ledger.reserve("nobody", POOL, {TPM: 1}, now=T0)
    with pytest.raises(KeyError):  # UnknownQueueError is a KeyError
        ledger.limit("nobody", POOL, TPM)
    with pytest.raises(UnknownQueueError):
        await ledger.usage("nobody", POOL, TPM, now=T0)
    for amounts in ({}, {TPM: -1}, {"gpu-hours": 1}, {TPM: 2**60}):
        with pytest.raises(ValueError):
            await ledger.reserve("a", POOL, amounts, now=T0)
    grant = await ledger.reserve("a", POOL, {TPM: 10}, now=T0)
    assert isinstance(grant, Grant)
    with pytest.raises(ValueError):
        await ledger.reconcile(grant, {TPM: -5}, now=T0)


async def test_a_settle_changes_only_its_own_reservation(make_ledger: MakeLedger) -> None:
    """A grant names its queue, flavor and owner (the ledger that made it); a settle
    whose grant does not match the reservation of its id changes nothing, and is
    counted; the reservation can still be settled by its own grant."""
    ledger = make_ledger(team())
    grant = await ledger.reserve("a", POOL, {TPM: 300, TPD: 300}, now=T0)
    other = await ledger.reserve("b", POOL, {TPM: 100}, now=T0)
    assert isinstance(grant, Grant) and isinstance(other, Grant)
    assert grant.owner and grant.owner == other.owner
    forged = [
        dataclasses.replace(grant, queue="b"),
        dataclasses.replace(grant, flavor="other-pool"),
        dataclasses.replace(grant, owner="another-gateway"),
        dataclasses.replace(other, amounts={TPM: 100, TPD: 100}, id=grant.id, owner="x"),
    ]
    for each in forged:
        await ledger.reconcile(each, dict.fromkeys(each.amounts, 0), now=T0 + 1)
        await ledger.release(each, now=T0 + 1)
    assert ledger.foreign_settles == 2 * len(forged)
    assert await ledger.usage("a", POOL, TPM, now=T0 + 1) == 300
    assert await ledger.usage("a", POOL, TPD, now=T0 + 1) == 300
    assert await ledger.usage("b", POOL, TPM, now=T0 + 1) == 100
    await ledger.reconcile(grant, {TPM: 50, TPD: 50}, now=T0 + 2)  # its own grant does
    assert await ledger.usage("a", POOL, TPM, now=T0 + 2) == 50
    assert await ledger.usage("a", POOL, TPD, now=T0 + 2) == 50
    await ledger.release(grant, now=T0 + 3)  # settled once: a second settle is a no-op
    assert await ledger.usage("a", POOL, TPD, now=T0 + 3) == 50
    assert ledger.foreign_settles == 2 * len(forged) + 1


async def test_a_call_with_a_note_is_reserved_and_settled_alike(make_ledger: MakeLedger) -> None:
    """The note (for a shared ledger's reclaim) changes no answer; what the ledger keeps
    of a settled call until it is recorded is not usage."""
    ledger = make_ledger(team())
    plain = await ledger.reserve("a", POOL, {TPM: 300, TPD: 300}, now=T0)
    noted = await ledger.reserve("a", POOL, {TPM: 300, TPD: 300}, now=T0, note='{"prompt": 3}')
    assert isinstance(plain, Grant) and isinstance(noted, Grant)
    assert _anonymous(noted) == dataclasses.replace(
        _anonymous(plain), remaining={TPM: 600, TPD: 9400}
    )
    ledger.checkpoint(noted, 40)
    await ledger.reconcile(noted, {TPM: 40, TPD: 40}, now=T0 + 1)
    await ledger.release(noted, now=T0 + 1)  # settled once
    assert await ledger.usage("a", POOL, TPD, now=T0 + 1) == 340
    await ledger.forget([noted.id])
    assert await ledger.usage("a", POOL, TPD, now=T0 + 1) == 340
    assert await ledger.reclaim() == []  # nobody died


async def test_update_config_keeps_live_reservations_counted(make_ledger: MakeLedger) -> None:
    ledger = make_ledger(team())
    first = await ledger.reserve("a", POOL, {TPM: 1200, TPD: 3000}, now=T0)
    assert isinstance(first, Grant)
    assert isinstance(await ledger.reserve("a", POOL, {TPM: 1}, now=T0), Refusal)
    await ledger.update_config(team(a_tpm=2000), now=T0 + 1)
    assert ledger.limit("a", POOL, TPM) == 2200
    assert await ledger.usage("a", POOL, TPM, now=T0 + 1) == 1200
    grant = await ledger.reserve("a", POOL, {TPM: 1000}, now=T0 + 1)
    assert isinstance(grant, Grant) and grant.remaining[TPM] == 0
    await ledger.reconcile(first, {TPM: 200, TPD: 500}, now=T0 + 2)  # still settles
    assert await ledger.usage("a", POOL, TPM, now=T0 + 2) == 1200
    assert await ledger.usage("a", POOL, TPD, now=T0 + 2) == 500
    assert await ledger.usage("a", POOL, TPM, now=T0 + 61) == 1000 - 1000  # all expired


async def test_update_config_moves_usage_to_where_the_new_tree_keeps_it(
    make_ledger: MakeLedger,
) -> None:
    ledger = make_ledger(team(b_lending_limit=None))
    await ledger.reserve("b", POOL, {TPM: 900, TPD: 900}, now=T0)
    assert await ledger.usage("org", POOL, TPM, now=T0) == 900  # nothing guaranteed
    await ledger.update_config(team(b_lending_limit=200), now=T0 + 1)
    # now b keeps 800 to itself: only what exceeds that is the pool's
    assert await ledger.usage("org", POOL, TPM, now=T0 + 1) == 100
    assert await ledger.usage("org", POOL, TPD, now=T0 + 1) == 900  # no lending limit
    assert await ledger.usage("org", POOL, TPM, now=T0 + 60) == 0


async def test_update_config_drops_what_a_removed_queue_held(make_ledger: MakeLedger) -> None:
    ledger = make_ledger(team())
    grant = await ledger.reserve("y", POOL, {TPM: 500}, now=T0)
    assert isinstance(grant, Grant)
    await ledger.update_config(team(with_y=False), now=T0 + 1)
    assert await ledger.usage("lab", POOL, TPM, now=T0 + 1) == 0
    await ledger.release(grant, now=T0 + 2)  # harmless
    with pytest.raises(UnknownQueueError):
        await ledger.reserve("y", POOL, {TPM: 1}, now=T0 + 2)


async def test_create_ledger_picks_by_url(redis_url: str) -> None:
    memory = create_ledger(None, team())
    shared = create_ledger(redis_url, team(), prefix=unique_prefix("create"))
    try:
        assert isinstance(memory, MemoryLedger) and isinstance(shared, RedisLedger)
    finally:
        await memory.aclose()
        await shared.aclose()


# -- both ledgers replay one random sequence ---------------------------------------------------

CONFIGS = [team(), team(a_tpm=1500, b_lending_limit=None), team(with_y=False)]
RESOURCES = [TPM, RPM, TPD, TPMONTH]


@pytest.mark.parametrize("seed", [20261122, 7, 99])
async def test_random_sequences_give_identical_answers_and_drain_to_zero(
    redis_url: str, seed: int
) -> None:
    rng = random.Random(seed)
    memory = MemoryLedger(CONFIGS[0])
    shared = RedisLedger.from_url(redis_url, CONFIGS[0], prefix=unique_prefix("replay"))
    ledgers: tuple[Ledger, Ledger] = (memory, shared)
    config, now = CONFIGS[0], T0
    live: list[list[Grant]] = []
    try:
        for _ in range(1500):
            now += rng.choice([0.0, rng.random(), rng.random() * 3, 30.0, rng.random() * 7200])
            roll = rng.random()
            if live and roll < 0.3:
                pair = live.pop(rng.randrange(len(live)))
                await _settle_both(rng, ledgers, pair, now)
            elif roll < 0.33:
                config = rng.choice(CONFIGS)
                for ledger in ledgers:
                    await ledger.update_config(config, now=now)
            elif roll < 0.4:
                node = rng.choice([*(q.name for q in config.cluster_queues), "org", "lab"])
                resource = rng.choice(RESOURCES)
                got = [await ledger.usage(node, POOL, resource, now=now) for ledger in ledgers]
                assert got[0] == got[1], (node, resource)
            else:
                queue = rng.choice([q.name for q in config.cluster_queues])
                chosen = rng.sample(RESOURCES, rng.randint(1, 4))
                amounts = {r: rng.randrange(0, 12 if r == RPM else 700) for r in chosen}
                results = [
                    await ledger.reserve(queue, POOL, amounts, now=now) for ledger in ledgers
                ]
                # by value; the ids of one count (each after its epoch or owner)
                assert _anonymous(results[0]) == _anonymous(results[1])
                if isinstance(results[0], Grant) and isinstance(results[1], Grant):
                    count = results[0].id.rsplit(".", 1)[1]
                    assert results[1].id.endswith(f".{count}")
                if isinstance(results[0], Grant):
                    live.append([r for r in results if isinstance(r, Grant)])
        end = period_end(TPMONTH, now) + 1
        for node in [*(q.name for q in config.cluster_queues), "org", "lab"]:
            for resource in RESOURCES:
                for ledger in ledgers:
                    assert await ledger.usage(node, POOL, resource, now=end) == 0
    finally:
        await shared.aclose()


def _anonymous(result: Grant | Refusal) -> Grant | Refusal:
    if isinstance(result, Grant):
        return dataclasses.replace(result, id="", owner="")
    return result


async def _settle_both(
    rng: random.Random, ledgers: tuple[Ledger, Ledger], pair: list[Grant], now: float
) -> None:
    grant = pair[0]
    if rng.random() < 0.2:
        for ledger, each in zip(ledgers, pair, strict=True):
            await ledger.release(each, now=now)
        return
    actual = {
        r: rng.randrange(0, 2 * amount + 2)  # overruns too
        for r, amount in grant.amounts.items()
        if rng.random() < 0.8
    }
    for ledger, each in zip(ledgers, pair, strict=True):
        await ledger.reconcile(each, actual, now=now)
