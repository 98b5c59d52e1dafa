"""Budgets restored into a ledger after a restart: charged through the tree, replaced by
the next restore, gone with their period; a no-op for Redis, which keeps its own."""

from __future__ import annotations

from gateway.ledgers import Grant, MemoryLedger, RedisLedger
from tests.ledgers.configs import MIDNIGHT, MONTH_END, POOL, T0, TPD, TPM, TPMONTH, team
from tests.support.redis import unique_prefix


async def test_restored_spend_counts_like_calls_until_its_period_ends() -> None:
    ledger = MemoryLedger(team())
    assert not ledger.durable
    spent = {
        ("a", POOL, TPD): 4000,
        ("a", POOL, TPMONTH): 90_000,
        ("b", POOL, TPD): 100,
        ("x", POOL, TPD): 50,  # x has no day budget
        ("gone", POOL, TPD): 5,  # no such queue any more
        ("a", POOL, TPM): 999,  # not a budget
    }
    await ledger.restore_budgets(spent, measured_at=T0 - 3600, now=T0)
    assert await ledger.usage("a", POOL, TPD, now=T0) == 4000
    assert await ledger.usage("org", POOL, TPD, now=T0) == 4100  # through the cohort
    assert await ledger.usage("a", POOL, TPMONTH, now=T0) == 90_000
    assert await ledger.usage("a", POOL, TPM, now=T0) == 0
    grant = await ledger.reserve("a", POOL, {TPD: 6000}, now=T0)
    assert not isinstance(grant, Grant)  # 10,000 a day for org, 4,100 spent already
    grant = await ledger.reserve("a", POOL, {TPD: 5900}, now=T0)
    assert isinstance(grant, Grant) and grant.remaining[TPD] == 0
    # a later restore (a config reload) replaces the earlier one, never adds to it
    await ledger.restore_budgets({("a", POOL, TPD): 10}, measured_at=T0, now=T0 + 1)
    assert await ledger.usage("org", POOL, TPD, now=T0 + 1) == 5900 + 10
    # a spend measured on another day is not today's; the month's still counts
    await ledger.restore_budgets(
        {("a", POOL, TPD): 10, ("a", POOL, TPMONTH): 7}, measured_at=T0 - 86400, now=T0 + 2
    )
    assert await ledger.usage("a", POOL, TPD, now=T0 + 2) == 5900
    assert await ledger.usage("a", POOL, TPMONTH, now=T0 + 2) == 7
    await ledger.update_config(team(a_tpm=2000), now=T0 + 3)  # still counted after
    assert await ledger.usage("a", POOL, TPMONTH, now=T0 + 3) == 7
    assert await ledger.usage("a", POOL, TPD, now=T0 + MIDNIGHT) == 0
    assert await ledger.usage("a", POOL, TPMONTH, now=T0 + MONTH_END) == 0


async def test_redis_keeps_its_own_budgets(redis_url: str) -> None:
    ledger = RedisLedger.from_url(redis_url, team(), prefix=unique_prefix("restore"))
    try:
        assert ledger.durable
        await ledger.restore_budgets({("a", POOL, TPD): 4000}, measured_at=T0, now=T0)
        assert await ledger.usage("a", POOL, TPD, now=T0) == 0
    finally:
        await ledger.aclose()


async def test_grant_ids_of_an_in_process_ledger_are_not_reused_by_the_next_one() -> None:
    """A restarted gateway's ledger must not hand out the ids of the calls recorded
    before the restart: a usage record (and its token charges) is written once per id,
    so a reused id would drop the new call's record."""
    before, after = MemoryLedger(team()), MemoryLedger(team())
    first = await before.reserve("a", POOL, {TPM: 1}, now=T0)
    second = await after.reserve("a", POOL, {TPM: 1}, now=T0)
    assert isinstance(first, Grant) and isinstance(second, Grant)
    assert first.id != second.id
    assert len(first.id) <= 64  # the usage record's reservation column
