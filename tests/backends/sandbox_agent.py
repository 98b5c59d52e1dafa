"""A stand-in gateway for the sandbox tests: a ``LocalBackend`` in its own process, driven
over stdin/stdout (one JSON request per line, one JSON reply per line).

Run as ``python -m tests.backends.sandbox_agent CONFIG``: as root for ``uid`` isolation, or
under ``setpriv`` as an unprivileged user (with the system's python3 and only this
checkout on PYTHONPATH) for ``userns`` isolation. Its own process is what jobs attack: its
environment holds the secrets, its working directory the pepper and database files.
Standard library and ``gateway.backends`` only.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from gateway.backends import (
    BackendError,
    IsolationSettings,
    JobLimits,
    JobSpec,
    JobStatus,
    LocalBackend,
)


def _status(status: JobStatus, logs: bytes) -> dict[str, Any]:
    return {
        "state": status.state.value,
        "exit_code": status.exit_code,
        "message": status.message,
        "logs": logs.decode(errors="replace"),
    }


async def _wait(backend: LocalBackend, workload_id: str, timeout: float) -> JobStatus:
    async with asyncio.timeout(timeout):
        while not (status := await backend.status(workload_id)).state.is_final:
            await asyncio.sleep(0.05)
    return status


async def _handle(backend: LocalBackend, request: dict[str, Any]) -> dict[str, Any]:
    op = request["op"]
    workload_id = request.get("id", "")
    if op == "info":
        isolation = backend.probe()
        return {
            "pid": os.getpid(),
            "uid": os.getuid(),
            "mode": isolation.mode.value,
            "describe": isolation.describe(),
            "namespaces": list(isolation.namespaces),
            "limits": dict(isolation.limits),
        }
    if op == "submit":
        limits = JobLimits(**request.get("limits", {}))
        job = JobSpec(
            workload_id,
            tuple(request["command"]),
            request.get("env", {}),
            request.get("max_runtime", 60),
            limits,
        )
        await backend.submit(job)
        return {}
    if op == "wait":
        status = await _wait(backend, workload_id, request.get("within", 20))
        return _status(status, await backend.logs(workload_id))
    if op == "cancel":
        await backend.cancel(workload_id)
        return _status(await backend.status(workload_id), await backend.logs(workload_id))
    if op == "logs":
        return {"logs": (await backend.logs(workload_id)).decode(errors="replace")}
    if op == "cgroups":
        return {k: str(v) for k, v in backend.job_cgroups(workload_id).items()}
    raise ValueError(f"unknown op {op!r}")


async def main(config: dict[str, Any]) -> None:
    backend = LocalBackend(
        Path(config["root"]),
        grace_seconds=0.5,
        poll_seconds=0.05,
        isolation=IsolationSettings(
            isolation=config.get("isolation", "auto"),
            unsafe=config.get("unsafe", False),
            readonly_paths=tuple(config.get("readonly_paths", ())),
            max_processes=config.get("max_processes", 4096),
        ),
    )
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    try:
        while line := await reader.readline():
            try:
                reply = await _handle(backend, json.loads(line))
            except (BackendError, TimeoutError, ValueError) as exc:
                reply = {"error": type(exc).__name__, "message": str(exc)}
            print(json.dumps(reply), flush=True)
    finally:
        await backend.close()


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
