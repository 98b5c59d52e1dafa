"""OIDC access tokens against a local JWKS server: what is accepted, what is refused and why."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from joserfc.jwk import OctKey, RSAKey

from gateway.auth import (
    AuthenticationError,
    Identity,
    JwksCache,
    OidcSettings,
    OidcVerifier,
)
from tests.auth.conftest import (
    AUDIENCE,
    ISSUER,
    FakeClock,
    FromNow,
    JwksServer,
    SigningKeys,
    claims,
    public_jwks,
    serve_jwks,
    sign,
)


def make_verifier(server: JwksServer, clock: FakeClock, **overrides: Any) -> OidcVerifier:
    options: dict[str, Any] = {"jwks_timeout_seconds": 2.0} | overrides
    settings = OidcSettings(issuer=ISSUER, audience=AUDIENCE, jwks_uri=server.url, **options)
    return OidcVerifier(settings, jwks=JwksCache.from_settings(settings, clock=clock))


@pytest.fixture
async def verifier(jwks_server: JwksServer, clock: FakeClock) -> AsyncIterator[OidcVerifier]:
    verifier = make_verifier(jwks_server, clock)
    yield verifier
    await verifier.aclose()


async def refusal(verifier: OidcVerifier, token: str) -> str:
    with pytest.raises(AuthenticationError) as info:
        await verifier.verify_token(token)
    return info.value.code


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsigned(header: dict[str, Any], body: dict[str, Any], signature: str = "") -> str:
    return f"{b64(json.dumps(header).encode())}.{b64(json.dumps(body).encode())}.{signature}"


# --- accepted ----------------------------------------------------------------------------


async def test_a_valid_rs256_token_is_mapped_to_an_identity(
    verifier: OidcVerifier, keys: SigningKeys
) -> None:
    identity = await verifier.verify_token(sign(keys.rsa, claims(roles=["member", "admin"])))
    assert identity == Identity(
        tenant="acme",
        principal="alice",
        roles=frozenset({"member", "admin"}),
        scopes=frozenset({"workloads:read", "workloads:write"}),
        via="oidc",
    )


async def test_a_valid_es256_token_is_accepted(verifier: OidcVerifier, keys: SigningKeys) -> None:
    assert (await verifier.verify_token(sign(keys.ec))).principal == "alice"


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param({"aud": ["other-api", AUDIENCE]}, id="audience among several"),
        pytest.param({"exp": FromNow(-20)}, id="expired 20 s ago, inside the leeway"),
        pytest.param({"nbf": FromNow(20)}, id="valid in 20 s, inside the leeway"),
        pytest.param({"roles": None, "scope": None}, id="no roles and no scopes"),
    ],
)
async def test_tokens_within_the_rules_are_accepted(
    verifier: OidcVerifier, keys: SigningKeys, overrides: dict[str, Any]
) -> None:
    assert (await verifier.verify_token(sign(keys.rsa, claims(**overrides)))).tenant == "acme"


async def test_claim_names_can_be_namespaced_or_dotted_paths(
    jwks_server: JwksServer, clock: FakeClock, keys: SigningKeys
) -> None:
    verifier = make_verifier(
        jwks_server,
        clock,
        tenant_claim="https://ignara.example/tenant",
        roles_claim="realm_access.roles",
        scopes_claim="scp",
    )
    body = claims(
        tenant=None,
        roles=None,
        **{
            "https://ignara.example/tenant": "globex",
            "realm_access": {"roles": ["tenant-admin"]},
            "scp": ["openid", "usage:read"],
        },
    )
    identity = await verifier.verify_token(sign(keys.rsa, body))
    await verifier.aclose()
    assert (identity.tenant, identity.roles, identity.scopes) == (
        "globex",
        frozenset({"tenant-admin"}),
        frozenset({"usage:read"}),  # scopes Ignara does not know are left out
    )


MEMBER_SCOPES = frozenset({"inference", "usage:read", "workloads:read", "workloads:write"})


@pytest.mark.parametrize(
    ("scope_claims", "scopes"),
    [
        pytest.param({"scope": None}, MEMBER_SCOPES, id="no scope claim: all the roles allow"),
        pytest.param({"scope": "openid profile"}, MEMBER_SCOPES, id="no Ignara scope named"),
        pytest.param({"scope": "openid usage:read"}, {"usage:read"}, id="Ignara scopes narrow"),
        pytest.param({"scope": None, "scp": ["inference"]}, {"inference"}, id="scp when no scope"),
        pytest.param(
            {"scope": "usage:read", "scp": ["inference"]}, {"usage:read"}, id="scope first"
        ),
        pytest.param(
            {"scope": "keys:write admin"}, {"keys:write", "admin"}, id="roles checked later"
        ),
    ],
)
async def test_a_tokens_scopes_narrow_its_roles(
    verifier: OidcVerifier, keys: SigningKeys, scope_claims: dict[str, Any], scopes: set[str]
) -> None:
    identity = await verifier.verify_token(sign(keys.rsa, claims(**scope_claims)))
    assert identity.scopes == frozenset(scopes)


async def test_a_tokens_admin_role_makes_no_platform_admin(
    verifier: OidcVerifier, keys: SigningKeys
) -> None:
    identity = await verifier.verify_token(sign(keys.rsa, claims(roles=["admin"], scope=None)))
    assert identity.roles == frozenset({"admin"}) and identity.tenant == "acme"
    assert not identity.is_admin
    assert identity.scopes == frozenset()  # a tenant's principal: admin allows it nothing


async def test_roles_may_be_one_space_separated_string(
    verifier: OidcVerifier, keys: SigningKeys
) -> None:
    identity = await verifier.verify_token(sign(keys.rsa, claims(roles="member admin")))
    assert identity.roles == frozenset({"member", "admin"})


# --- refused -----------------------------------------------------------------------------

REFUSED_CLAIMS = [
    pytest.param({"exp": FromNow(-600)}, "expired_token", id="expired 10 min ago"),
    pytest.param({"nbf": FromNow(300)}, "token_not_yet_valid", id="not valid for 5 min"),
    pytest.param({"iat": FromNow(300)}, "token_not_yet_valid", id="issued in 5 min"),
    pytest.param({"iss": "https://evil.example.test"}, "invalid_issuer", id="wrong issuer"),
    pytest.param({"aud": "someone-else"}, "invalid_audience", id="wrong audience"),
    pytest.param({"aud": ["a", "b"]}, "invalid_audience", id="audience list without ours"),
    pytest.param({"exp": None}, "invalid_token", id="no exp"),
    pytest.param({"sub": None}, "invalid_token", id="no sub"),
    pytest.param({"iss": None}, "invalid_token", id="no iss"),
    pytest.param({"aud": None}, "invalid_token", id="no aud"),
    pytest.param({"sub": ""}, "invalid_token", id="empty sub"),
    pytest.param({"exp": FromNow(400 * 24 * 3600)}, "invalid_token", id="exp a year away"),
    pytest.param({"exp": "tomorrow"}, "invalid_token", id="exp not a number"),
    pytest.param({"tenant": None}, "invalid_token", id="no tenant"),
    pytest.param({"tenant": "*"}, "invalid_token", id="wildcard tenant"),
    pytest.param({"tenant": ["acme"]}, "invalid_token", id="tenant not a string"),
    pytest.param({"roles": [1, 2]}, "invalid_token", id="roles not strings"),
    pytest.param({"roles": {"admin": True}}, "invalid_token", id="roles an object"),
    pytest.param({"roles": [f"r{i}" for i in range(100)]}, "invalid_token", id="100 roles"),
]


@pytest.mark.parametrize(("overrides", "code"), REFUSED_CLAIMS)
async def test_tokens_with_bad_claims_are_refused(
    verifier: OidcVerifier, keys: SigningKeys, overrides: dict[str, Any], code: str
) -> None:
    assert await refusal(verifier, sign(keys.rsa, claims(**overrides))) == code


async def test_a_token_forged_with_another_key_under_a_known_kid_is_refused(
    verifier: OidcVerifier, keys: SigningKeys
) -> None:
    assert await refusal(verifier, sign(keys.attacker)) == "invalid_token"


async def test_a_token_with_altered_claims_is_refused(
    verifier: OidcVerifier, keys: SigningKeys
) -> None:
    header, _, signature = sign(keys.rsa).split(".")
    altered = b64(json.dumps(claims(tenant="globex")).encode())
    assert await refusal(verifier, f"{header}.{altered}.{signature}") == "invalid_token"


@pytest.mark.parametrize("signature", ["", "c2ln"], ids=["empty signature", "any signature"])
@pytest.mark.parametrize("alg", ["none", "None", "NONE"])
async def test_alg_none_is_refused(
    verifier: OidcVerifier, jwks_server: JwksServer, alg: str, signature: str
) -> None:
    token = unsigned({"alg": alg, "kid": "rsa-1"}, claims(), signature)
    assert await refusal(verifier, token) == "unsupported_algorithm"
    assert jwks_server.hits == 0


async def test_hs256_signed_with_the_rsa_public_key_is_refused(
    verifier: OidcVerifier, keys: SigningKeys
) -> None:
    pem = keys.rsa.as_pem(private=False)
    header = b64(json.dumps({"alg": "HS256", "kid": "rsa-1", "typ": "JWT"}).encode())
    body = b64(json.dumps(claims()).encode())
    mac = hmac.new(pem, f"{header}.{body}".encode(), hashlib.sha256).digest()
    assert await refusal(verifier, f"{header}.{body}.{b64(mac)}") == "unsupported_algorithm"


async def test_hs256_with_a_shared_secret_is_refused(verifier: OidcVerifier) -> None:
    secret = OctKey.generate_key(256, parameters={"kid": "rsa-1", "alg": "HS256"})
    assert await refusal(verifier, sign(secret)) == "unsupported_algorithm"


async def test_an_algorithm_outside_the_allow_list_is_refused(
    verifier: OidcVerifier, keys: SigningKeys
) -> None:
    other = RSAKey.import_key(keys.rsa.as_dict(private=True) | {"alg": "RS384"})
    assert await refusal(verifier, sign(other)) == "unsupported_algorithm"


async def test_an_allowed_algorithm_with_the_wrong_key_type_is_refused(
    verifier: OidcVerifier, keys: SigningKeys
) -> None:
    # Signed with the EC key as ES256, but naming the RSA key's kid.
    assert await refusal(verifier, sign(keys.ec, kid="rsa-1")) == "invalid_token"


async def test_a_token_without_kid_is_refused_when_the_issuer_has_several_keys(
    verifier: OidcVerifier, keys: SigningKeys
) -> None:
    assert await refusal(verifier, sign(keys.rsa, kid=None)) == "unknown_kid"


async def test_a_token_without_kid_is_accepted_when_the_issuer_has_one_key(
    clock: FakeClock, keys: SigningKeys
) -> None:
    with serve_jwks(public_jwks(keys.rsa)) as server:
        verifier = make_verifier(server, clock)
        identity = await verifier.verify_token(sign(keys.rsa, kid=None))
        await verifier.aclose()
    assert identity.principal == "alice"


async def test_an_oversized_token_is_refused_before_any_fetch(
    verifier: OidcVerifier, jwks_server: JwksServer, keys: SigningKeys
) -> None:
    token = sign(keys.rsa, claims(padding="x" * 20_000))
    assert await refusal(verifier, token) == "token_too_large"
    assert jwks_server.hits == 0


@pytest.mark.parametrize(
    "token",
    [
        pytest.param("a.b.c", id="not base64 JSON"),
        pytest.param("eyJhbGciOiJSUzI1NiJ9.e30", id="two parts"),
        pytest.param("a.b.c.d.e", id="five parts (JWE)"),
        pytest.param(unsigned({"kid": "rsa-1"}, claims(), "c2ln"), id="no alg"),
        pytest.param(unsigned({"alg": "RS256", "kid": 7}, claims(), "c2ln"), id="kid a number"),
        pytest.param(unsigned({"alg": "RS256", "kid": "rsa-1"}, [1], "c2ln"), id="claims a list"),  # type: ignore[arg-type]
        pytest.param("ey.ey.ey ", id="trailing space"),
        pytest.param("", id="empty"),
    ],
)
async def test_malformed_tokens_are_refused(verifier: OidcVerifier, token: str) -> None:
    assert await refusal(verifier, token) == "invalid_token"


async def test_a_jku_header_is_never_followed(
    verifier: OidcVerifier, keys: SigningKeys, jwks_server: JwksServer
) -> None:
    evil = RSAKey.generate_key(2048, parameters={"kid": "evil", "alg": "RS256"})
    with serve_jwks(public_jwks(evil)) as attacker:
        token = sign(evil, jku=attacker.url)
        assert await refusal(verifier, token) == "unknown_kid"
    assert (attacker.hits, jwks_server.hits) == (0, 1)


# --- the JWKS cache: unknown kids, rotation, outages -------------------------------------


async def test_unknown_kids_refetch_at_most_once_per_interval(
    verifier: OidcVerifier, jwks_server: JwksServer, keys: SigningKeys, clock: FakeClock
) -> None:
    bogus = [sign(keys.rsa, kid=f"bogus-{i}") for i in range(50)]
    await verifier.verify_token(sign(keys.rsa))
    assert jwks_server.hits == 1
    for token in bogus:
        assert await refusal(verifier, token) == "unknown_kid"
    assert jwks_server.hits == 1  # the first fetch was just now: no refetch yet
    clock.advance(31)
    for token in bogus:
        assert await refusal(verifier, token) == "unknown_kid"
    assert jwks_server.hits == 2  # one refetch for the lot
    assert verifier.jwks.fetch_count == 2


async def test_concurrent_unknown_kids_share_one_fetch(
    verifier: OidcVerifier, jwks_server: JwksServer, keys: SigningKeys
) -> None:
    tokens = [sign(keys.rsa, kid=f"bogus-{i}") for i in range(20)]
    results = await asyncio.gather(
        *(verifier.verify_token(token) for token in tokens), return_exceptions=True
    )
    assert {getattr(result, "code", None) for result in results} == {"unknown_kid"}
    assert jwks_server.hits == 1


async def test_a_rotated_key_is_picked_up_after_the_interval(
    verifier: OidcVerifier, jwks_server: JwksServer, keys: SigningKeys, clock: FakeClock
) -> None:
    await verifier.verify_token(sign(keys.rsa))
    jwks_server.document = public_jwks(keys.rsa_next, keys.ec)  # the issuer rotates
    new_token = sign(keys.rsa_next)
    clock.advance(5)
    assert await refusal(verifier, new_token) == "unknown_kid"  # too soon to refetch
    clock.advance(30)
    assert (await verifier.verify_token(new_token)).principal == "alice"
    assert jwks_server.hits == 2
    assert await refusal(verifier, sign(keys.rsa)) == "unknown_kid"  # the old key is gone


async def test_the_cache_is_refreshed_after_its_ttl(
    verifier: OidcVerifier, jwks_server: JwksServer, keys: SigningKeys, clock: FakeClock
) -> None:
    await verifier.verify_token(sign(keys.rsa))
    clock.advance(3601)
    await verifier.verify_token(sign(keys.rsa))
    assert jwks_server.hits == 2


async def test_cached_keys_outlive_an_issuer_outage(
    verifier: OidcVerifier, jwks_server: JwksServer, keys: SigningKeys, clock: FakeClock
) -> None:
    await verifier.verify_token(sign(keys.rsa))
    jwks_server.mode = "error"
    clock.advance(3601)
    assert (await verifier.verify_token(sign(keys.rsa))).tenant == "acme"
    assert jwks_server.hits == 2


@pytest.mark.parametrize("mode", ["error", "garbage", "huge", "huge-unsized", "hang"])
async def test_an_unreachable_or_misbehaving_issuer_is_a_bounded_503(
    jwks_server: JwksServer, keys: SigningKeys, clock: FakeClock, mode: str
) -> None:
    jwks_server.mode = mode
    verifier = make_verifier(jwks_server, clock, jwks_timeout_seconds=0.3)
    started = time.monotonic()
    assert await refusal(verifier, sign(keys.rsa)) == "jwks_unavailable"
    assert time.monotonic() - started < 2
    assert await refusal(verifier, sign(keys.rsa)) == "jwks_unavailable"
    assert jwks_server.hits == 1  # failures are rate-limited too
    await verifier.aclose()


async def test_a_closed_port_is_a_503(keys: SigningKeys, clock: FakeClock) -> None:
    with serve_jwks({"keys": []}) as server:
        pass
    verifier = make_verifier(server, clock)  # stopped: its port is closed
    assert await refusal(verifier, sign(keys.rsa)) == "jwks_unavailable"
    await verifier.aclose()


@pytest.mark.filterwarnings("ignore:Key size should be:joserfc.errors.SecurityWarning")
async def test_unusable_keys_in_the_jwks_are_skipped(keys: SigningKeys, clock: FakeClock) -> None:
    small = RSAKey.generate_key(1024, parameters={"kid": "small", "alg": "RS256"}, private=True)
    secret = OctKey.generate_key(256, parameters={"kid": "oct", "alg": "HS256"})
    document = {
        "keys": [
            keys.rsa.as_dict(private=True),  # a private key published by mistake
            small.as_dict(private=False),
            secret.as_dict(private=True),
            keys.ec.as_dict(private=False) | {"use": "enc"},
            {"kty": "RSA", "kid": "broken", "n": "AQAB"},
            "not a key",
        ]
    }
    with serve_jwks(document) as server:
        verifier = make_verifier(server, clock)
        for key in (keys.rsa, small, keys.ec):
            assert await refusal(verifier, sign(key)) == "unknown_kid"
        assert await refusal(verifier, sign(secret)) == "unsupported_algorithm"
        await verifier.aclose()


# --- settings ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        pytest.param({"algorithms": ("HS256",)}, "asymmetric", id="HS256"),
        pytest.param({"algorithms": ("RS256", "none")}, "asymmetric", id="none"),
        pytest.param({"algorithms": ()}, "at least one", id="no algorithms"),
        pytest.param({"jwks_uri": "http://idp.example.test/certs"}, "https", id="plain http"),
        pytest.param({"jwks_uri": "file:///etc/passwd"}, "http(s)", id="file URL"),
        pytest.param({"jwks_uri": "/certs"}, "http(s)", id="relative URL"),
        pytest.param({"issuer": ""}, "issuer", id="no issuer"),
        pytest.param({"leeway_seconds": 3600}, "leeway", id="an hour of leeway"),
        pytest.param({"max_token_bytes": 0}, "max_token_bytes", id="zero token size"),
    ],
)
def test_unsafe_settings_are_refused(overrides: dict[str, Any], message: str) -> None:
    base: dict[str, Any] = {
        "issuer": ISSUER,
        "audience": AUDIENCE,
        "jwks_uri": "https://idp.example.test/certs",
    }
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        OidcSettings(**(base | overrides))


@pytest.mark.parametrize(
    ("uri", "insecure"),
    [
        ("https://idp.example.test/certs", False),
        ("http://127.0.0.1:8080/certs", False),
        ("http://localhost/certs", False),
        ("http://[::1]/certs", False),
        ("http://keycloak:8080/certs", True),
    ],
)
def test_safe_jwks_uris_are_accepted(uri: str, insecure: bool) -> None:
    settings = OidcSettings(
        issuer=ISSUER, audience=AUDIENCE, jwks_uri=uri, allow_insecure_jwks_uri=insecure
    )
    assert settings.algorithms == ("RS256", "ES256")
    assert settings.leeway_seconds == 30
