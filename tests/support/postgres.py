"""A PostgreSQL server for tests: the one ``DATABASE_URL`` names, or a throwaway one
started from the installed binaries (initdb + pg_ctl) on a free loopback port."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import asyncpg

__all__ = ["create_database", "postgres_server"]


def _bin(name: str) -> str:
    found = shutil.which(name) or next(
        iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None
    )
    if found is None:
        raise RuntimeError(
            f"PostgreSQL's {name} is not installed and DATABASE_URL is not set: "
            "install postgresql or point DATABASE_URL at a server"
        )
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def postgres_server() -> Iterator[str]:
    """Yield a ``postgresql://`` URL of a server tests may create databases on."""
    url = os.environ.get("DATABASE_URL")
    if url:
        yield url
        return
    root = Path(tempfile.mkdtemp(prefix="ignara-pg-"))
    data, log = root / "data", root / "server.log"
    as_user: list[str] = []
    if os.geteuid() == 0:  # initdb refuses to run as root
        account = pwd.getpwnam("postgres")
        os.chown(root, account.pw_uid, account.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    port = _free_port()
    run = {"check": True, "capture_output": True, "timeout": 120}
    try:
        subprocess.run(
            [
                *as_user,
                _bin("initdb"),
                "-D",
                str(data),
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
            **run,  # type: ignore[call-overload]
        )
        options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
        subprocess.run(
            [
                *as_user,
                _bin("pg_ctl"),
                "-D",
                str(data),
                "-o",
                options,
                "-l",
                str(log),
                "-w",
                "-t",
                "60",
                "start",
            ],
            **run,  # type: ignore[call-overload]
        )
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [*as_user, _bin("pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
            capture_output=True,
            timeout=60,
            check=False,
        )
        shutil.rmtree(root, ignore_errors=True)


async def create_database(server_url: str, *, template: str | None = None) -> str:
    """A fresh database on the server, empty or a copy of the database ``template``
    (which nobody may be connected to); returns its URL."""
    name = f"ignara_test_{uuid.uuid4().hex[:12]}"
    copy = f' TEMPLATE "{template}"' if template is not None else ""
    connection = await asyncpg.connect(server_url, timeout=10)
    try:
        await connection.execute(f'CREATE DATABASE "{name}"{copy}')
    finally:
        await connection.close()
    return server_url.rsplit("/", 1)[0] + f"/{name}"
