"""A bare reverse proxy for benchmarks: what proxying costs in Python here, and no more.

    python bench/reference_proxy.py --port 9100 --upstream http://127.0.0.1:9000

The "Litestar reverse proxy, aiohttp client, uvicorn" the gateway's performance targets
were set against: ``POST /v1/chat/completions`` and ``GET /v1/models`` are forwarded to
the upstream over one shared ``aiohttp.ClientSession`` (keep-alive pool, no
decompression) and answered with the upstream's status and body; a ``text/event-stream``
body is passed through chunk by chunk as it arrives (Litestar's ``Stream``). No
authentication, policy, quota or logging. One uvicorn worker, no access log.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import uvicorn
from litestar import Litestar, Request, Response, get, post
from litestar.response import Stream

SSE = "text/event-stream"


@asynccontextmanager
async def client_session(app: Litestar) -> AsyncIterator[None]:
    connector = aiohttp.TCPConnector(limit=1000, keepalive_timeout=60, ttl_dns_cache=None)
    async with aiohttp.ClientSession(
        connector=connector,
        auto_decompress=False,
        timeout=aiohttp.ClientTimeout(total=600),
        skip_auto_headers=["User-Agent"],
    ) as session:
        app.state.session = session
        yield


async def forward(
    request: Request[Any, Any, Any], method: str, path: str, body: bytes | None = None
) -> Response[Any]:
    """Send the request to ``path`` upstream; answer its status and body."""
    state = request.app.state
    session: aiohttp.ClientSession = state.session
    headers = {"Content-Type": request.headers.get("Content-Type", "application/json")}
    try:
        upstream = await session.request(method, state.upstream + path, data=body, headers=headers)
    except aiohttp.ClientError as err:
        return Response(f"upstream: {err}".encode(), status_code=502, media_type="text/plain")
    media_type = upstream.headers.get("Content-Type", "application/octet-stream")
    if not media_type.startswith(SSE):
        try:
            content = await upstream.read()
        finally:
            upstream.release()
        return Response(content, status_code=upstream.status, media_type=media_type)

    async def chunks() -> AsyncIterator[bytes]:
        try:
            async for chunk in upstream.content.iter_any():
                yield chunk
        finally:
            upstream.close()  # a no-op once the body was read to the end

    return Stream(chunks(), status_code=upstream.status, media_type=media_type)


@post("/v1/chat/completions")
async def chat_completions(request: Request[Any, Any, Any]) -> Response[Any]:
    return await forward(request, "POST", "/v1/chat/completions", await request.body())


@get("/v1/models")
async def models(request: Request[Any, Any, Any]) -> Response[Any]:
    return await forward(request, "GET", "/v1/models")


def make_app(upstream: str) -> Litestar:
    app = Litestar([chat_completions, models], lifespan=[client_session], openapi_config=None)
    app.state.upstream = upstream.rstrip("/")
    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9100)
    parser.add_argument("--upstream", required=True, help="e.g. http://127.0.0.1:9000")
    args = parser.parse_args(argv)
    print(
        f"reference proxy on http://{args.host}:{args.port}/v1 -> {args.upstream}/v1",
        file=sys.stderr,
        flush=True,
    )
    uvicorn.run(
        make_app(args.upstream),
        host=args.host,
        port=args.port,
        workers=1,
        loop="auto",
        http="auto",
        access_log=False,
        log_level="warning",
    )


if __name__ == "__main__":
    main()
