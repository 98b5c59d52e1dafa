"""Fixtures: signing keys made with joserfc, a local JWKS server, token factories."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from joserfc import jwt
from joserfc.jwk import ECKey, Key, RSAKey

ISSUER = "https://idp.example.test/realms/ignara"
AUDIENCE = "ignara-gateway"


@dataclass
class SigningKeys:
    rsa: RSAKey
    rsa_next: RSAKey
    ec: ECKey
    attacker: RSAKey  # claims the kid of `rsa`, but the issuer never published it


@pytest.fixture(scope="session")
def keys() -> SigningKeys:
    return SigningKeys(
        rsa=RSAKey.generate_key(2048, parameters={"kid": "rsa-1", "alg": "RS256"}),
        rsa_next=RSAKey.generate_key(2048, parameters={"kid": "rsa-2", "alg": "RS256"}),
        ec=ECKey.generate_key("P-256", parameters={"kid": "ec-1", "alg": "ES256"}),
        attacker=RSAKey.generate_key(2048, parameters={"kid": "rsa-1", "alg": "RS256"}),
    )


def public_jwks(*signing_keys: Key) -> dict[str, Any]:
    return {"keys": [key.as_dict(private=False) for key in signing_keys]}


@dataclass(frozen=True)
class FromNow:
    """A time claim this many seconds from when the token is made (not when tests load)."""

    seconds: int


def claims(**overrides: Any) -> dict[str, Any]:
    """Valid claims for a token issued now; ``name=None`` drops a claim."""
    now = int(time.time())
    overrides = {
        name: now + value.seconds if isinstance(value, FromNow) else value
        for name, value in overrides.items()
    }
    base: dict[str, Any] = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": "alice",
        "tenant": "acme",
        "roles": ["member"],
        "scope": "workloads:read workloads:write",
        "iat": now,
        "nbf": now,
        "exp": now + 300,
    }
    base.update(overrides)
    return {name: value for name, value in base.items() if value is not None}


def sign(key: Key, body: dict[str, Any] | None = None, **header: Any) -> str:
    """A compact JWT signed by ``key``; ``alg`` and ``kid`` default to the key's own."""
    protected = {"alg": key.alg, "kid": key.kid, **header}
    protected = {name: value for name, value in protected.items() if value is not None}
    algorithms = [protected["alg"]]
    return jwt.encode(protected, body if body is not None else claims(), key, algorithms=algorithms)


@dataclass
class FakeClock:
    """A monotonic clock the test moves by hand."""

    now: float = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class JwksServer:
    """A JWKS endpoint on 127.0.0.1, in a thread of its own, that counts its hits.

    A thread (not the test's event loop) serves it, so it answers even while the loop is
    blocked, as it is inside Litestar's test client. ``mode``: ``ok`` serves ``document``;
    ``error`` answers 500; ``hang`` answers nothing until the server stops; ``huge``
    declares and sends a body over 1 MiB; ``huge-unsized`` sends one without a length;
    ``garbage`` sends something that is not JSON.
    """

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        self.mode = "ok"
        self.url = ""
        self._hits = 0
        self._lock = threading.Lock()
        self.stopping = threading.Event()
        self._httpd: _StatefulServer | None = None

    @property
    def hits(self) -> int:
        with self._lock:
            return self._hits

    def count_hit(self) -> None:
        with self._lock:
            self._hits += 1

    def start(self) -> None:
        self._httpd = _StatefulServer(("127.0.0.1", 0), _JwksHandler)
        self._httpd.state = self
        port = self._httpd.server_address[1]
        self.url = f"http://127.0.0.1:{port}/realms/ignara/protocol/openid-connect/certs"
        threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True).start()

    def stop(self) -> None:
        self.stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()


class _StatefulServer(ThreadingHTTPServer):
    state: JwksServer


class _JwksHandler(BaseHTTPRequestHandler):
    server: _StatefulServer

    def do_GET(self) -> None:
        state = self.server.state
        state.count_hit()
        mode = state.mode
        if mode == "hang":
            state.stopping.wait(timeout=10)
            return
        status, body, sized = 200, json.dumps(state.document).encode(), True
        if mode == "error":
            status, body = 500, b'{"error": "boom"}'
        elif mode == "garbage":
            body = b"<html>not json</html>"
        elif mode in {"huge", "huge-unsized"}:
            body, sized = b" " * (1 << 20) + b"{}", mode == "huge"
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        if sized:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        with contextlib.suppress(ConnectionError):
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def serve_jwks(document: dict[str, Any]) -> Iterator[JwksServer]:
    server = JwksServer(document)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def jwks_server(keys: SigningKeys) -> Iterator[JwksServer]:
    with serve_jwks(public_jwks(keys.rsa, keys.ec)) as server:
        yield server


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
