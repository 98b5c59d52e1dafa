"""The authenticator: API keys, the bootstrap admin key, OIDC tokens and the header."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from gateway.auth import (
    ANY_TENANT,
    AuthenticationError,
    Authenticator,
    Identity,
    InMemoryApiKeyStore,
    JwksCache,
    OidcSettings,
    OidcVerifier,
    StoredKey,
    bearer_token,
    generate_api_key,
    hash_secret,
    parse_api_key,
)
from tenants.services.access import SCOPES
from tests.auth.conftest import AUDIENCE, ISSUER, FakeClock, JwksServer, SigningKeys, sign

PEPPER = b"pepper-for-tests-0123456789"
ADMIN_KEY = "bootstrap-admin-key-0123456789"
NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


@dataclass
class ApiKeys:
    """Tokens of keys in every state, all stored in ``store``."""

    store: InMemoryApiKeyStore
    valid: str
    revoked: str
    expired: str
    expiring_later: str
    naive_expired: str
    unknown: str
    valid_id: str


def _stored(token_env: str = "live", **fields: object) -> tuple[str, StoredKey]:
    key = generate_api_key(token_env)
    stored = StoredKey(
        key_id=key.key_id,
        tenant="acme",
        principal="ci-bot",
        secret_hash=hash_secret(key.secret, PEPPER),
        roles=frozenset({"member"}),
        scopes=frozenset({"workloads:write"}),
        **fields,  # type: ignore[arg-type]
    )
    return key.token, stored


@pytest.fixture
def api_keys() -> ApiKeys:
    valid, valid_stored = _stored()
    revoked, revoked_stored = _stored(revoked_at=NOW - timedelta(days=1))
    expired, expired_stored = _stored(expires_at=NOW - timedelta(seconds=1))
    later, later_stored = _stored(expires_at=NOW + timedelta(days=1))
    naive, naive_stored = _stored(expires_at=(NOW - timedelta(hours=1)).replace(tzinfo=None))
    store = InMemoryApiKeyStore(
        [valid_stored, revoked_stored, expired_stored, later_stored, naive_stored]
    )
    return ApiKeys(
        store=store,
        valid=valid,
        revoked=revoked,
        expired=expired,
        expiring_later=later,
        naive_expired=naive,
        unknown=generate_api_key("live").token,
        valid_id=valid_stored.key_id,
    )


def make_authenticator(api_keys: ApiKeys, **options: object) -> Authenticator:
    defaults: dict[str, object] = {
        "api_keys": api_keys.store,
        "pepper": PEPPER,
        "bootstrap_key": ADMIN_KEY,
        "clock": lambda: NOW,
    }
    return Authenticator(**(defaults | options))  # type: ignore[arg-type]


async def refusal(authenticator: Authenticator, header: str | None) -> AuthenticationError:
    with pytest.raises(AuthenticationError) as info:
        await authenticator.authenticate(header)
    return info.value


# --- API keys ----------------------------------------------------------------------------


async def test_a_valid_api_key_gives_its_identity_and_is_touched(api_keys: ApiKeys) -> None:
    identity = await make_authenticator(api_keys).authenticate(f"Bearer {api_keys.valid}")
    assert identity == Identity(
        tenant="acme",
        principal="ci-bot",
        roles=frozenset({"member"}),
        scopes=frozenset({"workloads:write"}),
        via="api-key",
    )
    assert identity.key_id == api_keys.valid_id
    assert api_keys.store.last_used(api_keys.valid_id) == NOW


async def test_a_key_expiring_later_is_accepted(api_keys: ApiKeys) -> None:
    identity = await make_authenticator(api_keys).authenticate(f"Bearer {api_keys.expiring_later}")
    assert identity.tenant == "acme"


def _wrong_secret(token: str) -> str:
    return token[:-1] + ("A" if token[-1] != "A" else "B")


@pytest.mark.parametrize(
    ("pick", "code"),
    [
        pytest.param(lambda k: k.unknown, "invalid_api_key", id="unknown key id"),
        pytest.param(lambda k: _wrong_secret(k.valid), "invalid_api_key", id="wrong secret"),
        pytest.param(lambda k: k.revoked, "revoked_api_key", id="revoked"),
        pytest.param(lambda k: k.expired, "expired_api_key", id="expired"),
        pytest.param(lambda k: k.naive_expired, "expired_api_key", id="expired, naive time"),
        pytest.param(
            lambda k: _wrong_secret(k.revoked), "invalid_api_key", id="revoked, bad secret"
        ),
        pytest.param(
            lambda k: _wrong_secret(k.expired), "invalid_api_key", id="expired, bad secret"
        ),
        pytest.param(lambda k: k.valid[:-1], "invalid_api_key", id="truncated"),
        pytest.param(lambda k: k.valid + "x", "invalid_api_key", id="one char too many"),
        pytest.param(lambda k: "ign_live_nothex_secret", "invalid_api_key", id="malformed"),
        pytest.param(lambda k: k.valid.replace("_live_", "_test_"), "invalid_api_key", id="env"),
    ],
)
async def test_bad_api_keys_are_refused(
    api_keys: ApiKeys, pick: Callable[[ApiKeys], str], code: str
) -> None:
    token = pick(api_keys)
    error = await refusal(make_authenticator(api_keys, api_key_env="live"), f"Bearer {token}")
    assert error.code == code
    assert error.status_code == 401
    parsed = parse_api_key(token)  # the real secret; URL-safe secrets may contain "_"
    secret = parsed.secret if parsed is not None else token
    assert token not in str(error) and secret not in error.message
    assert api_keys.store.last_used(api_keys.valid_id) is None


async def test_api_keys_are_refused_when_no_store_is_configured(api_keys: ApiKeys) -> None:
    authenticator = Authenticator(bootstrap_key=ADMIN_KEY)
    assert (await refusal(authenticator, f"Bearer {api_keys.valid}")).code == "invalid_api_key"


async def test_keys_of_any_environment_are_accepted_unless_one_is_required(
    api_keys: ApiKeys,
) -> None:
    token, stored = _stored(token_env="test")
    api_keys.store.add(stored)
    assert (await make_authenticator(api_keys).authenticate(f"Bearer {token}")).tenant == "acme"
    error = await refusal(make_authenticator(api_keys, api_key_env="live"), f"Bearer {token}")
    assert error.code == "invalid_api_key"


# --- bootstrap admin key -----------------------------------------------------------------


async def test_the_bootstrap_key_is_the_admin(api_keys: ApiKeys) -> None:
    identity = await make_authenticator(api_keys).authenticate(f"Bearer {ADMIN_KEY}")
    assert identity == Identity(
        tenant=ANY_TENANT,
        principal="bootstrap-admin",
        roles=frozenset({"admin"}),
        scopes=frozenset(SCOPES),  # every scope there is
        via="bootstrap",
    )
    assert identity.is_admin and identity.has_role("admin")


@pytest.mark.parametrize("near_miss", [ADMIN_KEY[:-1], ADMIN_KEY + "0", ADMIN_KEY.upper()])
async def test_near_misses_of_the_bootstrap_key_are_refused(
    api_keys: ApiKeys, near_miss: str
) -> None:
    error = await refusal(make_authenticator(api_keys), f"Bearer {near_miss}")
    assert error.code == "invalid_credentials"
    assert near_miss not in error.message


async def test_without_a_bootstrap_key_nothing_is_admin(api_keys: ApiKeys) -> None:
    authenticator = make_authenticator(api_keys, bootstrap_key=None)
    assert (await refusal(authenticator, f"Bearer {ADMIN_KEY}")).code == "invalid_credentials"


async def test_a_bootstrap_key_in_api_key_format_still_works(api_keys: ApiKeys) -> None:
    admin = generate_api_key("live").token
    identity = await make_authenticator(api_keys, bootstrap_key=admin).authenticate(
        f"Bearer {admin}"
    )
    assert identity.via == "bootstrap"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"bootstrap_key": "short"}, "bootstrap"),
        ({"pepper": b"short"}, "pepper"),
        ({"pepper": None}, "pepper"),
    ],
)
def test_weak_secrets_in_settings_are_refused(
    api_keys: ApiKeys, options: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        make_authenticator(api_keys, **options)


# --- the header --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "code"),
    [
        pytest.param(None, "missing_credentials", id="absent"),
        pytest.param("", "missing_credentials", id="empty"),
        pytest.param("   ", "missing_credentials", id="blank"),
        pytest.param("Bearer", "invalid_credentials", id="scheme only"),
        pytest.param("Bearer ", "invalid_credentials", id="scheme and space"),
        pytest.param(f"Basic {ADMIN_KEY}", "invalid_credentials", id="basic scheme"),
        pytest.param(f"Token {ADMIN_KEY}", "invalid_credentials", id="token scheme"),
        pytest.param(f"Bearer {ADMIN_KEY} extra", "invalid_credentials", id="two tokens"),
        pytest.param(f"Bearer{ADMIN_KEY}", "invalid_credentials", id="no space"),
        pytest.param("Bearer some-random-opaque-token", "invalid_credentials", id="unknown kind"),
        pytest.param("Bearer " + "x" * 20_000, "token_too_large", id="huge"),
    ],
)
async def test_bad_authorization_headers_are_refused(
    api_keys: ApiKeys, header: str | None, code: str
) -> None:
    assert (await refusal(make_authenticator(api_keys), header)).code == code


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER"])
def test_the_scheme_is_case_insensitive(scheme: str) -> None:
    assert bearer_token(f"{scheme}   tok  ") == "tok"


async def test_a_jwt_is_refused_when_oidc_is_not_configured(api_keys: ApiKeys) -> None:
    jwt_shaped = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln"
    error = await refusal(make_authenticator(api_keys), f"Bearer {jwt_shaped}")
    assert error.code == "invalid_credentials"


# --- OIDC through the authenticator ------------------------------------------------------


@pytest.fixture
async def oidc(jwks_server: JwksServer, clock: FakeClock) -> AsyncIterator[OidcVerifier]:
    settings = OidcSettings(issuer=ISSUER, audience=AUDIENCE, jwks_uri=jwks_server.url)
    verifier = OidcVerifier(settings, jwks=JwksCache.from_settings(settings, clock=clock))
    yield verifier
    await verifier.aclose()


async def test_an_oidc_token_is_verified_when_oidc_is_configured(
    api_keys: ApiKeys, oidc: OidcVerifier, keys: SigningKeys
) -> None:
    signing = keys
    authenticator = make_authenticator(api_keys, oidc=oidc)
    identity = await authenticator.authenticate(f"Bearer {sign(signing.rsa)}")
    assert (identity.tenant, identity.via) == ("acme", "oidc")
    error = await refusal(authenticator, f"Bearer {sign(signing.attacker)}")
    assert error.code == "invalid_token"
    # API keys and the bootstrap key keep working beside OIDC.
    assert (await authenticator.authenticate(f"Bearer {api_keys.valid}")).via == "api-key"
    assert (await authenticator.authenticate(f"Bearer {ADMIN_KEY}")).via == "bootstrap"
    await authenticator.aclose()
