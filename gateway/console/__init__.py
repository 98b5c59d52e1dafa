"""The admin web console at ``/console``: server-rendered pages over the public API.

Register it with ``route_handlers=[..., console_router()]``. Its routes skip the API's
bearer authentication (``exclude_from_auth``): a page is served to a signed-in session,
and whatever it reads or changes goes through the API with the session's own key
(:mod:`gateway.console.api`). Every console response carries a strict
Content-Security-Policy; every change needs the session's CSRF token.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from litestar import Router
from litestar.exceptions import ValidationException
from litestar.static_files import create_static_files_router
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from gateway.console.backends import BackendPages
from gateway.console.base import SignedOutError, bad_request, signed_out
from gateway.console.cohorts_flavors import CohortPages, FlavorPages
from gateway.console.keys import KeyPages
from gateway.console.models import ModelPages
from gateway.console.oidc import ConsoleOidc, OidcController
from gateway.console.pages import COOKIE, ConsoleController, ConsoleParts, check_csrf
from gateway.console.queues import QueuePages
from gateway.console.sessions import MemorySessionStore, SessionStore, SqlSessionStore
from gateway.console.settings_page import SettingsPages
from gateway.console.tenants import TenantPages
from gateway.console.throttle import MemoryThrottle, RedisThrottle, SignInThrottle, SqlThrottle
from gateway.console.workloads import WorkloadPages
from gateway.services import oidc_verifier
from gateway.settings import Settings
from tenants import Database

__all__ = ["COOKIE", "CSP", "STATIC", "console_router", "gateway_console"]

STATIC = Path(__file__).parent / "static"
"""The console's own CSS and JS, and under vendor/ the pinned front-end packages
``make install`` copies from gateway/console/assets (the OpenAPI page's Swagger UI)."""

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)

_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
]


def _secured(app: ASGIApp) -> ASGIApp:
    """Add the security headers to every console answer, errors included; pages (not the
    static assets) are never cached, as they show what one session may see."""

    async def secured(scope: Scope, receive: Receive, send: Send) -> None:
        static = scope.get("path", "").startswith("/console/static/")

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    (k, v)
                    for k, v in message.get("headers", [])
                    if static or k.lower() != b"cache-control"
                ]
                headers += _HEADERS
                if not static:
                    headers.append((b"cache-control", b"no-store"))
                message = {**message, "headers": headers}
            await send(message)

        await app(scope, receive, sending)

    return secured


def console_router(
    store: SessionStore | None = None,
    *,
    throttle: SignInThrottle | None = None,
    oidc: ConsoleOidc | None = None,
) -> Router:
    """The ``/console`` routes, with their session store and sign-in throttle (this
    process's memory unless given: the gateway gives its database's, and Redis's when
    it has one) and, when configured, the OIDC sign-in."""
    return Router(
        path="/console",
        route_handlers=[
            ConsoleController,
            OidcController,
            QueuePages,
            FlavorPages,
            CohortPages,
            SettingsPages,
            ModelPages,
            BackendPages,
            TenantPages,
            KeyPages,
            WorkloadPages,
            create_static_files_router(path="/static", directories=[STATIC], name="console-static"),
        ],
        middleware=[_secured],
        before_request=check_csrf,
        exception_handlers={SignedOutError: signed_out, ValidationException: bad_request},
        opt={
            "exclude_from_auth": True,
            "console": ConsoleParts(
                store or MemorySessionStore(), throttle or MemoryThrottle(), oidc
            ),
        },
        include_in_schema=False,
    )


def gateway_console(
    settings: Settings, database: Database
) -> tuple[Router, list[Callable[[], Awaitable[None]]]]:
    """The console as the gateway runs it: sessions and the sign-in throttle in the
    database (Redis for the throttle when ``REDIS_URL`` is set), so every replica shares
    them, and OIDC sign-in when a console client is configured. Also what to close at
    shutdown."""
    console = settings.console
    closers: list[Callable[[], Awaitable[None]]] = []
    store = SqlSessionStore(
        database, idle_seconds=console.idle_seconds, lifetime_seconds=console.lifetime_seconds
    )
    throttle: SignInThrottle
    limit, window = console.sign_in_failures, console.sign_in_window
    if settings.inference.redis_url:
        redis_throttle = RedisThrottle.from_url(
            settings.inference.redis_url,
            timeout=settings.inference.redis_timeout,
            prefix=settings.inference.ledger_prefix,
            limit=limit,
            window=window,
        )
        closers.append(redis_throttle.aclose)
        throttle = redis_throttle
    else:
        throttle = SqlThrottle(database, limit=limit, window=window)
    oidc = None
    if console.oidc_client_id:
        verifier = oidc_verifier(settings)
        if verifier is None:
            raise ValueError("OIDC_CONSOLE_CLIENT_ID needs OIDC_ISSUER (and its settings) too")
        closers.append(verifier.aclose)
        oidc = ConsoleOidc(
            verifier=verifier,
            client_id=console.oidc_client_id,
            client_secret=console.oidc_client_secret,
            provider_name=console.oidc_provider_name,
            redirect_uri=console.oidc_redirect_uri,
            scopes=console.oidc_scopes,
        )
    return console_router(store, throttle=throttle, oidc=oidc), closers
