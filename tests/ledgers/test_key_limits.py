"""An API key's own limits: a level below its queue in the same ledger. A call must fit
the key's limits and the queue's path at once or takes nothing from either; settling
gives back to the key too; each key is capped on its own. Both ledgers answer alike."""

from __future__ import annotations

import asyncio

import pytest

from gateway.ledgers import Grant, KeyCharge, KeySpend, Ledger, Refusal, Spent
from tests.ledgers.configs import MIDNIGHT, POOL, RPM, T0, TPD, TPM, team
from tests.ledgers.conftest import MakeLedger
from tests.ledgers.test_leases import LEASE, two_gateways
from tests.ledgers.test_rebuild import ledgers


def key(name: str, tokens: int, tpm: int | None = 300, tpd: int | None = None) -> KeyCharge:
    limits = {r: v for r, v in ((TPM, tpm), (TPD, tpd)) if v is not None}
    return KeyCharge(name, limits, dict.fromkeys(limits, tokens))


async def grant(
    ledger: Ledger, queue: str, tokens: int, charge: KeyCharge | None, at: float = 0.0
) -> Grant:
    result = await ledger.reserve(queue, POOL, {TPM: tokens}, now=T0 + at, key=charge)
    assert isinstance(result, Grant), result
    return result


async def refusal(
    ledger: Ledger, queue: str, tokens: int, charge: KeyCharge | None, at: float = 0.0
) -> Refusal:
    result = await ledger.reserve(queue, POOL, {TPM: tokens}, now=T0 + at, key=charge)
    assert isinstance(result, Refusal), result
    return result


async def test_a_key_at_its_limit_is_refused_and_its_queue_keeps_its_quota(
    make_ledger: MakeLedger,
) -> None:
    ledger = make_ledger(team())
    first = await grant(ledger, "a", 200, key("k1", 200))
    assert first.key_amounts == {TPM: 200}
    refused = await refusal(ledger, "a", 200, key("k1", 200), at=10)
    assert (refused.level, refused.name, refused.resource) == ("Key", "k1", TPM)
    assert (refused.requested, refused.available) == (200, 100)
    assert refused.retry_after == pytest.approx(50)  # when the first call's minute ends
    assert refused.remaining == {TPM: 100}
    # Nothing of the refused call was taken: the queue holds the first call only, and
    # a call of another key (or of none) gets all the queue has left.
    assert await ledger.usage("a", POOL, TPM, now=T0 + 10) == 200
    assert await ledger.key_usage("k1", TPM, now=T0 + 10) == 200
    await grant(ledger, "a", 1000, None, at=10)  # all of 1000 + 200 borrowed, less 200
    # and the key's minute passes like the queue's
    assert await ledger.key_usage("k1", TPM, now=T0 + 60) == 0


async def test_a_settled_call_gives_back_to_its_key(make_ledger: MakeLedger) -> None:
    ledger = make_ledger(team())
    used = await grant(ledger, "a", 300, key("k1", 300))
    await refusal(ledger, "a", 1, key("k1", 1))
    await ledger.reconcile(used, {TPM: 100}, now=T0 + 1)
    assert await ledger.key_usage("k1", TPM, now=T0 + 1) == 100
    assert await ledger.usage("a", POOL, TPM, now=T0 + 1) == 100
    failed = await grant(ledger, "a", 200, key("k1", 200), at=2)
    await ledger.release(failed, now=T0 + 3)
    assert await ledger.key_usage("k1", TPM, now=T0 + 3) == 100
    await grant(ledger, "a", 200, key("k1", 200), at=4)
    # an overrun is charged to the key as to the queue, past its limit
    over = await grant(ledger, "b", 0, key("k2", 0))
    await ledger.reconcile(over, {TPM: 450}, now=T0 + 5)
    assert await ledger.key_usage("k2", TPM, now=T0 + 5) == 450
    refused = await refusal(ledger, "b", 1, key("k2", 1), at=5)
    assert (refused.level, refused.available) == ("Key", 0)


async def test_two_keys_of_one_queue_are_capped_each_on_its_own(make_ledger: MakeLedger) -> None:
    ledger = make_ledger(team())
    await grant(ledger, "a", 300, key("k1", 300))
    await grant(ledger, "a", 300, key("k2", 300))
    for name in ("k1", "k2"):
        refused = await refusal(ledger, "a", 10, key(name, 10), at=1)
        assert (refused.level, refused.name) == ("Key", name)
    await grant(ledger, "a", 300, key("k3", 300), at=1)
    assert await ledger.usage("a", POOL, TPM, now=T0 + 1) == 900


async def test_a_key_without_limits_is_the_queue_alone(make_ledger: MakeLedger) -> None:
    ledger = make_ledger(team())
    plain = await grant(ledger, "solo", 100, None)
    assert plain.key_amounts == {}
    refused = await refusal(ledger, "solo", 1, None)
    assert (refused.level, refused.name) == ("ClusterQueue", "solo")
    await ledger.release(plain, now=T0 + 1)
    await grant(ledger, "solo", 100, None, at=1)


async def test_the_queue_is_named_when_both_levels_fit_equally_late(
    make_ledger: MakeLedger,
) -> None:
    ledger = make_ledger(team())
    await grant(ledger, "solo", 40, key("k1", 40, tpm=100))
    refused = await refusal(ledger, "solo", 80, key("k1", 80, tpm=100), at=1)
    assert (refused.level, refused.name, refused.available) == ("ClusterQueue", "solo", 60)
    assert refused.retry_after == pytest.approx(59)
    # the key fits later than the queue (never, within one window): the key is named
    refused = await refusal(ledger, "solo", 60, key("k1", 60, tpm=50), at=1)
    assert (refused.level, refused.available, refused.remaining) == ("Key", 10, {TPM: 10})
    assert refused.retry_after == pytest.approx(60)
    # the key short, the queue not: the key, with its own remaining
    refused = await refusal(ledger, "solo", 20, key("k1", 20, tpm=50), at=1)
    assert (refused.level, refused.available, refused.reset_after) == ("Key", 10, {TPM: 59})


async def test_a_key_has_a_day_budget_of_its_own(make_ledger: MakeLedger) -> None:
    """The key's tokens-per-day counts though the queue has no day budget (solo)."""
    ledger = make_ledger(team())
    await grant(ledger, "solo", 80, key("k1", 80, tpm=None, tpd=100))
    refused = await refusal(ledger, "solo", 80, key("k1", 80, tpm=None, tpd=100), at=120)
    assert (refused.level, refused.name, refused.resource) == ("Key", "k1", TPD)
    assert refused.retry_after == pytest.approx(MIDNIGHT - 120)
    assert await ledger.usage("solo", POOL, TPM, now=T0 + 120) == 0
    assert await ledger.key_usage("k1", TPD, now=T0 + 120) == 80
    assert await ledger.key_usage("k1", TPD, now=T0 + MIDNIGHT) == 0
    await grant(ledger, "solo", 80, key("k1", 80, tpm=None, tpd=100), at=MIDNIGHT)


async def test_both_key_limits_and_queue_resources_settle_together(
    make_ledger: MakeLedger,
) -> None:
    ledger = make_ledger(team())
    charge = key("k1", 500, tpm=600, tpd=1000)
    result = await ledger.reserve("a", POOL, {TPM: 500, RPM: 1, TPD: 500}, now=T0, key=charge)
    assert isinstance(result, Grant)
    assert result.key_amounts == {TPM: 500, TPD: 500}
    await ledger.reconcile(result, {TPM: 50, RPM: 1, TPD: 50}, now=T0 + 1)
    assert await ledger.key_usage("k1", TPM, now=T0 + 1) == 50
    assert await ledger.key_usage("k1", TPD, now=T0 + 1) == 50
    assert await ledger.usage("a", POOL, TPD, now=T0 + 1) == 50
    # a settle again changes nothing
    await ledger.release(result, now=T0 + 2)
    assert await ledger.key_usage("k1", TPD, now=T0 + 2) == 50


async def test_a_key_charge_the_ledger_cannot_count_is_refused(make_ledger: MakeLedger) -> None:
    ledger = make_ledger(team())
    for bad in (
        KeyCharge("k1", {RPM: 5}, {RPM: 1}),
        KeyCharge("k1", {TPM: 5}, {TPD: 1}),
        KeyCharge("k1", {TPM: 5}, {TPM: -1}),
    ):
        with pytest.raises(ValueError):
            await ledger.reserve("a", POOL, {TPM: 1}, now=T0, key=bad)


# -- the shared ledger: a dead gateway's calls, and a Redis that lost its state ------------


async def test_a_dead_gateways_call_is_settled_at_its_key_too(redis_url: str) -> None:
    async with two_gateways(redis_url) as (dead, alive, _):
        charge = key("k1", 800, tpm=1000, tpd=2000)
        orphan = await dead.reserve("a", POOL, {TPM: 800}, now=T0, note="{}", key=charge)
        assert isinstance(orphan, Grant)
        await asyncio.sleep(LEASE * 2)
        await alive.renew_lease(LEASE)
        [reclaimed] = await alive.reclaim()
        assert reclaimed.key_amounts == {TPM: 800, TPD: 800}
        assert await alive.settle_orphan(reclaimed, 120, now=T0 + 1)
        assert await alive.key_usage("k1", TPM, now=T0 + 1) == 120
        assert await alive.key_usage("k1", TPD, now=T0 + 1) == 120
        assert await alive.usage("a", POOL, TPM, now=T0 + 1) == 120


async def test_a_lost_redis_is_rebuilt_with_the_keys_spend(redis_url: str) -> None:
    async with ledgers(redis_url) as ([ledger], account, lose):
        account.spent = Spent(
            T0,
            keys={
                "k1": KeySpend(day=900, recent=250, last_at=T0 - 10),
                "k2": KeySpend(day=0, recent=0, last_at=0.0),
            },
        )
        await ledger.update_config(team(), now=T0)
        assert await ledger.key_usage("k1", TPD, now=T0) == 900
        assert await ledger.key_usage("k1", TPM, now=T0) == 250
        refused = await refusal(ledger, "a", 60, key("k1", 60, tpm=300), at=1)
        assert (refused.level, refused.resource, refused.available) == ("Key", TPM, 50)
        refused = await refusal(ledger, "a", 60, key("k1", 60, tpm=None, tpd=950), at=1)
        assert (refused.level, refused.resource) == ("Key", TPD)
        await grant(ledger, "a", 300, key("k2", 300), at=1)
        # the last minute's spend stops counting a minute after its latest call
        assert await ledger.key_usage("k1", TPM, now=T0 + 50) == 0
        # lost again: the keys' levels are what the records say, not counted twice
        await lose()
        account.spent = Spent(T0 + 60, keys={"k1": KeySpend(day=1000, recent=0, last_at=0.0)})
        await grant(ledger, "a", 10, None, at=60)  # rebuilt on the first call
        assert await ledger.key_usage("k1", TPD, now=T0 + 60) == 1000
        assert await ledger.key_usage("k2", TPM, now=T0 + 60) == 0


async def test_a_restarted_in_process_ledger_restores_the_keys_day(make_ledger: MakeLedger) -> None:
    ledger = make_ledger(team())
    await ledger.restore_budgets({}, measured_at=T0, now=T0, keys={"k1": 90})
    if ledger.durable:
        assert await ledger.key_usage("k1", TPD, now=T0) == 0  # Redis keeps its own
        return
    assert await ledger.key_usage("k1", TPD, now=T0) == 90
    await ledger.restore_budgets({}, measured_at=T0, now=T0 + 1, keys={"k1": 95})
    assert await ledger.key_usage("k1", TPD, now=T0 + 1) == 95  # replaced, not added
    refused = await refusal(ledger, "a", 10, key("k1", 10, tpm=None, tpd=100), at=2)
    assert (refused.level, refused.available) == ("Key", 5)
