"""Authentication: Ignara API keys, OIDC access tokens and the bootstrap admin key.

Usage::

    from gateway.auth import Authenticator, OidcSettings, OidcVerifier, auth_middleware

    authenticator = Authenticator(
        api_keys=store,  # an ApiKeyStore (SQL in tenants/)
        pepper=settings.api_key_pepper,
        oidc=OidcVerifier(OidcSettings(issuer=..., audience=..., jwks_uri=...)),
        bootstrap_key=settings.admin_key,
    )
    app = Litestar(..., middleware=[auth_middleware(authenticator)],
                   on_shutdown=[authenticator.aclose])
"""

from gateway.auth.authenticator import Authenticator, bearer_token
from gateway.auth.errors import (
    AuthenticationError,
    ExpiredApiKeyError,
    ExpiredTokenError,
    InvalidApiKeyError,
    InvalidAudienceError,
    InvalidCredentialsError,
    InvalidIssuerError,
    InvalidTokenError,
    JwksUnavailableError,
    MissingCredentialsError,
    RevokedApiKeyError,
    TokenNotYetValidError,
    TokenTooLargeError,
    UnknownKeyIdError,
    UnsupportedAlgorithmError,
)
from gateway.auth.identity import ANY_TENANT, AuthMethod, Identity
from gateway.auth.keys import (
    ApiKeyStore,
    GeneratedKey,
    InMemoryApiKeyStore,
    ParsedKey,
    StoredKey,
    generate_api_key,
    hash_secret,
    parse_api_key,
    verify_secret,
)
from gateway.auth.middleware import DEFAULT_EXCLUDE_PATHS, AuthenticationMiddleware, auth_middleware
from gateway.auth.oidc import JwksCache, OidcSettings, OidcVerifier

__all__ = [
    "ANY_TENANT",
    "DEFAULT_EXCLUDE_PATHS",
    "ApiKeyStore",
    "AuthMethod",
    "AuthenticationError",
    "AuthenticationMiddleware",
    "Authenticator",
    "ExpiredApiKeyError",
    "ExpiredTokenError",
    "GeneratedKey",
    "Identity",
    "InMemoryApiKeyStore",
    "InvalidApiKeyError",
    "InvalidAudienceError",
    "InvalidCredentialsError",
    "InvalidIssuerError",
    "InvalidTokenError",
    "JwksCache",
    "JwksUnavailableError",
    "MissingCredentialsError",
    "OidcSettings",
    "OidcVerifier",
    "ParsedKey",
    "RevokedApiKeyError",
    "StoredKey",
    "TokenNotYetValidError",
    "TokenTooLargeError",
    "UnknownKeyIdError",
    "UnsupportedAlgorithmError",
    "auth_middleware",
    "bearer_token",
    "generate_api_key",
    "hash_secret",
    "parse_api_key",
    "verify_secret",
]
