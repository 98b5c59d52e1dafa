"""The settings behind failing fast: how long Redis may take (a short default, which
REDIS_URL's own options still override), and how long keys are cached and may stand
in for an unavailable database."""

from __future__ import annotations

import pytest

from gateway.ledgers import RedisLedger, create_ledger
from gateway.settings import Settings
from quota.model import QuotaConfig


def test_the_defaults_fail_fast() -> None:
    settings = Settings.from_env({})
    assert settings.inference.redis_timeout == 0.5
    assert settings.auth.key_cache_seconds == 5.0
    assert settings.auth.key_stale_seconds == 600.0
    assert settings.auth.key_lookup_timeout == 2.0


def test_each_is_set_from_the_environment() -> None:
    settings = Settings.from_env(
        {
            "IGNARA_REDIS_TIMEOUT": "0.25",
            "IGNARA_KEY_CACHE_SECONDS": "2",
            "IGNARA_KEY_STALE_SECONDS": "0",
            "IGNARA_KEY_LOOKUP_TIMEOUT": "0.5",
        }
    )
    assert settings.inference.redis_timeout == 0.25
    assert settings.auth.key_cache_seconds == 2.0
    assert settings.auth.key_stale_seconds == 0.0
    assert settings.auth.key_lookup_timeout == 0.5


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("IGNARA_REDIS_TIMEOUT", "0"),
        ("IGNARA_REDIS_TIMEOUT", "soon"),
        ("IGNARA_KEY_CACHE_SECONDS", "-1"),
        ("IGNARA_KEY_STALE_SECONDS", "inf"),
        ("IGNARA_KEY_STALE_SECONDS", "nan"),
        ("IGNARA_KEY_LOOKUP_TIMEOUT", "0"),
    ],
)
def test_a_bad_value_is_refused_by_name(name: str, value: str) -> None:
    with pytest.raises(ValueError, match=name):
        Settings.from_env({name: value})


def test_the_redis_pool_gets_the_timeout_unless_the_url_says_otherwise() -> None:
    def options(url: str, timeout: float) -> tuple[float, float]:
        ledger = create_ledger(url, QuotaConfig(), timeout=timeout)
        assert isinstance(ledger, RedisLedger)
        kwargs = ledger._redis.connection_pool.connection_kwargs
        return kwargs["socket_timeout"], kwargs["socket_connect_timeout"]

    # Nothing connects: a pool is only configured.
    assert options("redis://127.0.0.1:1/0", 0.25) == (0.25, 0.25)
    assert options("redis://127.0.0.1:1/0?socket_timeout=2", 0.25) == (2.0, 0.25)
    assert options("redis://127.0.0.1:1/0?socket_connect_timeout=3", 0.25) == (0.25, 3.0)
