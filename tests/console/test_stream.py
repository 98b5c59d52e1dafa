"""The console's relay of the API's event stream: the browser gets the events the
session's key may see, as they come; when the browser goes, the API's side is told and
stops; where the API has no stream (or refuses), the console answers 204, which tells
EventSource to stop asking."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from litestar.testing import TestClient

from gateway.app import create_app
from gateway.auth.actor import ACTOR_SCOPE_KEY, SessionActor
from gateway.console.stream import EVENTS_PATH, Relay
from gateway.settings import Settings
from tests.conftest import ADMIN_KEY
from tests.console.test_console_http import sign_in
from tests.gateway.test_workload_api import CONFIG, bearer


class FakeEvents:
    """An ASGI app streaming two events, then waiting until its client goes."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.scope: dict[str, Any] = {}
        self.disconnected = asyncio.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.scope = scope
        assert (await receive())["type"] == "http.request"
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": self.status, "headers": headers})
        if self.status != 200:
            await send({"type": "http.response.body", "body": b"{}", "more_body": False})
            return
        for n in (1, 2):
            body = f"id: {n}\nevent: admitted\ndata: {{}}\n\n".encode()
            await send({"type": "http.response.body", "body": body, "more_body": True})
        if (await receive())["type"] == "http.disconnect":
            self.disconnected.set()


async def test_events_flow_as_the_sessions_actor_and_stop_when_the_browser_goes() -> None:
    app = FakeEvents()
    actor = SessionActor(kind="api-key", principal="ops", tenant="alpha", key_id="k1")
    relay = Relay(app, actor, last_event_id="41")
    assert await relay.start() == 200
    chunks = relay.chunks()
    assert await anext(chunks) == b"id: 1\nevent: admitted\ndata: {}\n\n"
    assert (await anext(chunks)).startswith(b"id: 2\n")
    headers = dict(app.scope["headers"])
    assert app.scope["path"] == EVENTS_PATH
    assert app.scope[ACTOR_SCOPE_KEY] is actor and b"authorization" not in headers
    assert headers[b"last-event-id"] == b"41"
    await chunks.aclose()  # the browser went
    await asyncio.wait_for(app.disconnected.wait(), 2)


@pytest.mark.parametrize("status", [403, 404])
async def test_no_stream_to_give_is_the_status(status: int) -> None:
    actor = SessionActor(kind="bootstrap", principal="root", tenant="*")
    relay = Relay(FakeEvents(status), actor, last_event_id=None)
    assert await relay.start() == status


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient[Any]]:
    with TestClient(app=create_app(settings)) as client:
        answer = client.post("/api/v1/admin/config", json=CONFIG, headers=bearer(ADMIN_KEY))
        assert answer.status_code == 201, answer.text
        yield client


def test_the_console_route_needs_a_session(client: TestClient[Any]) -> None:
    assert client.get("/console/events").status_code == 401
    assert client.get("/console/dashboard/live").status_code == 401
    sign_in(client, ADMIN_KEY)
    live = client.get("/console/dashboard/live")
    assert live.status_code == 200 and live.headers["content-security-policy"]
    served = {route.path for route in client.app.routes}
    if EVENTS_PATH not in served:
        # No stream on this gateway: 204, and EventSource stops asking.
        assert client.get("/console/events").status_code == 204
    # Where it is served the answer never ends: the relay's flow is tested above with a
    # fake stream, and the browser test follows it in a page.
