"""The console's relay of the API's event stream: the browser gets the events the
session's key may see, as they come; when the browser goes, the API's side is told and
stops; where the gateway serves no stream, the console answers 204, which tells
EventSource to stop asking; where the API refuses one (too many open, say), the page
gets one ``unavailable`` event saying why, and when to ask again if it may."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from litestar.testing import TestClient

from gateway.app import create_app
from gateway.auth.actor import ACTOR_SCOPE_KEY, SessionActor
from gateway.console.stream import EVENTS_PATH, Refusal, Relay, notice
from gateway.settings import Settings
from tests.conftest import ADMIN_KEY
from tests.console.test_console_http import sign_in
from tests.gateway.test_workload_api import CONFIG, bearer


class FakeEvents:
    """An ASGI app streaming two events, then waiting until its client goes."""

    def __init__(
        self, status: int = 200, body: bytes = b"{}", headers: tuple[tuple[bytes, bytes], ...] = ()
    ) -> None:
        self.status = status
        self.body = body
        self.headers = [(b"content-type", b"text/event-stream"), *headers]
        self.scope: dict[str, Any] = {}
        self.disconnected = asyncio.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.scope = scope
        assert (await receive())["type"] == "http.request"
        start = {"type": "http.response.start", "status": self.status, "headers": self.headers}
        await send(start)
        if self.status != 200:
            # In two parts: the relay reads a refusal's body to its end.
            half = len(self.body) // 2
            await send({"type": "http.response.body", "body": self.body[:half], "more_body": True})
            await send({"type": "http.response.body", "body": self.body[half:]})
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


ROOT = SessionActor(kind="bootstrap", principal="root", tenant="*")
REFUSED = json.dumps({"error": {"code": "too_many_streams", "message": "8 open"}}).encode()


@pytest.mark.parametrize(
    ("app", "refusal"),
    [
        # the API's error and its Retry-After
        (
            FakeEvents(429, REFUSED, ((b"retry-after", b"30"),)),
            Refusal(429, "too_many_streams", "8 open", 30),
        ),
        # no Retry-After, or one that is not a number of seconds
        (FakeEvents(503, REFUSED), Refusal(503, "too_many_streams", "8 open", None)),
        (
            FakeEvents(503, REFUSED, ((b"retry-after", b"Fri, 31 Dec 1999 23:59:59 GMT"),)),
            Refusal(503, "too_many_streams", "8 open", None),
        ),
        # a body that is not the API's error shape, or not JSON at all
        (
            FakeEvents(502, b"[1, 2]"),
            Refusal(502, "unavailable", "the event stream answered 502", None),
        ),
        (
            FakeEvents(500, b"<html>"),
            Refusal(500, "unavailable", "the event stream answered 500", None),
        ),
        # a body far longer than any error: only its first bytes are read
        (
            FakeEvents(500, b"x" * 100_000),
            Refusal(500, "unavailable", "the event stream answered 500", None),
        ),
    ],
)
async def test_a_refusal_keeps_the_apis_reason(app: FakeEvents, refusal: Refusal) -> None:
    relay = Relay(app, ROOT, last_event_id=None)
    assert await relay.start() == refusal.status
    assert relay.refusal == refusal


@pytest.mark.parametrize(
    ("refusal", "retry_ms", "again"),
    [
        (Refusal(429, "too_many_streams", "8 open", 30), 30_000, True),
        (Refusal(503, "unavailable", "the live state is not running", None), 60_000, True),
        (Refusal(503, "unavailable", "x", 0), 60_000, True),  # 0 is no advice: the usual
        (Refusal(503, "unavailable", "x", 1), 5_000, True),  # never sooner than 5 s
        (Refusal(429, "too_many_streams", "x", 86_400), 600_000, True),  # nor later than 10 min
        (Refusal(403, "forbidden", "not yours", None), None, False),  # it will not pass
    ],
)
def test_a_notice_is_one_event_and_says_when_to_ask_again(
    refusal: Refusal, retry_ms: int | None, again: bool
) -> None:
    text = notice(refusal).decode()
    blocks = text.strip().split("\n\n")
    if retry_ms is None:
        assert not text.startswith("retry:")
    else:
        assert blocks.pop(0) == f"retry: {retry_ms}"
    (event,) = blocks
    kind, data = event.split("\n")
    assert kind == "event: unavailable"
    assert json.loads(data.removeprefix("data: ")) == {
        "status": refusal.status,
        "error": refusal.error,
        "message": refusal.message,
        "retry": again,
    }


def test_a_message_with_line_breaks_stays_one_data_line() -> None:
    """A message is the API's text: a line break in it must not end the event early or
    start a field of the browser's stream (an ``id:`` or ``retry:`` of its own)."""
    text = notice(Refusal(503, "unavailable", "a\nretry: 1\n\nevent: admitted", None)).decode()
    assert text.count("\n\n") == 2 and "\nretry: 1" not in text


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


def test_a_refused_stream_tells_the_page_why(client: TestClient[Any]) -> None:
    """The platform's admins hold every stream this gateway allows them (other tabs):
    the console's relay does not answer an empty 204, which would stop the page's live
    updates silently, but the API's reason and its Retry-After, as an event."""
    slots = client.app.state["services"].stream_slots
    held = []
    while (slot := slots.take("*")) is not None:
        held.append(slot)
    sign_in(client, ADMIN_KEY)
    answer = client.get("/console/events")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/event-stream")
    retry, event = answer.text.strip().split("\n\n")
    assert retry == "retry: 30000"  # the API's Retry-After
    data = json.loads(event.split("\n")[1].removeprefix("data: "))
    assert data["status"] == 429 and data["error"] == "too_many_streams" and data["retry"]
    assert f"already {len(held)} event streams open" in data["message"]
    for slot in held:
        slot.release()
