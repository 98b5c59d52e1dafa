"""The admin console's sessions and its sign-in throttle, shared by every replica."""

from __future__ import annotations

from datetime import datetime

from sqlmodel import Field, SQLModel

from tenants.models._base import json_field, timestamp_field

__all__ = ["ConsoleSessionRow", "SignInAttemptRow"]


class ConsoleSessionRow(SQLModel, table=True):
    """One browser's console session.

    The browser holds the session id; this row holds only its SHA-256, so a copy of the
    database signs no one in. ``kind`` says what the session acts as: nothing yet
    (``""``: the sign-in form's session), an API key (``key_id`` and ``fingerprint``,
    which of the key's secrets signed in), the bootstrap admin key (``fingerprint``), or
    an OIDC principal (``tenant``, ``principal``, ``roles``, ``scopes``); the raw key is
    never stored. ``sealed`` (a one-time message for the next page, or a pending OIDC
    sign-in's state, nonce and PKCE verifier) is encrypted with a key derived from the
    session id, which the database does not have.
    """

    __tablename__ = "console_sessions"

    id_hash: str = Field(primary_key=True, max_length=64)
    csrf: str = Field(max_length=64)
    kind: str = Field(default="", max_length=16, index=True)
    key_id: str | None = Field(default=None, max_length=40, nullable=True, index=True)
    fingerprint: str | None = Field(default=None, max_length=64, nullable=True)
    tenant: str | None = Field(default=None, max_length=128, nullable=True)
    principal: str = Field(default="", max_length=256)
    roles: list[str] = json_field(list)
    scopes: list[str] = json_field(list)
    sealed: str | None = Field(default=None, max_length=8192, nullable=True)
    created_at: datetime = timestamp_field()
    seen_at: datetime = timestamp_field(index=True)
    expires_at: datetime = timestamp_field(index=True)


class SignInAttemptRow(SQLModel, table=True):
    """Console sign-in attempts in the current window of one bucket (a client address
    or a key prefix, named by its SHA-256)."""

    __tablename__ = "console_sign_in_attempts"

    bucket: str = Field(primary_key=True, max_length=64)
    window_start: datetime = timestamp_field()
    attempts: int = Field(default=0)
