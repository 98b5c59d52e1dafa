"""What every console page controller shares: its signed-in session, the API as that
session's key, an API refusal shown, a form read with its bounds."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, Response

from gateway.console.api import Answer, ConsoleApi
from gateway.console.html import esc, message
from gateway.console.pages import _page, _redirect, _session_of, sessions_of
from gateway.console.sessions import Session

__all__ = ["ConsolePages", "FormError", "form_text", "page", "redirect"]

page = _page
redirect = _redirect


class FormError(ValueError):
    """A form field a person got wrong; its message is shown to them."""


def form_text(data: Any, name: str, *, max_length: int = 200, required: bool = True) -> str:
    """One text field of a submitted form, stripped and bounded."""
    value = data.get(name)
    if value is None or value == "":
        if required:
            raise FormError(f"{name}: required")
        return ""
    if not isinstance(value, str) or len(value) > max_length:
        raise FormError(f"{name}: at most {max_length} characters")
    return value.strip()


class ConsolePages(Controller):
    """A controller of console pages (``/console`` is its router's path)."""

    path = "/"
    include_in_schema = False

    async def session(self, request: Request[Any, Any, Any]) -> Session | None:
        session = await _session_of(request, sessions_of(request), take_flash=True)
        return session if session is not None and session.signed_in else None

    async def flash(self, request: Request[Any, Any, Any], session: Session, html: str) -> None:
        """A one-time message for the session's next page."""
        await sessions_of(request).set_flash(session, html)

    def api(self, request: Request[Any, Any, Any], session: Session) -> ConsoleApi:
        assert session.actor is not None  # signed in
        return ConsoleApi(request.app, session.actor)

    async def failed(
        self, request: Request[Any, Any, Any], session: Session, answer: Answer, current: str
    ) -> Response[Any]:
        """An API refusal, shown; a 401 means the key no longer signs in: sign out."""
        if answer.status == 401:
            await sessions_of(request).drop(session.id)
            return _redirect("/console/login?ended=1")
        body = message("error", esc(answer.error), test_id="api-error")
        status = answer.status if 400 <= answer.status < 600 else 502
        return _page(session, "Refused" if status == 403 else "Error", body, current, status)
