"""A real Ray head with its Jobs REST API, for tests and for a newcomer's machine.

Ray comes from PyPI (``ray[default]``) into its own virtual environment, *not* the gateway's
``.venv``: the gateway speaks to Ray over HTTP and must not depend on it. The environment
is made once at a stable path (``/var/tmp/ignara-ray-venv``, or ``IGNARA_RAY_VENV``) and
reused; a ``.ignara-ready`` stamp marks one that finished installing.

The head follows shared/notes/backends.md §2: bound to 127.0.0.1 only
(``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, or Ray silently listens on eth0), eight fake GPUs
(``--num-gpus=8``), two CPUs, free ports, its own temp directory, usage stats off. It is
stopped by the pids of *its* processes (those naming its temp directory, and all their
descendants), never by ``ray stop``, which would stop every Ray of the user.

Usage::

    python -m tests.support.ray install       # the venv, when missing
    python -m tests.support.ray up DIR        # prints IGNARA_RAY_URL=...
    python -m tests.support.ray down DIR

In Python: ``with ray_head(Path(dir)) as head: head.url``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

__all__ = [
    "FAKE_GPUS",
    "RAY_REQUIREMENT",
    "RayHead",
    "install_ray",
    "ray_head",
    "ray_venv",
    "start_head",
    "stop_head",
    "unavailable_reason",
]

RAY_REQUIREMENT = "ray[default]==2.60.0"
FAKE_GPUS = 8
CPUS = 2
_READY = ".ignara-ready"
_DEFAULT_VENV = Path("/var/tmp/ignara-ray-venv")


@dataclass(frozen=True)
class RayHead:
    """A running head: where the Jobs REST API answers, and its directory."""

    directory: Path
    url: str

    def jobs(self) -> list[dict[str, object]]:
        response = httpx.get(f"{self.url}/api/jobs/", timeout=10)
        response.raise_for_status()
        jobs: list[dict[str, object]] = response.json()
        return jobs

    def stop_all_jobs(self, timeout: float = 20.0) -> None:
        """Stop every job that has not ended, and wait until Ray says they ended (a job
        left running would hold the next test's GPUs)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            live = [j for j in self.jobs() if j["status"] in ("PENDING", "RUNNING")]
            if not live:
                return
            for job in live:
                httpx.post(f"{self.url}/api/jobs/{job['submission_id']}/stop", timeout=10)
            time.sleep(0.5)


def ray_venv() -> Path:
    return Path(os.environ.get("IGNARA_RAY_VENV") or _DEFAULT_VENV)


def _ray_bin(venv: Path) -> Path:
    return venv / "bin" / "ray"


def installed(venv: Path | None = None) -> bool:
    venv = venv or ray_venv()
    return (venv / _READY).exists() and _ray_bin(venv).exists()


def unavailable_reason() -> str | None:
    """Why a Ray head cannot be had here, or ``None`` if it can (perhaps after install)."""
    if installed():
        return None
    venv = ray_venv()
    parent = venv.parent
    if not os.access(parent, os.W_OK):
        return f"Ray is not installed at {venv} and {parent} is not writable"
    return None


def install_ray(venv: Path | None = None) -> Path:
    """Make the venv with Ray when it is missing (~25 s, ~380 MB); return its path. A venv
    cannot be moved (its scripts name their interpreter), so it is built in place and only
    stamped when pip succeeded; an unstamped one is rebuilt."""
    venv = venv or ray_venv()
    if installed(venv):
        return venv
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", RAY_REQUIREMENT],
        check=True,
    )
    (venv / _READY).write_text(RAY_REQUIREMENT + "\n")
    return venv


def _free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "RAY_USAGE_STATS_ENABLED": "0",
        # Without it Ray replaces 127.0.0.1 with eth0's address and listens on all of them.
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    }


def start_head(
    directory: Path,
    venv: Path | None = None,
    *,
    again: bool = False,
    gpus: int = FAKE_GPUS,
    cpus: int = CPUS,
) -> RayHead:
    """Start a head with its temp dir under ``directory`` (kept short: Ray's unix socket
    paths must fit in 107 bytes). Waits until the Jobs API answers. ``again``: on the ports
    of the head last started there (stopped since), as a head brought back after an outage
    comes back at its old address; it knows none of the old head's jobs. ``gpus`` fake
    GPUs and ``cpus`` CPUs are claimed (a benchmark claims more than the machine has)."""
    venv = venv or ray_venv()
    directory.mkdir(parents=True, exist_ok=True)
    temp = directory / "t"
    last = json.loads((directory / "head.json").read_text()) if again else None
    ports = last["ports"] if last else _free_ports(7)
    gcs, dashboard, client, agent, agent_grpc, metrics, runtime_env = ports
    command = [
        str(_ray_bin(venv)),
        "start",
        "--head",
        "--node-ip-address=127.0.0.1",
        f"--port={gcs}",
        "--dashboard-host=127.0.0.1",
        f"--dashboard-port={dashboard}",
        "--include-dashboard=true",
        f"--ray-client-server-port={client}",
        f"--dashboard-agent-listen-port={agent}",
        f"--dashboard-agent-grpc-port={agent_grpc}",
        f"--metrics-export-port={metrics}",
        f"--runtime-env-agent-port={runtime_env}",
        f"--num-cpus={cpus}",
        f"--num-gpus={gpus}",
        # Small: the tests move no objects, and /dev/shm is shared with everything else.
        "--object-store-memory=100000000",
        "--disable-usage-stats",
        f"--temp-dir={temp}",
    ]
    url = f"http://127.0.0.1:{dashboard}"
    (directory / "head.json").write_text(
        json.dumps({"url": url, "temp": str(temp), "gcs": gcs, "ports": ports})
    )
    with (directory / "ray-start.log").open("ab") as out:
        result = subprocess.run(
            command, env=_env(), stdout=out, stderr=subprocess.STDOUT, check=False, timeout=180
        )
    if result.returncode != 0:
        stop_head(directory)
        tail = (directory / "ray-start.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"ray start failed ({result.returncode}):\n{tail}")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/api/jobs/", timeout=5).status_code == 200:
                if again:
                    _runs_a_job(directory, url)
                return RayHead(directory, url)
        time.sleep(0.3)
    stop_head(directory)
    raise RuntimeError(f"the Ray Jobs API at {url} did not answer within 60 s")


def _runs_a_job(directory: Path, url: str, timeout: float = 120.0) -> None:
    """Wait until a head brought back runs a job, not only answers reads: on a loaded
    machine one answered ``GET /api/jobs/`` for minutes while every submission failed,
    and the tests after it timed out waiting for their jobs. A probe that ends other than
    ``SUCCEEDED`` is followed by another, at once."""
    deadline = time.monotonic() + timeout
    probe, last = "", "no probe submitted"
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if not probe:
                probe = f"ignara-probe-{os.getpid()}-{time.monotonic_ns()}"
                body = {"entrypoint": "true", "submission_id": probe}
                if not httpx.post(f"{url}/api/jobs/", json=body, timeout=10).is_success:
                    probe = ""
            else:
                job = httpx.get(f"{url}/api/jobs/{probe}", timeout=10)
                info = job.json() if job.is_success else {}
                status = info.get("status")
                if status == "SUCCEEDED":
                    return
                if status in ("FAILED", "STOPPED"):
                    last = f"probe {probe} ended {status}: {info.get('message')}"
                    probe = ""
                    continue
        time.sleep(0.5)
    stop_head(directory)
    raise RuntimeError(f"the Ray head at {url} did not run a job within {timeout:.0f} s ({last})")


def _processes() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) of every process."""
    found: dict[int, tuple[int, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] == "Z":
            continue  # a zombie: nothing to stop
        found[int(entry.name)] = (int(fields[1]), cmdline)
    return found


def head_pids(directory: Path) -> set[int]:
    """The head's processes: those naming its temp dir or its GCS address, and all their
    descendants (workers, agents, jobs' entrypoints)."""
    marks = [str(directory / "t")]
    with contextlib.suppress(OSError, ValueError, KeyError):
        # The Ray client server is started by `ray start` itself, so it is nobody's child
        # here and names no temp dir: it names the head's GCS address.
        gcs = json.loads((directory / "head.json").read_text())["gcs"]
        marks.append(f"--address=127.0.0.1:{int(gcs)} ")
    processes = _processes()
    pids = {pid for pid, (_, cmdline) in processes.items() if any(m in cmdline for m in marks)}
    pids.discard(os.getpid())
    grew = True
    while grew:
        children = {pid for pid, (parent, _) in processes.items() if parent in pids} - pids
        grew = bool(children)
        pids |= children
    return pids


def stop_head(directory: Path, timeout: float = 3.0) -> None:
    """SIGTERM every process of this head, then SIGKILL what is left after ``timeout``
    (gcs_server and the autoscaler monitor outlive SIGTERM for long: measured >6 s)."""
    deadline = time.monotonic() + timeout
    sent_kill = False
    while pids := head_pids(directory):
        signum = signal.SIGTERM
        if time.monotonic() > deadline:
            signum, sent_kill = signal.SIGKILL, True
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)
        if sent_kill and time.monotonic() > deadline + 10:
            raise RuntimeError(f"Ray processes {sorted(pids)} outlived SIGKILL")
        time.sleep(0.3)


@contextlib.contextmanager
def ray_head(directory: Path, *, gpus: int = FAKE_GPUS, cpus: int = CPUS) -> Iterator[RayHead]:
    """A head for the duration of the block; stopped however the block ends."""
    try:
        yield start_head(directory, gpus=gpus, cpus=cpus)
    finally:
        stop_head(directory)


def _main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.ray", description=__doc__)
    parser.add_argument("command", choices=("install", "up", "down", "env"))
    parser.add_argument("directory", nargs="?", default=".ray")
    args = parser.parse_args(argv)
    directory = Path(args.directory).absolute()
    if args.command == "install":
        if (reason := unavailable_reason()) is not None:
            print(f"not installing Ray (its tests will skip): {reason}", file=sys.stderr)
            return 1 if os.environ.get("CI") else 0
        try:
            install_ray()
        except subprocess.CalledProcessError as err:
            # Outside CI the rest of the suite still runs; the Ray tests say why they skip.
            print(f"cannot install Ray: {err}", file=sys.stderr)
            return 1 if os.environ.get("CI") else 0
        return 0
    if args.command == "up":
        install_ray()
        if head_pids(directory):
            print("already up", file=sys.stderr)
        else:
            start_head(directory)
        args.command = "env"
    if args.command == "env":
        info = json.loads((directory / "head.json").read_text())
        print(f"IGNARA_RAY_URL={info['url']}")
        return 0
    stop_head(directory)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
