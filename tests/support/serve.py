"""Serve an ASGI app over real HTTP on 127.0.0.1 inside the test's event loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import uvicorn

from gateway.http_protocol import JoiningHttpToolsProtocol
from tests.support.gateways import free_port

__all__ = ["serving"]


@asynccontextmanager
async def serving(app: Any) -> AsyncIterator[str]:
    """Run ``app`` (lifespan included) under uvicorn, with the HTTP protocol ``ignara
    serve`` uses; yields its base URL."""
    port = free_port()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        lifespan="on",
        loop="asyncio",
        http=JoiningHttpToolsProtocol,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                task.result()  # start-up failed: raise why
                raise RuntimeError("the server stopped before it started")
            await asyncio.sleep(0.02)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, timeout=15)
