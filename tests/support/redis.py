"""A Redis server for tests: the one ``REDIS_URL`` names, or a throwaway one started
from the installed ``redis-server`` on a free loopback port.

Tests never FLUSHDB: ``REDIS_URL`` may be a shared server, so each test keeps to
keys under its own prefix (:func:`unique_prefix`).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

__all__ = ["redis_server", "unique_prefix"]

_START_TIMEOUT = 20.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _wait_until_up(process: subprocess.Popen[bytes], port: int, log: Path) -> None:
    deadline = time.monotonic() + _START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"redis-server exited at start:\n{log.read_text()}")
        if _answers_ping(port):
            return
        time.sleep(0.05)
    raise RuntimeError(f"redis-server did not answer PING within {_START_TIMEOUT}s")


@contextmanager
def redis_server() -> Iterator[str]:
    """Yield a ``redis://`` URL of a server tests may write their own keys to."""
    url = os.environ.get("REDIS_URL")
    if url:
        yield url
        return
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed and REDIS_URL is not set")
    root = Path(tempfile.mkdtemp(prefix="ignara-redis-"))
    port, log = _free_port(), root / "server.log"
    command = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(root)]
    command += ["--save", "", "--appendonly", "no", "--logfile", str(log)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        _wait_until_up(process, port, log)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        shutil.rmtree(root, ignore_errors=True)


def unique_prefix(name: str = "test") -> str:
    """A key prefix no other test (or earlier run on a shared server) uses."""
    return f"ignara-{name}-{uuid.uuid4().hex[:12]}"
