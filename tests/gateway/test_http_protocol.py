"""A response's head waits for its body, never longer than a turn of the loop; and
uvicorn with that protocol still speaks plain HTTP/1.1 (keep-alive, streams, HEAD)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any, cast

import httpx
import pytest
from litestar import Litestar, get, head
from litestar.response import Stream

from gateway.http_protocol import JoiningTransport
from tests.support.serve import serving

HEAD = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"


class _Transport:
    """Records what is written to it, write by write."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def get_extra_info(self, name: str) -> str:
        return f"info:{name}"


def _joining() -> tuple[JoiningTransport, _Transport]:
    inner = _Transport()
    return JoiningTransport(cast(asyncio.Transport, inner)), inner


async def _turn() -> None:
    await asyncio.sleep(0)
    await asyncio.sleep(0)


@pytest.mark.parametrize(
    ("writes", "expected"),
    [
        pytest.param([HEAD, b"ok"], [HEAD + b"ok"], id="head and body: one write"),
        pytest.param([b"chunk", b"more"], [b"chunk", b"more"], id="body chunks: at once"),
        pytest.param([HEAD, b"ok", HEAD, b"ok"], [HEAD + b"ok", HEAD + b"ok"], id="two responses"),
    ],
)
async def test_writes_in_one_turn(writes: list[bytes], expected: list[bytes]) -> None:
    transport, inner = _joining()
    for data in writes:
        transport.write(data)
    assert inner.writes == expected
    await _turn()
    assert inner.writes == expected


async def test_a_lone_head_goes_out_when_the_loop_turns() -> None:
    transport, inner = _joining()
    transport.write(HEAD)
    assert inner.writes == []
    await _turn()
    assert inner.writes == [HEAD]
    transport.write(b"ok")  # a body that came later goes straight out
    assert inner.writes == [HEAD, b"ok"]


async def test_close_sends_what_is_held_first_and_a_closing_transport_gets_nothing() -> None:
    transport, inner = _joining()
    transport.write(HEAD)
    transport.close()
    assert inner.writes == [HEAD] and inner.closing
    other, other_inner = _joining()
    other.write(HEAD)
    other_inner.closing = True  # the client went away meanwhile
    await _turn()
    assert other_inner.writes == []


def test_everything_else_is_the_wrapped_transports() -> None:
    transport, _ = _joining()
    assert transport.get_extra_info("peername") == "info:peername"


async def _chunks() -> AsyncIterator[bytes]:
    for n in range(3):
        await asyncio.sleep(0.01)
        yield f"data: {n}\n\n".encode()


@get("/text", media_type="text/plain", sync_to_thread=False)
def _text() -> str:
    return "hello"


@head("/text", sync_to_thread=False)
def _text_head() -> None:
    return None


@get("/stream")
async def _stream() -> Stream:
    return Stream(_chunks(), media_type="text/event-stream")


async def test_uvicorn_with_it_serves_plain_http() -> None:
    app = Litestar([_text, _text_head, _stream])
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        for _ in range(3):  # on one kept-alive connection
            response = await client.get("/text")
            assert (response.status_code, response.text) == (200, "hello")
        assert (await client.head("/text")).status_code == 200
        seen: list[Any] = []
        async with client.stream("GET", "/stream") as stream:
            async for chunk in stream.aiter_text():
                seen.append(chunk)
        assert "".join(seen) == "data: 0\n\ndata: 1\n\ndata: 2\n\n"
        assert (await client.get("/missing")).status_code == 404


@pytest.mark.parametrize(
    "request_bytes",
    [
        pytest.param(
            b"POST /text HTTP/1.1\r\nhost: x\r\ntransfer-encoding: BOGGN8nl.\r\n\r\n",
            id="a bogus transfer-encoding",
        ),
        pytest.param(b"GET /text HTTP/1.1\r\nbad header\r\n\r\n", id="a header without a colon"),
        pytest.param(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", id="TLS to a plain port"),
    ],
)
async def test_a_request_that_is_not_http_gets_the_gateways_json_error(
    request_bytes: bytes,
) -> None:
    async with serving(Litestar([_text])) as url:
        host, port = url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            writer.write(request_bytes)
            await writer.drain()
            answer = await asyncio.wait_for(reader.read(), timeout=10)  # closed after it
        finally:
            writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode().lower().split("\r\n")
    assert lines[0] == "http/1.1 400 bad request"
    assert "content-type: application/json" in lines
    assert f"content-length: {len(body)}" in lines
    error = json.loads(body)["error"]
    assert error["code"] == "invalid_request" and error["type"] == "invalid_request_error"
    assert error["message"].startswith("not a valid HTTP/1.1 request: ")
