"""What every console page controller shares: its signed-in session, the API as that
session's key, an API refusal shown, a form read with its bounds, and the answers to a
change (a refusal flashed above the form, a versioned change's 412 and refusals)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from litestar import Controller, Request, Response
from litestar.exceptions import ValidationException

from gateway.console.api import Answer, ConsoleApi
from gateway.console.html import esc, layout, message
from gateway.console.pages import _html, _page, _redirect, _session_of, sessions_of
from gateway.console.sessions import Session

__all__ = [
    "ConsolePages",
    "FormError",
    "SignedOutError",
    "form_text",
    "page",
    "redirect",
    "showing_error",
    "signed_out",
]

page = _page
redirect = _redirect

Again = Callable[[str, int], Awaitable[Response[Any]]]
"""A form's page again, showing an error (HTML-escaped by the page) with a status."""


def showing_error(render: Callable[..., Awaitable[Response[Any]]], *args: Any) -> Again:
    """``render(*args, error=..., status=...)``: a page shown again with an error (the
    ``again`` or ``afresh`` of :meth:`ConsolePages.change`)."""

    async def again(error: str, status: int) -> Response[Any]:
        return await render(*args, error=error, status=status)

    return again


class SignedOutError(Exception):
    """No signed-in session: the answer is the sign-in page (:func:`signed_out`)."""


def bad_request(request: Request[Any, Any, Any], exc: ValidationException) -> Response[Any]:
    """The console router's handler of a URL Litestar could not read (a query or path
    parameter out of shape, as a hand-edited link has): a page saying which, where
    the API answers JSON."""
    problems = [
        f"{item.get('key')}: {item.get('message')}"
        for item in (exc.extra if isinstance(exc.extra, list) else [])
        if isinstance(item, dict)
    ]
    text = "; ".join(problems) or exc.detail
    body = message(
        "error",
        f"<p>This page cannot be shown for that address: {esc(text)}.</p>"
        '<p><a href="/console">Back to the console</a></p>',
        test_id="bad-request",
    )
    return _html(layout("Bad request", body), 400)


def signed_out(request: Request[Any, Any, Any], exc: SignedOutError) -> Response[Any]:
    """The console router's handler of :class:`SignedOutError`: to the sign-in page."""
    return _redirect("/console/login")


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

    async def signed_in(self, request: Request[Any, Any, Any]) -> Session:
        """The signed-in session; without one, :class:`SignedOutError` (to the sign-in page)."""
        session = await self.session(request)
        if session is None:
            raise SignedOutError
        return session

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

    async def refuse(
        self, request: Request[Any, Any, Any], session: Session, html: str, to: str
    ) -> Response[Any]:
        """A form refused (by the console's checks or the API): ``html`` shown once above
        the page ``to``, where the form is."""
        await self.flash(request, session, message("error", html, test_id="form-error"))
        return _redirect(to)

    async def change(
        self,
        request: Request[Any, Any, Any],
        session: Session,
        method: str,
        path: str,
        version: str | int,
        *,
        json: Any = None,
        again: Again,
        afresh: Again,
        stale: str,
        done: str | Callable[[Answer], str],
        to: str,
        refused: str = "",
    ) -> Response[Any]:
        """``method`` on the API's ``path`` naming the version the form read
        (``If-Match``), and its answer: a 412 shows the form ``afresh`` (the current
        version) saying ``stale``; a 401 signs the session out (its key no longer signs
        in); another refusal shows the form ``again`` as typed with the API's reason
        (after ``refused``); a success is a one-time ``done`` (HTML; of the answer, when
        a function) on the page ``to``."""
        answer = await self.api(request, session).call(
            method, path, json=json, headers={"If-Match": f'"{version}"'}
        )
        if answer.status == 401:
            return await self.failed(request, session, answer, to)
        if answer.status == 412:
            return await afresh(f"{stale} ({answer.error})", 412)
        if not answer.ok:
            return await again(f"{refused}{answer.error}", answer.status)
        said = done(answer) if callable(done) else done
        await self.flash(request, session, message("ok", said, test_id="saved"))
        return _redirect(to)

    async def remove(
        self,
        request: Request[Any, Any, Any],
        session: Session,
        path: str,
        version: str | int,
        *,
        again: Again,
        stale: str,
        done: str,
        to: str,
    ) -> Response[Any]:
        """:meth:`change` deleting the API's ``path``: a refusal or a stale version shows
        the object's page ``again``, as it now stands, with the reason."""
        return await self.change(
            request,
            session,
            "DELETE",
            path,
            version,
            again=again,
            afresh=again,
            stale=stale,
            refused="Not deleted: ",
            done=done,
            to=to,
        )
