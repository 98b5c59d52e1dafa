"""The Litestar application factory."""

from __future__ import annotations

from litestar import Litestar
from litestar.openapi.config import OpenAPIConfig

from gateway.health import HealthController
from gateway.settings import Settings


def create_app(settings: Settings | None = None) -> Litestar:
    settings = settings or Settings.from_env()
    return Litestar(
        route_handlers=[HealthController],
        openapi_config=OpenAPIConfig(title="Ignara Gateway", version="0.1.0", path="/schema"),
        state={"settings": settings},
    )
