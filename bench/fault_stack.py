"""The servers of one fault scenario: its own Redis and PostgreSQL (``tests/support/faults.py``,
which it may kill, freeze and restart), a fast upstream (``bench/upstream.py``, with a small
delay so calls stay in flight), and two ``ignara serve`` gateways sharing them, each of which
it may kill and start again on the same port.

The configuration (:func:`config`) has three tenants:

- ``roomy``: inference with quotas far above the load; its calls measure availability.
- ``tight``: inference on a queue with ``TIGHT_RATE`` tokens per minute and a day budget of
  ``TIGHT_BUDGET``, both far below what its clients ask for; its calls measure whether
  quota is handed out twice.
- ``batch``: training workloads on the local backend (eight GPUs' quota, one GPU each).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.proxy import BenchError, free_port, process, wait_http
from tests.support.faults import OwnedPostgres, OwnedRedis

__all__ = [
    "FLAVOR",
    "MODEL",
    "QUOTA",
    "TENANTS",
    "TIGHT_BUDGET",
    "TIGHT_RATE",
    "Gateway",
    "Stack",
    "config",
    "stack",
]

ROOT = Path(__file__).resolve().parents[1]
MODEL = "bench-model"
FLAVOR = "bench-pool"
TIGHT_RATE = 3000  # tokens-per-minute of queue "tight"
TIGHT_BUDGET = 4000  # tokens-per-day of queue "tight": more than one minute's rate
TENANTS = ("roomy", "tight", "batch")
_FAR_ABOVE = {"nominal": 10**10}

QUOTA: dict[str, Any] = {
    "flavors": [FLAVOR, "h100"],
    "cluster_queues": [
        {
            "name": "roomy",
            "resource_groups": [
                {
                    "resources": ["tokens-per-minute", "requests-per-minute", "tokens-per-day"],
                    "flavors": [
                        {
                            "name": FLAVOR,
                            "quotas": {
                                "tokens-per-minute": _FAR_ABOVE,
                                "requests-per-minute": _FAR_ABOVE,
                                "tokens-per-day": _FAR_ABOVE,
                            },
                        }
                    ],
                }
            ],
        },
        {
            "name": "tight",
            "resource_groups": [
                {
                    "resources": ["tokens-per-minute", "tokens-per-day"],
                    "flavors": [
                        {
                            "name": FLAVOR,
                            "quotas": {
                                "tokens-per-minute": {"nominal": TIGHT_RATE},
                                "tokens-per-day": {"nominal": TIGHT_BUDGET},
                            },
                        }
                    ],
                }
            ],
        },
        {
            "name": "batch",
            "resource_groups": [
                {
                    "resources": ["nvidia.com/gpu"],
                    "flavors": [{"name": "h100", "quotas": {"nvidia.com/gpu": {"nominal": 8}}}],
                }
            ],
        },
    ],
}


def config(upstream: str) -> dict[str, Any]:
    """``QUOTA``, the three tenants on their queues, and the model on ``upstream``."""
    return {
        **QUOTA,
        "tenants": [{"name": t, "queues": [t]} for t in TENANTS],
        "models": [{"name": MODEL, "flavor": FLAVOR, "endpoints": [{"base_url": upstream}]}],
    }


@dataclass
class Gateway:
    """One ``ignara serve`` on a fixed port: started, killed and started again there."""

    name: str
    port: int
    env: dict[str, str]
    workdir: Path
    popen: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / f"gateway-{self.name}.log"

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def start(self) -> None:
        assert not self.alive, f"gateway {self.name} is running"
        with self.log_path.open("ab") as sink:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "gateway.cli", "serve"],
                env={**os.environ, **self.env, "IGNARA_PORT": str(self.port)},
                stdout=sink,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
            )

    def wait_healthy(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive:
                raise BenchError(f"gateway {self.name} exited at start:\n{self.log_tail()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise BenchError(f"gateway {self.name} not healthy in {timeout:.0f}s:\n{self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL: no shutdown, nothing flushed or given back."""
        if self.popen is not None and self.alive:
            self.popen.kill()
            self.popen.wait(timeout=10)

    def stop(self) -> None:
        if self.popen is None or not self.alive:
            return
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.kill()

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:] or "(empty)"
        except OSError:
            return "(no log)"


@dataclass
class Stack:
    redis: OwnedRedis
    postgres: OwnedPostgres
    database_url: str
    gateways: list[Gateway]
    admin_key: str
    jobs_root: Path
    keys: dict[str, str] = field(default_factory=dict)  # tenant -> its API key

    def urls(self) -> list[str]:
        return [g.url for g in self.gateways]


@contextmanager
def stack(tmp: Path, upstream_delay: float) -> Iterator[Stack]:
    """Everything started and configured; everything stopped on the way out (the
    gateways first, then the upstream, PostgreSQL and Redis)."""
    if shutil.which("redis-server") is None:  # else OwnedRedis would skip, as in a test
        raise BenchError("redis-server is not installed")
    with ExitStack() as started:
        redis = started.enter_context(OwnedRedis())
        postgres = started.enter_context(OwnedPostgres())
        database_url = postgres.database_url("ignara")
        port = free_port()
        upstream_cmd = [sys.executable, str(ROOT / "bench" / "upstream.py"), "--port", str(port)]
        upstream_cmd += ["--delay", str(upstream_delay), "--chunk-delay", str(upstream_delay / 10)]
        upstream = started.enter_context(process("upstream", upstream_cmd, tmp / "upstream.log"))
        wait_http(upstream, f"http://127.0.0.1:{port}/v1/models", timeout=30)
        admin_key = secrets.token_urlsafe(32)
        env = {
            "DATABASE_URL": database_url,
            "REDIS_URL": redis.url,
            "IGNARA_ADMIN_KEY": admin_key,
            "IGNARA_KEY_PEPPER": secrets.token_urlsafe(32),
            "IGNARA_LOCAL_BACKEND_ROOT": str(tmp / "jobs"),
            "IGNARA_LOG_LEVEL": "warning",
            "IGNARA_HEALTH_INTERVAL": "3600",
            "IGNARA_UPSTREAM_TIMEOUT": "10",
            "IGNARA_UPSTREAM_TOTAL_TIMEOUT": "20",
        }
        gateways = [Gateway(name, free_port(), env, tmp) for name in ("a", "b")]
        for gateway in gateways:
            started.callback(gateway.stop)
            gateway.start()
        for gateway in gateways:
            gateway.wait_healthy()
        built = Stack(redis, postgres, database_url, gateways, admin_key, tmp / "jobs")
        configure(built, f"http://127.0.0.1:{port}/v1")
        yield built


def configure(stack: Stack, upstream: str) -> None:
    """Apply :func:`config`, make a key per tenant, and wait until both gateways serve them."""
    admin = {"Authorization": f"Bearer {stack.admin_key}"}
    first, second = stack.urls()
    with httpx.Client(timeout=30) as client:
        applied = client.post(f"{first}/api/v1/admin/config", json=config(upstream), headers=admin)
        if applied.status_code != 201:
            raise BenchError(f"config refused: {applied.status_code} {applied.text}")
        for tenant in TENANTS:
            made = client.post(
                f"{second}/api/v1/admin/tenants/{tenant}/keys",
                json={"principal": f"bench-{tenant}", "roles": ["member"]},
                headers=admin,
            )
            if made.status_code != 201:
                raise BenchError(f"key for {tenant} refused: {made.status_code} {made.text}")
            stack.keys[tenant] = made.json()["token"]
        # Each replica reloads the configuration within about a second of a change.
        for url in stack.urls():
            for tenant in TENANTS:
                probe = f"{url}/api/v1/workloads" if tenant == "batch" else f"{url}/v1/models"
                bearer = {"Authorization": f"Bearer {stack.keys[tenant]}"}
                deadline = time.monotonic() + 20
                while True:
                    answer = client.get(probe, headers=bearer)
                    if answer.status_code == 200 and (tenant == "batch" or answer.json()["data"]):
                        break
                    if time.monotonic() > deadline:
                        raise BenchError(f"{url} does not serve {tenant}: {answer.text}")
                    time.sleep(0.1)
