"""The Litestar application factory: named steps, nothing connects before start-up."""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from litestar import Litestar
from litestar.datastructures import State
from litestar.di import Provide
from litestar.openapi.config import OpenAPIConfig

from gateway.admin import AdminController
from gateway.admission import AdmissionRuntime
from gateway.auth import Authenticator, auth_middleware
from gateway.auth.store import SqlApiKeyStore
from gateway.backends import Backend, LocalBackend
from gateway.errors import exception_handlers
from gateway.health import HealthController
from gateway.settings import Settings
from gateway.workloads import WorkloadController
from tenants import Database

__all__ = ["MAX_BODY_BYTES", "Services", "create_app"]

MAX_BODY_BYTES = 1024 * 1024


@dataclass
class Services:
    """What the handlers share: built by :func:`create_app`, connected at start-up."""

    settings: Settings
    database: Database
    authenticator: Authenticator
    pepper: bytes
    backends: dict[str, Backend] = field(default_factory=dict)
    runtime: AdmissionRuntime | None = None

    @classmethod
    def build(cls, settings: Settings) -> Services:
        database = Database(settings.database.url)
        pepper = load_pepper(settings)
        authenticator = Authenticator(
            api_keys=SqlApiKeyStore(database),
            pepper=pepper,
            bootstrap_key=settings.auth.admin_key,
        )
        backends: dict[str, Backend] = {"local": LocalBackend(Path(settings.backends.local_root))}
        return cls(settings, database, authenticator, pepper, backends)

    @asynccontextmanager
    async def lifespan(self, _: Litestar) -> AsyncIterator[None]:
        await self.database.migrate()
        self.runtime = AdmissionRuntime(self.database, self.backends)
        await self.runtime.start()
        try:
            yield
        finally:
            await self.runtime.stop()
            for backend in self.backends.values():
                await backend.close()
            await self.authenticator.aclose()
            await self.database.dispose()


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


def create_app(settings: Settings | None = None) -> Litestar:
    services = Services.build(settings or Settings.from_env())
    return Litestar(
        route_handlers=[HealthController, WorkloadController, AdminController],
        dependencies={
            "database": Provide(lambda: services.database, sync_to_thread=False),
            "backends": Provide(lambda: services.backends, sync_to_thread=False),
            "pepper": Provide(lambda: services.pepper, sync_to_thread=False),
        },
        middleware=[auth_middleware(services.authenticator)],
        exception_handlers=exception_handlers,
        lifespan=[services.lifespan],
        request_max_body_size=MAX_BODY_BYTES,
        openapi_config=OpenAPIConfig(title="Ignara Gateway", version="0.1.0", path="/schema"),
        state=State({"services": services}),
    )
