"""API key format, generation, keyed hashing and the in-memory store."""

from __future__ import annotations

import hashlib
import hmac
import re
from datetime import UTC, datetime

import pytest

from gateway.auth import (
    InMemoryApiKeyStore,
    ParsedKey,
    StoredKey,
    generate_api_key,
    hash_secret,
    parse_api_key,
    verify_secret,
)
from gateway.auth.keys import MAX_API_KEY_LENGTH, looks_like_api_key

PEPPER = b"pepper-for-tests-0123456789"
SECRET = "A" * 43
KEY_ID = "0123456789ab"
VALID = f"ign_live_{KEY_ID}_{SECRET}"


@pytest.mark.parametrize("env", ["live", "test", "staging2"])
def test_generated_keys_have_the_documented_format_and_parse_back(env: str) -> None:
    key = generate_api_key(env)
    assert re.fullmatch(rf"ign_{env}_[0-9a-f]{{12}}_[A-Za-z0-9_-]{{43}}", key.token)
    assert parse_api_key(key.token) == ParsedKey(env=env, key_id=key.key_id, secret=key.secret)
    assert key.last4 == key.token[-4:]


def test_generated_keys_are_unique() -> None:
    keys = [generate_api_key("live") for _ in range(200)]
    assert len({key.key_id for key in keys}) == len({key.secret for key in keys}) == 200


def test_reprs_never_show_secrets() -> None:
    key = generate_api_key("live")
    parsed = parse_api_key(key.token)
    stored = StoredKey(key.key_id, "acme", "bot", secret_hash=hash_secret(key.secret, PEPPER))
    for text in (repr(key), repr(parsed), repr(stored)):
        assert key.secret not in text
        assert stored.secret_hash not in text
    assert key.key_id in repr(key)


@pytest.mark.parametrize("env", ["", "x", "LIVE", "live_2", "1live", "a" * 17, "li ve"])
def test_generate_refuses_bad_environments(env: str) -> None:
    with pytest.raises(ValueError, match="env"):
        generate_api_key(env)


def test_a_valid_key_parses_into_its_parts() -> None:
    assert parse_api_key(VALID) == ParsedKey(env="live", key_id=KEY_ID, secret=SECRET)


def test_a_secret_may_contain_underscores_and_dashes() -> None:
    secret = "_-" * 21 + "x"
    parsed = parse_api_key(f"ign_test_{KEY_ID}_{secret}")
    assert parsed is not None and parsed.secret == secret


@pytest.mark.parametrize(
    "token",
    [
        pytest.param("", id="empty"),
        pytest.param(VALID.replace("ign_", "ing_"), id="wrong prefix"),
        pytest.param(VALID.replace("ign_", "IGN_"), id="upper-case prefix"),
        pytest.param(f"ign__{KEY_ID}_{SECRET}", id="no env"),
        pytest.param(f"ign_LIVE_{KEY_ID}_{SECRET}", id="upper-case env"),
        pytest.param(f"ign_live_0123456789AB_{SECRET}", id="upper-case key id"),
        pytest.param(f"ign_live_0123456789a_{SECRET}", id="key id too short"),
        pytest.param(f"ign_live_0123456789abc_{SECRET}", id="key id too long"),
        pytest.param(f"ign_live_0123456789ag_{SECRET}", id="key id not hex"),
        pytest.param(f"ign_live_{KEY_ID}_{SECRET[:-1]}", id="secret too short"),
        pytest.param(f"ign_live_{KEY_ID}_{SECRET}A", id="secret too long"),
        pytest.param(f"ign_live_{KEY_ID}_{SECRET[:-1]}=", id="secret with padding"),
        pytest.param(f"ign_live_{KEY_ID}_{SECRET[:-1]}é", id="secret not ASCII"),
        pytest.param(f" {VALID}", id="leading space"),
        pytest.param(f"{VALID}\n", id="trailing newline"),
        pytest.param(f"ign_live_{KEY_ID}", id="no secret"),
        pytest.param("ign_" + "a" * 10_000, id="huge"),
    ],
)
def test_malformed_keys_do_not_parse(token: str) -> None:
    assert parse_api_key(token) is None


def test_the_maximum_length_covers_the_longest_environment() -> None:
    longest = f"ign_{'a' * 16}_{KEY_ID}_{SECRET}"
    assert len(longest) == MAX_API_KEY_LENGTH
    assert parse_api_key(longest) is not None


@pytest.mark.parametrize(
    ("token", "expected"),
    [(VALID, True), ("ign_anything", True), ("eyJhbGciOi.x.y", False), ("sk-live", False)],
)
def test_looks_like_api_key(token: str, expected: bool) -> None:
    assert looks_like_api_key(token) is expected


def test_hash_is_hmac_sha256_hex_and_depends_on_the_pepper() -> None:
    digest = hash_secret(SECRET, PEPPER)
    assert re.fullmatch(r"[0-9a-f]{64}", digest)
    assert digest == hash_secret(SECRET, PEPPER)
    assert digest != hash_secret(SECRET, PEPPER + b"x")
    assert digest != hash_secret(SECRET[:-1] + "B", PEPPER)
    # Known answer: HMAC-SHA256(key=PEPPER, msg=SECRET).
    assert digest == hmac.new(PEPPER, SECRET.encode(), hashlib.sha256).hexdigest()


@pytest.mark.parametrize("pepper", [b"", b"short"])
def test_hash_refuses_a_short_pepper(pepper: bytes) -> None:
    with pytest.raises(ValueError, match="pepper"):
        hash_secret(SECRET, pepper)


STORED = hash_secret(SECRET, PEPPER)


@pytest.mark.parametrize(
    ("secret", "stored", "pepper", "expected"),
    [
        pytest.param(SECRET, STORED, PEPPER, True, id="right secret"),
        pytest.param("B" * 43, STORED, PEPPER, False, id="wrong secret"),
        pytest.param(SECRET, STORED, PEPPER + b"!", False, id="wrong pepper"),
        pytest.param(SECRET, STORED.upper(), PEPPER, False, id="hash in upper case"),
        pytest.param(SECRET, STORED[:-1], PEPPER, False, id="truncated hash"),
        pytest.param(SECRET, "", PEPPER, False, id="empty hash"),
        pytest.param(SECRET, "é" * 64, PEPPER, False, id="non-ASCII hash"),
    ],
)
def test_verify_secret(secret: str, stored: str, pepper: bytes, expected: bool) -> None:
    assert verify_secret(secret, stored, pepper) is expected


async def test_in_memory_store_gets_touches_and_revokes() -> None:
    stored = StoredKey(KEY_ID, "acme", "bot", secret_hash=STORED, roles=frozenset({"member"}))
    store = InMemoryApiKeyStore([stored])
    assert await store.get(KEY_ID) == stored
    assert await store.get("ffffffffffff") is None
    when = datetime(2026, 1, 1, tzinfo=UTC)
    await store.touch(KEY_ID, when)
    await store.touch("ffffffffffff", when)
    assert store.last_used(KEY_ID) == when
    assert store.last_used("ffffffffffff") is None
    store.revoke(KEY_ID, when)
    revoked = await store.get(KEY_ID)
    assert revoked is not None and revoked.revoked_at == when
