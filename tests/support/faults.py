"""Servers a test owns and may hurt: a redis-server it can kill, freeze, thaw and
restart empty on the same port, and a PostgreSQL it can stop, start and restart.

Never the shared servers of ``REDIS_URL`` / ``DATABASE_URL``: a fault test always starts
its own from the installed binaries, so it harms nothing else.

Usage::

    with OwnedRedis() as redis:
        ...            # redis.url
        redis.freeze() # alive, accepts connections, answers nothing (SIGSTOP)
        redis.thaw()
        redis.kill()   # SIGKILL: connections reset
        redis.start()  # again on the same port, with nothing in it (no persistence)

    with OwnedPostgres() as pg:
        url = pg.database_url("ignara")   # created on first use
        pg.stop(); pg.start(); pg.restart()
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

import asyncpg
import pytest

from tests.support.gateways import free_port
from tests.support.postgres import _bin

__all__ = ["OwnedPostgres", "OwnedRedis"]

_START_TIMEOUT = 20.0


class OwnedRedis:
    """A redis-server of the test's own, on a fixed port for its whole life."""

    def __init__(self, *, persistence: bool = False) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.skip("redis-server is not installed")
        self._binary = binary
        self._root = Path(tempfile.mkdtemp(prefix="ignara-fault-redis-"))
        self.port = free_port()
        self.persistence = persistence
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start (again) on the same port; without persistence it starts empty."""
        assert self._process is None or self._process.poll() is not None, "already running"
        log = self._root / "server.log"
        command = [self._binary, "--port", str(self.port), "--bind", "127.0.0.1"]
        command += ["--dir", str(self._root), "--logfile", str(log)]
        if self.persistence:
            command += ["--appendonly", "yes", "--appendfsync", "always"]
        else:
            command += ["--save", "", "--appendonly", "no"]
        self._process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + _START_TIMEOUT
        while not _answers_ping(self.port):
            if self._process.poll() is not None:
                raise RuntimeError(f"redis-server exited at start:\n{log.read_text()}")
            if time.monotonic() > deadline:
                raise RuntimeError("redis-server did not answer PING in time")
            time.sleep(0.02)

    def kill(self) -> None:
        """SIGKILL: whatever it held is gone (unless persisted)."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait(timeout=10)

    def freeze(self) -> None:
        """Alive and listening, but answering nothing: the kernel still accepts
        connections into its backlog."""
        assert self._process is not None
        self._process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        assert self._process is not None
        self._process.send_signal(signal.SIGCONT)

    def restart_empty(self) -> None:
        self.kill()
        self.start()

    def __enter__(self) -> OwnedRedis:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGCONT)  # a frozen one cannot die of TERM
        self.kill()
        shutil.rmtree(self._root, ignore_errors=True)


class OwnedPostgres:
    """A PostgreSQL cluster of the test's own (initdb + pg_ctl), on a fixed port."""

    def __init__(self) -> None:
        self._root = Path(tempfile.mkdtemp(prefix="ignara-fault-pg-"))
        self._data = self._root / "data"
        self.port = free_port()
        self._as_user: list[str] = []
        if os.geteuid() == 0:  # initdb refuses to run as root
            account = pwd.getpwnam("postgres")
            os.chown(self._root, account.pw_uid, account.pw_gid)
            self._as_user = ["runuser", "-u", "postgres", "--"]
        self._databases: set[str] = set()

    @property
    def server_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def database_url(self, name: str) -> str:
        """The URL of database ``name`` (created the first time it is asked for)."""
        if name not in self._databases:
            import asyncio

            asyncio.run(self._create(name))
            self._databases.add(name)
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"

    async def _create(self, name: str) -> None:
        connection = await asyncpg.connect(self.server_url, timeout=10)
        try:
            await connection.execute(f'CREATE DATABASE "{name}"')
        finally:
            await connection.close()

    def initialize(self) -> None:
        self._run(
            _bin("initdb"),
            "-D",
            str(self._data),
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--no-sync",
        )

    def start(self) -> None:
        options = f"-p {self.port} -k {self._root} -c listen_addresses=127.0.0.1 -c fsync=off"
        log = str(self._root / "server.log")
        self._run(
            _bin("pg_ctl"),
            "-D",
            str(self._data),
            "-o",
            options,
            "-l",
            log,
            "-w",
            "-t",
            "60",
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        """Stop: ``fast`` (clients disconnected, a clean shutdown) or ``immediate``
        (as a crash: recovery at the next start)."""
        self._run(_bin("pg_ctl"), "-D", str(self._data), "-m", mode, "-w", "stop", check=False)

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()

    def _run(self, *command: str, check: bool = True) -> None:
        subprocess.run([*self._as_user, *command], check=check, capture_output=True, timeout=120)

    def __enter__(self) -> OwnedPostgres:
        self.initialize()
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop("immediate")
        shutil.rmtree(self._root, ignore_errors=True)


def _answers_ping(port: int) -> bool:
    import socket

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False
