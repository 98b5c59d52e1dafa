"""Authentication failures, each with a stable ``code`` for the JSON error body.

AuthenticationError                  401  base; never carries a secret in its message
 +-- MissingCredentialsError         401  missing_credentials: no Authorization header
 +-- InvalidCredentialsError         401  invalid_credentials: not ``Bearer <token>``, or a
 |                                        token that is neither an API key nor a usable JWT
 +-- TokenTooLargeError              401  token_too_large
 +-- InvalidApiKeyError              401  invalid_api_key: malformed, unknown id, wrong secret
 |    +-- ExpiredApiKeyError         401  expired_api_key
 |    +-- RevokedApiKeyError         401  revoked_api_key
 +-- InvalidTokenError               401  invalid_token: malformed, bad signature, bad claims
 |    +-- UnsupportedAlgorithmError  401  unsupported_algorithm: ``none`` or not allowed
 |    +-- UnknownKeyIdError          401  unknown_kid: not in the JWKS, even after a refetch
 |    +-- ExpiredTokenError          401  expired_token: past ``exp`` beyond the leeway
 |    +-- TokenNotYetValidError      401  token_not_yet_valid: ``nbf``/``iat`` in the future
 |    +-- InvalidIssuerError         401  invalid_issuer
 |    +-- InvalidAudienceError       401  invalid_audience
 +-- JwksUnavailableError            503  jwks_unavailable: the issuer's keys cannot be fetched
 +-- DatabaseUnavailableError        503  database_unavailable: the key cannot be looked up (and
                                          this gateway has no recent verified copy of it)

A 503 says when to try again (``retry_after``, sent as ``Retry-After``): the key may
well be valid, so the caller should not treat it as refused.

Messages are fixed per class; the few that take a detail get only names (of a claim, an
algorithm), never a token, key or secret.
"""

from __future__ import annotations

from gateway.outages import DATABASE_RETRY_AFTER

__all__ = [
    "AuthenticationError",
    "DatabaseUnavailableError",
    "ExpiredApiKeyError",
    "ExpiredTokenError",
    "InvalidApiKeyError",
    "InvalidAudienceError",
    "InvalidCredentialsError",
    "InvalidIssuerError",
    "InvalidTokenError",
    "JwksUnavailableError",
    "MissingCredentialsError",
    "RevokedApiKeyError",
    "TokenNotYetValidError",
    "TokenTooLargeError",
    "UnknownKeyIdError",
    "UnsupportedAlgorithmError",
]


class AuthenticationError(Exception):
    """The caller could not be authenticated."""

    code: str = "authentication_failed"
    status_code: int = 401
    default_message: str = "Authentication failed."
    retry_after: str | None = None  # seconds, for a 503

    def __init__(self, message: str | None = None) -> None:
        self.message = message or self.default_message
        super().__init__(self.message)


class MissingCredentialsError(AuthenticationError):
    """No ``Authorization`` header was sent."""

    code = "missing_credentials"
    default_message = "Send an API key or an access token as 'Authorization: Bearer <token>'."


class InvalidCredentialsError(AuthenticationError):
    """The header is not ``Bearer <token>``, or the token is of no kind this gateway accepts."""

    code = "invalid_credentials"
    default_message = "The Authorization header does not carry a credential this gateway accepts."


class TokenTooLargeError(AuthenticationError):
    """The bearer token is longer than any credential this gateway issues or accepts."""

    code = "token_too_large"
    default_message = "The bearer token is too large."


class InvalidApiKeyError(AuthenticationError):
    """A malformed API key, an unknown key id, or a wrong secret (indistinguishable on purpose)."""

    code = "invalid_api_key"
    default_message = "The API key is not valid."


class ExpiredApiKeyError(InvalidApiKeyError):
    """The API key is genuine but past its expiry."""

    code = "expired_api_key"
    default_message = "The API key has expired."


class RevokedApiKeyError(InvalidApiKeyError):
    """The API key is genuine but was revoked."""

    code = "revoked_api_key"
    default_message = "The API key has been revoked."


class InvalidTokenError(AuthenticationError):
    """The access token is malformed, badly signed, or its claims are not acceptable."""

    code = "invalid_token"
    default_message = "The access token is not valid."


class UnsupportedAlgorithmError(InvalidTokenError):
    """The token's ``alg`` is ``none`` or outside the configured allow-list."""

    code = "unsupported_algorithm"
    default_message = "The access token's signing algorithm is not accepted."


class UnknownKeyIdError(InvalidTokenError):
    """The token's ``kid`` names no key of the issuer, even after a (rate-limited) refetch."""

    code = "unknown_kid"
    default_message = "The access token was signed with a key the issuer does not publish."


class ExpiredTokenError(InvalidTokenError):
    """The token's ``exp`` is past, beyond the allowed clock skew."""

    code = "expired_token"
    default_message = "The access token has expired."


class TokenNotYetValidError(InvalidTokenError):
    """The token's ``nbf`` or ``iat`` lies in the future, beyond the allowed clock skew."""

    code = "token_not_yet_valid"
    default_message = "The access token is not valid yet."


class InvalidIssuerError(InvalidTokenError):
    """The token's ``iss`` is not the configured issuer."""

    code = "invalid_issuer"
    default_message = "The access token was issued by an issuer this gateway does not trust."


class InvalidAudienceError(InvalidTokenError):
    """The token's ``aud`` does not include the configured audience."""

    code = "invalid_audience"
    default_message = "The access token is not meant for this gateway."


class JwksUnavailableError(AuthenticationError):
    """The issuer's JWKS cannot be fetched, so no token can be checked (not the caller's fault)."""

    code = "jwks_unavailable"
    status_code = 503
    default_message = "The identity provider's signing keys are unavailable; try again later."
    retry_after = "30"  # the JWKS is fetched again at most every 30 s (OidcSettings)


class DatabaseUnavailableError(AuthenticationError):
    """The API key cannot be looked up: the database is out of reach (not the caller's
    fault, and the key may be valid)."""

    code = "database_unavailable"
    status_code = 503
    default_message = (
        "The database is unavailable, so the API key cannot be checked; retry shortly."
    )
    retry_after = DATABASE_RETRY_AFTER
