"""What the Slurm end-to-end tests share: the config declaring the Slurm backend (the
gang itself is tests/support/gangs.py's), and reading jobs back from slurmrestd itself."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any
from urllib.parse import urlsplit

from tests.support.gangs import gang_config
from tests.support.relay import Relay
from tests.support.slurm import SlurmCluster

TOKEN_ENV = "IGNARA_SLURM_TOKEN"


def config(cluster: SlurmCluster, url: str | None = None) -> dict[str, Any]:
    return gang_config(
        {
            "name": "hpc",
            "kind": "slurm",
            "url": url or cluster.url,
            "timeout_seconds": 2,
            "token_env": TOKEN_ENV,
            "user": cluster.user,
            "partition": cluster.partition,
            "api_version": "v0.0.38",
            "output_dir": str(cluster.directory / "gateway-jobs"),
        }
    )


def slurm_job(cluster: SlurmCluster, job_id: str) -> dict[str, Any]:
    [job] = cluster.rest("GET", f"/job/{job_id}")["jobs"]  # type: ignore[misc]
    assert isinstance(job, dict)
    return job


def jobs_named(cluster: SlurmCluster, name: str) -> list[dict[str, Any]]:
    jobs = cluster.rest("GET", "/jobs")["jobs"]
    assert isinstance(jobs, list)
    return [j for j in jobs if j["name"] == name]


class ThreadedRelay:
    """A relay (tests/support/relay.py) in front of slurmrestd, on its own event loop, so
    a synchronous test can take slurmrestd away from the gateway and bring it back."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.relay = Relay(parts.hostname or "127.0.0.1", parts.port or 80)
        self.run(self.relay.start())

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.relay.port}"

    def run(self, coroutine: Coroutine[Any, Any, None]) -> None:
        asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=10)

    def down(self) -> None:
        self.run(self.relay.stop())

    def up(self) -> None:
        self.run(self.relay.start())

    def close(self) -> None:
        self.down()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
