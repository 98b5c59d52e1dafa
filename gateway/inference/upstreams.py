"""The upstream client: forwards one OpenAI-style call to a model's endpoints.

Rules (in order):

1. Candidates are the route's healthy endpoints (all of them if none is healthy: fail open).
2. The balancer orders them: the first by weight, the rest as fallbacks.
3. Each attempt may fail *before the first byte* (connect error, no headers within
   ``Timeouts.first_byte``, or a 5xx status); such a failure moves on to the next endpoint.
4. Once headers with a status below 500 arrive the response has started: it is returned and
   never retried. ``text/event-stream`` bodies come back as a ``ChunkStream`` of raw bytes as
   they arrive; any other body is read in full.
5. ``Timeouts.total`` bounds the whole call, retries and body included.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType

import aiohttp

from gateway.inference.balancer import Balancer, SmoothWeightedBalancer
from gateway.inference.errors import (
    UpstreamStreamBroken,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from gateway.inference.registry import Endpoint, ModelRoute

__all__ = [
    "ChunkStream",
    "SessionFactory",
    "Timeouts",
    "UpstreamClient",
    "UpstreamResponse",
    "default_session",
]

SessionFactory = Callable[[], aiohttp.ClientSession]

# Request headers the client never forwards: hop-by-hop, framing, and the caller's own key.
_REQUEST_DROP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "authorization",
        "accept-encoding",
        "cookie",
    }
)


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Seconds: ``connect`` per TCP/TLS connect, ``first_byte`` until response headers per
    attempt, ``total`` for the whole call including retries and the body."""

    connect: float = 5.0
    first_byte: float = 60.0
    total: float = 600.0


def default_session() -> aiohttp.ClientSession:
    """A pooled session for the hot path (keep-alive, no decompression: bytes pass through)."""
    connector = aiohttp.TCPConnector(limit=1000, ttl_dns_cache=300, keepalive_timeout=30)
    return aiohttp.ClientSession(connector=connector, auto_decompress=False)


class ChunkStream:
    """Raw body chunks of a streaming response, as they arrive.

    Raises ``UpstreamStreamBroken`` if the upstream cuts the connection and ``UpstreamTimeout``
    past the total deadline. Stopping early (``aclose``, or cancellation of the reading task)
    closes the upstream connection, which cancels the upstream's work.
    """

    __slots__ = ("_response",)

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response: aiohttp.ClientResponse | None = response

    def __aiter__(self) -> ChunkStream:
        return self

    async def __anext__(self) -> bytes:
        response = self._response
        if response is None:
            raise StopAsyncIteration
        with _reading(self._abort, "stream", "mid-response"):
            chunk = await response.content.readany()
        if not chunk:
            self._response = None
            response.release()
            raise StopAsyncIteration
        return chunk

    @property
    def closed(self) -> bool:
        return self._response is None

    async def aclose(self) -> None:
        """Stop reading; closes the upstream connection if the body was not finished."""
        self._abort()

    def _abort(self) -> None:
        response, self._response = self._response, None
        if response is not None:
            response.close()


@dataclass(slots=True)
class UpstreamResponse:
    """A started upstream response: ``body`` when read in full, else ``chunks`` (SSE).
    ``headers`` are the upstream's as received (case-insensitive): pass on only what
    the caller should see."""

    status: int
    headers: Mapping[str, str]
    endpoint: Endpoint
    body: bytes | None = None
    chunks: ChunkStream | None = None

    @property
    def streaming(self) -> bool:
        return self.chunks is not None

    async def aclose(self) -> None:
        if self.chunks is not None:
            await self.chunks.aclose()

    async def __aenter__(self) -> UpstreamResponse:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class _AttemptError(Exception):
    """One endpoint failed before its first byte; ``timed_out`` picks 504 over 502."""

    def __init__(self, reason: str, *, timed_out: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.timed_out = timed_out


class UpstreamClient:
    """Forwards calls to upstream endpoints over one pooled aiohttp session.

    Usage::

        async with UpstreamClient(timeouts=Timeouts(first_byte=30)) as client:
            response = await client.forward(route, "/chat/completions", body, headers)
            async with response:
                async for chunk in response.chunks or ():
                    ...
    """

    def __init__(
        self,
        *,
        session_factory: SessionFactory = default_session,
        timeouts: Timeouts | None = None,
        balancer: Balancer | None = None,
    ) -> None:
        self._session_factory = session_factory
        self._timeouts = timeouts or Timeouts()
        self._balancer: Balancer = balancer or SmoothWeightedBalancer()
        self._session: aiohttp.ClientSession | None = None
        self._unhealthy: set[str] = set()

    @property
    def timeouts(self) -> Timeouts:
        return self._timeouts

    async def start(self) -> None:
        self._ensure_session()

    async def close(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def __aenter__(self) -> UpstreamClient:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def is_healthy(self, endpoint: Endpoint) -> bool:
        return endpoint.base_url not in self._unhealthy

    def mark(self, endpoint: Endpoint, healthy: bool) -> None:
        if healthy:
            self._unhealthy.discard(endpoint.base_url)
        else:
            self._unhealthy.add(endpoint.base_url)

    async def probe(self, endpoint: Endpoint, timeout: float) -> bool:
        """GET ``{base_url}/models``; healthy when it answers below 500 within ``timeout``."""
        session = self._ensure_session()
        client_timeout = aiohttp.ClientTimeout(total=timeout, sock_connect=self._timeouts.connect)
        try:
            async with session.get(
                f"{endpoint.base_url}/models",
                headers=_auth_headers({}, endpoint),
                timeout=client_timeout,
                allow_redirects=False,
            ) as response:
                await response.read()
                return response.status < 500
        except (TimeoutError, aiohttp.ClientError, OSError):
            return False

    async def forward(
        self,
        route: ModelRoute,
        path: str,
        body: bytes,
        headers: Mapping[str, str],
        *,
        method: str = "POST",
    ) -> UpstreamResponse:
        """Send ``body`` to ``{base_url}{path}`` on the route's endpoints (see module rules).

        Raises ``UpstreamTimeout`` if every attempt timed out or the total ran out, else
        ``UpstreamUnavailable`` when no endpoint started a response.
        """
        session = self._ensure_session()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeouts.total
        base_headers = _forward_headers(headers)
        attempts: list[str] = []
        all_timed_out = True
        for endpoint in self._balancer.order(route, self._candidates(route)):
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            url = f"{endpoint.base_url}{path}"
            request_headers = _auth_headers(base_headers, endpoint)
            try:
                response = await self._attempt(
                    session, method, url, body, request_headers, remaining
                )
            except _AttemptError as failure:
                attempts.append(f"{endpoint.base_url}: {failure.reason}")
                all_timed_out = all_timed_out and failure.timed_out
                continue
            if response.status >= 500:
                attempts.append(f"{endpoint.base_url}: HTTP {response.status}")
                all_timed_out = False
                response.close()
                continue
            return await _started(endpoint, response)
        if all_timed_out or deadline - loop.time() <= 0:
            raise UpstreamTimeout(
                f"model {route.model!r}: upstream timed out", attempts=tuple(attempts)
            )
        raise UpstreamUnavailable(
            f"model {route.model!r}: no upstream endpoint answered", attempts=tuple(attempts)
        )

    def _ensure_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = self._session_factory()
        return self._session

    def _candidates(self, route: ModelRoute) -> list[Endpoint]:
        healthy = [e for e in route.endpoints if e.base_url not in self._unhealthy]
        return healthy or list(route.endpoints)

    async def _attempt(
        self,
        session: aiohttp.ClientSession,
        method: str,
        url: str,
        body: bytes,
        headers: dict[str, str],
        remaining: float,
    ) -> aiohttp.ClientResponse:
        timeout = aiohttp.ClientTimeout(total=remaining, sock_connect=self._timeouts.connect)
        try:
            async with asyncio.timeout(min(self._timeouts.first_byte, remaining)):
                return await session.request(
                    method, url, data=body, headers=headers, timeout=timeout, allow_redirects=False
                )
        except aiohttp.ConnectionTimeoutError as exc:
            raise _AttemptError("connect timeout", timed_out=False) from exc
        except TimeoutError as exc:
            raise _AttemptError("no response headers in time", timed_out=True) from exc
        except aiohttp.ClientError as exc:
            raise _AttemptError(f"connect error ({type(exc).__name__})", timed_out=False) from exc


async def _started(endpoint: Endpoint, response: aiohttp.ClientResponse) -> UpstreamResponse:
    headers = response.headers
    if response.content_type == "text/event-stream":
        return UpstreamResponse(response.status, headers, endpoint, chunks=ChunkStream(response))
    with _reading(response.close, "response", "mid-body"):
        body = await response.read()
    return UpstreamResponse(response.status, headers, endpoint, body=body)


def _forward_headers(headers: Mapping[str, str]) -> dict[str, str]:
    out = {name: value for name, value in headers.items() if name.lower() not in _REQUEST_DROP}
    out["Accept-Encoding"] = "identity"
    if not any(name.lower() == "content-type" for name in out):
        out["Content-Type"] = "application/json"
    return out


def _auth_headers(base: dict[str, str], endpoint: Endpoint) -> dict[str, str]:
    if endpoint.api_key is None:
        return base
    return {**base, "Authorization": f"Bearer {endpoint.api_key}"}


@contextmanager
def _reading(close: Callable[[], None], what: str, where: str) -> Iterator[None]:
    """Reading a started response: any failure closes it and has one meaning."""
    try:
        yield
    except TimeoutError as exc:
        close()
        raise UpstreamTimeout(f"upstream {what} exceeded the total timeout") from exc
    except aiohttp.ClientError as exc:
        close()
        raise UpstreamStreamBroken(f"upstream closed the {what} {where}") from exc
    except asyncio.CancelledError:
        close()
        raise
