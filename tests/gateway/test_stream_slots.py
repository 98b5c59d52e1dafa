"""How many event streams may be open at once: per tenant, for all tenants together,
and the platform's admins apart from both."""

from __future__ import annotations

import pytest

from gateway.settings import Settings
from gateway.stream_slots import StreamSlots


@pytest.mark.parametrize(
    ("per_tenant", "total", "asks", "granted"),
    [
        # one tenant up to its own limit
        (2, 10, ["a", "a", "a"], [True, True, False]),
        # the tenants' total binds before each tenant's own limit
        (2, 3, ["a", "a", "b", "b"], [True, True, True, False]),
        # platform admins ("*") have their own limit, outside the tenants' total
        (2, 2, ["a", "b", "*", "*", "*"], [True, True, True, True, False]),
        # and do not use up the tenants' total
        (2, 2, ["*", "*", "a", "b"], [True, True, True, True]),
    ],
)
def test_limits(per_tenant: int, total: int, asks: list[str], granted: list[bool]) -> None:
    slots = StreamSlots(per_tenant, total, platform="*")
    assert [slots.take(holder) is not None for holder in asks] == granted


def test_a_released_slot_is_free_again_and_released_only_once() -> None:
    slots = StreamSlots(1, 1, platform="*")
    first = slots.take("a")
    assert first is not None and slots.take("a") is None and slots.take("b") is None
    first.release()
    first.release()  # again: gives back nothing more
    assert slots.open("a") == 0
    second = slots.take("b")
    assert second is not None and slots.take("a") is None  # the total is 1, not 2


def test_limits_below_one_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        StreamSlots(0, 5)
    with pytest.raises(ValueError, match="at least 1"):
        StreamSlots(5, 0)


def test_the_settings_default_and_read_the_environment() -> None:
    server = Settings.from_env({}).server
    assert (server.event_streams_per_tenant, server.event_streams) == (8, 64)
    env = {"IGNARA_EVENT_STREAMS_PER_TENANT": "2", "IGNARA_EVENT_STREAMS": "3"}
    server = Settings.from_env(env).server
    assert (server.event_streams_per_tenant, server.event_streams) == (2, 3)
    with pytest.raises(ValueError, match="IGNARA_EVENT_STREAMS must be a positive whole"):
        Settings.from_env({"IGNARA_EVENT_STREAMS": "0"})
