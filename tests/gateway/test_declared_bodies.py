"""A request that declares a huge body and sends none of it (a slow-body attack, or a
client about to upload a gigabyte) is answered at once, never waited on: 401 without
credentials (no body is read before authentication), 413 with them. Over real HTTP, as
``ignara serve`` speaks it."""

from __future__ import annotations

import asyncio
import json

import pytest

from gateway.app import create_app
from gateway.settings import Settings
from tests.conftest import ADMIN_KEY
from tests.support.serve import serving

GIGABYTE = 1_000_000_000


@pytest.mark.parametrize(
    ("credentials", "status", "code"),
    [
        ("", 401, "missing_credentials"),
        ("Authorization: Bearer not-a-key\r\n", 401, "invalid_credentials"),
        (f"Authorization: Bearer {ADMIN_KEY}\r\n", 413, "request_too_large"),
    ],
)
async def test_a_declared_gigabyte_is_refused_before_a_byte_of_it_comes(
    settings: Settings, credentials: str, status: int, code: str
) -> None:
    async with serving(create_app(settings)) as url:
        host, port = url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            writer.write(
                (
                    "POST /api/v1/workloads HTTP/1.1\r\nHost: x\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {GIGABYTE}\r\n"
                    f"{credentials}\r\n"
                ).encode()
            )
            await writer.drain()
            # No byte of the body is sent: an answer that waited for it never comes.
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
            lines = head.decode().lower().split("\r\n")
            length = next(int(h.split(":")[1]) for h in lines if h.startswith("content-length:"))
            body = await asyncio.wait_for(reader.readexactly(length), timeout=10)
        finally:
            writer.close()
    assert lines[0].startswith(f"http/1.1 {status} ")
    assert json.loads(body)["error"]["code"] == code
