"""What the handlers share, built once per app and connected in its lifespan."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from litestar import Litestar

from gateway.admission import AdmissionRuntime
from gateway.auth import Authenticator, OidcSettings, OidcVerifier
from gateway.auth.store import SqlApiKeyStore
from gateway.backends import Backend, LocalBackend
from gateway.policy import PolicyEngine, create_policy_engine, load_policies
from gateway.policy.data import config_version, policy_data
from gateway.settings import Settings
from tenants import Database

__all__ = ["Services", "load_pepper", "oidc_verifier"]

log = logging.getLogger(__name__)


@dataclass
class Services:
    """What the handlers share: built by :func:`create_app`, connected at start-up."""

    settings: Settings
    database: Database
    authenticator: Authenticator
    pepper: bytes
    policy: PolicyEngine
    backends: dict[str, Backend] = field(default_factory=dict)
    runtime: AdmissionRuntime | None = None
    config_version: int | None = None
    _watcher: asyncio.Task[None] | None = None

    @classmethod
    def build(cls, settings: Settings) -> Services:
        database = Database(settings.database.url)
        pepper = load_pepper(settings)
        authenticator = Authenticator(
            api_keys=SqlApiKeyStore(database),
            pepper=pepper,
            oidc=oidc_verifier(settings),
            bootstrap_key=settings.auth.admin_key,
        )
        backends: dict[str, Backend] = {"local": LocalBackend(Path(settings.backends.local_root))}
        policy = create_policy_engine(
            settings.policy.opa_url, timeout=settings.policy.timeout_seconds
        )
        return cls(settings, database, authenticator, pepper, policy, backends)

    async def reload_policy(self) -> None:
        """Load the policies with data as the database now says (after any change)."""
        async with self.database.snapshot() as session:
            version = await config_version(session)
            data = await policy_data(session, self.backends)
        await self.policy.load(load_policies(Path(self.settings.policy.directory)), data)
        self.config_version = version

    async def watch_config(self, interval: float = 1.0) -> None:
        """Another replica may change the config: reload when the audit log moves."""
        while True:
            await asyncio.sleep(interval)
            try:
                async with self.database.session() as session:
                    version = await config_version(session)
                if version != self.config_version:
                    await self.reload_policy()
            except asyncio.CancelledError:
                raise
            except Exception:  # the top of a background task: log, never die
                log.exception("cannot reload the policy data; retrying")

    @asynccontextmanager
    async def lifespan(self, _: Litestar) -> AsyncIterator[None]:
        await self.database.migrate()
        await self.reload_policy()
        self._watcher = asyncio.create_task(self.watch_config(), name="ignara-config-watch")
        self.runtime = AdmissionRuntime(self.database, self.backends)
        await self.runtime.start()
        try:
            yield
        finally:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
            await self.runtime.stop()
            for backend in self.backends.values():
                await backend.close()
            await self.authenticator.aclose()
            await self.policy.close()
            await self.database.dispose()


def oidc_verifier(settings: Settings) -> OidcVerifier | None:
    """An OIDC verifier when an issuer is configured; it needs audience and JWKS URI too."""
    auth = settings.auth
    if auth.oidc_issuer is None:
        return None
    if auth.oidc_audience is None or auth.oidc_jwks_uri is None:
        raise ValueError("OIDC_ISSUER needs OIDC_AUDIENCE and OIDC_JWKS_URI as well")
    return OidcVerifier(
        OidcSettings(
            issuer=auth.oidc_issuer,
            audience=auth.oidc_audience,
            jwks_uri=auth.oidc_jwks_uri,
            tenant_claim=auth.oidc_tenant_claim,
            roles_claim=auth.oidc_roles_claim,
        )
    )


def load_pepper(settings: Settings) -> bytes:
    """The API-key pepper: from the settings, or a random one kept in a private file."""
    if settings.auth.pepper:
        return settings.auth.pepper.encode()
    path = Path(settings.auth.pepper_file)
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as file:
            file.write(secrets.token_urlsafe(32))
    return path.read_text().strip().encode()
