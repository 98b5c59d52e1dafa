"""``ignara serve`` processes for multi-gateway tests: started, awaited, stopped."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import httpx

__all__ = [
    "LOADED_MACHINE_ENV",
    "TEST_KEY_LOOKUP_TIMEOUT",
    "TEST_POLICY_TIMEOUT",
    "free_port",
    "gateway_processes",
    "wait_healthy",
]

Process = subprocess.Popen[bytes]

# Tests share two CPUs with the servers they start: a first policy decision or key
# lookup can wait its turn longer than production's bounds (half a second, two
# seconds), which would fail it closed or take the database for down. The in-process
# gateways' settings (tests/conftest.py) and these processes' environment alike; the
# fault tests keep production's.
TEST_POLICY_TIMEOUT = 5.0
TEST_KEY_LOOKUP_TIMEOUT = 10.0
LOADED_MACHINE_ENV = {
    "IGNARA_POLICY_TIMEOUT": str(TEST_POLICY_TIMEOUT),
    "IGNARA_KEY_LOOKUP_TIMEOUT": str(TEST_KEY_LOOKUP_TIMEOUT),
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def gateway_processes(
    names: tuple[str, ...], env: Mapping[str, str], workdir: Path
) -> Iterator[list[tuple[str, Process]]]:
    """One gateway per name with ``env`` on top of this environment (each on a free
    port, logging to ``workdir/gateway-<name>.log``); yields (base URL, process) once
    every one is healthy, and stops them (SIGTERM, then kill) however the test ends."""
    processes: list[tuple[str, Process]] = []
    try:
        for name in names:
            port = free_port()
            log = open(workdir / f"gateway-{name}.log", "wb")  # noqa: SIM115 - closed with the process
            process = subprocess.Popen(
                [sys.executable, "-m", "gateway.cli", "serve"],
                env={**os.environ, **LOADED_MACHINE_ENV, **env, "IGNARA_PORT": str(port)},
                stdout=log,
                stderr=log,
                cwd=workdir,
            )
            processes.append((f"http://127.0.0.1:{port}", process))
        for url, process in processes:
            wait_healthy(url, process)
        yield processes
    finally:
        for _, process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for _, process in processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def wait_healthy(url: str, process: Process) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, "a gateway exited during start-up"
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{url} never became healthy")
