"""The admin web console at ``/console``: server-rendered pages over the public API.

Register it with ``route_handlers=[..., console_router()]``. Its routes skip the API's
bearer authentication (``exclude_from_auth``): a page is served to a signed-in session,
and whatever it reads or changes goes through the API with the session's own key
(:mod:`gateway.console.api`). Every console response carries a strict
Content-Security-Policy; every change needs the session's CSRF token.
"""

from __future__ import annotations

from pathlib import Path

from litestar import Router
from litestar.static_files import create_static_files_router
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from gateway.console.backends import BackendPages
from gateway.console.models import ModelPages
from gateway.console.pages import COOKIE, ConsoleController, check_csrf
from gateway.console.queues import QueuePages
from gateway.console.sessions import SessionStore
from gateway.console.tenants import TenantPages

__all__ = ["COOKIE", "CSP", "STATIC", "console_router"]

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


def console_router(store: SessionStore | None = None) -> Router:
    """The ``/console`` routes, with their own session store (in memory)."""
    return Router(
        path="/console",
        route_handlers=[
            ConsoleController,
            QueuePages,
            ModelPages,
            BackendPages,
            TenantPages,
            create_static_files_router(path="/static", directories=[STATIC], name="console-static"),
        ],
        middleware=[_secured],
        before_request=check_csrf,
        opt={"exclude_from_auth": True, "console_sessions": store or SessionStore()},
        include_in_schema=False,
    )
