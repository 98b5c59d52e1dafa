"""Console benchmark: how fast the console's pages answer with 1,000 cluster queues and
100,000 workloads.

Seeds a PostgreSQL database (``DATABASE_URL``'s server, else a throwaway one from the
installed binaries): the queues of ``bench/live_state.py`` (ten per cohort under one
root), a tenant per ten queues, and the workloads written in bulk with ``COPY``:
``--running`` holding quota (every other queue borrows what its idle neighbour lends),
``--pending`` waiting behind them, and finished ones for the rest of ``--workloads``.
The running ones run on a Slurm backend that does not answer, so the gateway neither
starts nor loses them. Then it starts ``ignara serve`` on that database (one process,
the admission leader), signs into the console with the admin key as a browser would,
and times, over ``--requests`` requests each, the server's answer to
``/console/dashboard``, ``/console/cohorts``, ``/console/workloads`` and
``/console/tenants`` (p50, p99, max, in ms), and, with Playwright driving
``/usr/bin/chromium``, how long the dashboard takes to load in a real browser (to the
``load`` event). Prints one JSON object.

    PYTHONPATH=. .venv/bin/python bench/console_dashboard.py  # 1,000 queues, 100,000 workloads

Run on demand, never from tests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from bench.live_state import config as queue_config
from tenants import Database, parse_config
from tenants.services import apply_config
from tests.support.postgres import create_database, postgres_server

GPU = "nvidia.com/gpu"
CHROMIUM = Path("/usr/bin/chromium")
PAGES = ("/console/dashboard", "/console/cohorts", "/console/workloads", "/console/tenants")
TARGET_MS = 200.0
ROOT = Path(__file__).resolve().parents[1]


def gateway_config(queues: int) -> dict[str, Any]:
    """``bench/live_state.py``'s queues and cohorts; a tenant per ten queues; flavor
    h100 runs on a Slurm backend nobody answers for."""
    document = queue_config(queues)
    names = [q["name"] for q in document["cluster_queues"]]  # type: ignore[index]
    return {
        **document,
        "flavors": [{"name": "h100", "backend": "bench-slurm"}],
        "backends": [
            {
                "name": "bench-slurm",
                "kind": "slurm",
                "url": "http://127.0.0.1:9",
                "token_env": "IGNARA_SLURM_TOKEN",
            }
        ],
        "tenants": [
            {"name": f"t-{i:03d}", "queues": names[i * 10 : i * 10 + 10]}
            for i in range((len(names) + 9) // 10)
        ],
    }


def _rows(args: argparse.Namespace, names: list[str]) -> Iterator[tuple[Any, ...]]:
    """(id, tenant, name, queue, spec, state, reason, admission, job_id, attempt,
    backend, created, updated, admitted, finished, priority, cancel_requested, version),
    oldest first."""
    start = datetime(2026, 11, 1, tzinfo=UTC)
    busy = names[::2]
    gpus = 64 * 2 * len(busy) // max(args.running, 1) or 1  # all quota, just
    finished = args.workloads - args.running - args.pending
    for i in range(args.workloads):
        created = start + timedelta(seconds=i)
        wid = uuid.uuid4().hex
        if i < args.running:
            queue = busy[i % len(busy)]
            requests, state, reason = gpus, "running", "Running"
            admission = {
                "cluster_queue": queue,
                "pod_sets": [{"name": "main", "count": 1, "flavors": {GPU: "h100"}}],
            }
            job, attempt, backend, admitted, ended = f"{wid}-1", 1, "bench-slurm", created, None
        elif i < args.running + finished:
            queue = names[i % len(names)]
            requests, state, reason = 1, "succeeded", "Succeeded"
            admission = {
                "cluster_queue": queue,
                "pod_sets": [{"name": "main", "count": 1, "flavors": {GPU: "h100"}}],
            }
            job, attempt, backend = None, 1, "bench-slurm"
            admitted, ended = created, created + timedelta(seconds=60)
        else:
            queue = names[(i * 7919) % len(names)]
            requests, state, reason = 1, "pending", "Pending"
            admission, job, attempt, backend, admitted, ended = None, None, 0, None, None, None
        spec = {
            "pod_sets": [{"name": "main", "count": 1, "requests": {GPU: str(requests)}}],
            "max_runtime_seconds": 3600,
            "job": {"command": ["/bin/true"]},
        }
        yield (
            wid,
            _tenant_of(queue),
            f"w-{i}",
            queue,
            json.dumps(spec),
            state,
            reason,
            json.dumps(admission) if admission is not None else None,
            job,
            attempt,
            backend,
            created,
            ended or created,
            admitted,
            ended,
            0,
            False,
            1,
        )


def _tenant_of(queue: str) -> str:
    return f"t-{int(queue.removeprefix('q-')) // 10:03d}"


async def seed(url: str, args: argparse.Namespace) -> dict[str, float]:
    began = time.perf_counter()
    database = Database(url)
    await database.migrate()
    document = gateway_config(args.queues)
    async with database.session() as session:
        await apply_config(session, parse_config(document), actor="bench")
    await database.dispose()
    configured = time.perf_counter() - began
    names = sorted(q["name"] for q in document["cluster_queues"])
    columns = [
        "id",
        "tenant",
        "name",
        "queue",
        "spec",
        "state",
        "reason_code",
        "admission",
        "job_id",
        "attempt",
        "backend",
        "created_at",
        "updated_at",
        "admitted_at",
        "finished_at",
        "priority",
        "cancel_requested",
        "version",
    ]
    began = time.perf_counter()
    connection = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        # The model's defaults are Python's, not the table's: every column not null is named.
        await connection.copy_records_to_table(
            "workloads", records=list(_rows(args, names)), columns=columns
        )
        await connection.execute("ANALYZE workloads")
    finally:
        await connection.close()
    return {"config_s": round(configured, 2), "workloads_s": round(time.perf_counter() - began, 2)}


class Gateway:
    """``ignara serve`` on the seeded database, in its own process."""

    def __init__(self, url: str, admin_key: str, root: Path) -> None:
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        env = {
            **os.environ,
            "DATABASE_URL": url,
            "IGNARA_ADMIN_KEY": admin_key,
            "IGNARA_KEY_PEPPER": secrets.token_hex(16),
            "IGNARA_PORT": str(self.port),
            "IGNARA_HOST": "127.0.0.1",
            "IGNARA_LOCAL_BACKEND_ROOT": str(root / "jobs"),
            "IGNARA_SLURM_TOKEN": "bench",
            "IGNARA_LOG_LEVEL": "warning",
            # This checkout's code, whichever checkout the venv was installed from.
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        self.log = (root / "gateway.log").open("wb")
        self.popen = subprocess.Popen(
            [str(Path(sys.executable).with_name("ignara")), "serve"],
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    async def ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient() as http:
            while time.monotonic() < deadline:
                if self.popen.poll() is not None:
                    raise RuntimeError(f"the gateway exited ({self.popen.returncode})")
                try:
                    if (await http.get(f"{self.base}/readyz")).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.2)
        raise RuntimeError("the gateway did not get ready")

    def stop(self) -> None:
        self.popen.terminate()
        try:
            self.popen.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.popen.kill()
        self.log.close()


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def sign_in(http: httpx.AsyncClient, admin_key: str) -> None:
    form = await http.get("/console/login")
    match = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert match is not None, form.text[:500]
    answer = await http.post("/console/login", data={"csrf": match.group(1), "key": admin_key})
    assert answer.status_code == 303, answer.text[:500]


def _stats(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 1),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 1),
        "max_ms": round(ordered[-1] * 1000, 1),
    }


async def measure_pages(base: str, admin_key: str, requests: int) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=base, timeout=60) as http:
        await sign_in(http, admin_key)
        results: dict[str, Any] = {}
        for page in PAGES:
            for _ in range(3):  # warm: the first answer may build the live summary
                first = await http.get(page)
                assert first.status_code == 200, (page, first.status_code, first.text[:300])
            times = []
            for _ in range(requests):
                began = time.perf_counter()
                answer = await http.get(page)
                times.append(time.perf_counter() - began)
                assert answer.status_code == 200, (page, answer.status_code)
            results[page] = {**_stats(times), "bytes": len(answer.content)}
        return results


async def measure_browser(base: str, admin_key: str, loads: int) -> dict[str, Any] | str:
    if not CHROMIUM.exists():
        return f"skipped: {CHROMIUM} is missing (make chromium)"
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        # --no-sandbox: as root Chromium's sandbox does not start.
        browser = await playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=["--no-sandbox"]
        )
        try:
            page = await browser.new_page()
            await page.goto(f"{base}/console/login")
            await page.fill("#key", admin_key)
            await page.click("button[type=submit]")
            await page.wait_for_url("**/console/dashboard")
            times = []
            for _ in range(loads):
                began = time.perf_counter()
                await page.goto(f"{base}/console/dashboard", wait_until="load")
                times.append(time.perf_counter() - began)
            timing = await page.evaluate(
                "() => { const t = performance.getEntriesByType('navigation')[0];"
                " return {ttfb: t.responseStart - t.requestStart,"
                " load: t.loadEventEnd - t.startTime}; }"
            )
            return {
                **_stats(times),
                "loads": loads,
                "last_ttfb_ms": round(timing["ttfb"], 1),
                "last_load_ms": round(timing["load"], 1),
            }
        finally:
            await browser.close()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    admin_key = secrets.token_urlsafe(32)
    with postgres_server() as server, tempfile.TemporaryDirectory() as tmp:
        url = await create_database(server)
        seeded = await seed(url, args)
        gateway = Gateway(url, admin_key, Path(tmp))
        try:
            await gateway.ready()
            await asyncio.sleep(args.settle)  # the first admission and dispatch passes
            pages = await measure_pages(gateway.base, admin_key, args.requests)
            browser = await measure_browser(gateway.base, admin_key, args.loads)
        finally:
            gateway.stop()
    dashboard = pages["/console/dashboard"]
    return {
        "queues": args.queues,
        "workloads": args.workloads,
        "running": args.running,
        "pending": args.pending,
        "seed": seeded,
        "requests_per_page": args.requests,
        "pages": pages,
        "browser_dashboard": browser,
        "dashboard_target_ms": TARGET_MS,
        "dashboard_p50_under_target": dashboard["p50_ms"] < TARGET_MS,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queues", type=int, default=1000)
    parser.add_argument("--workloads", type=int, default=100_000)
    parser.add_argument("--running", type=int, default=2_000)
    parser.add_argument("--pending", type=int, default=20_000)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--loads", type=int, default=10)
    parser.add_argument("--settle", type=float, default=10.0)
    args = parser.parse_args()
    if args.running + args.pending > args.workloads:
        parser.error("--running + --pending: more than --workloads")
    print(json.dumps(asyncio.run(run(args)), indent=2))


if __name__ == "__main__":
    main()
