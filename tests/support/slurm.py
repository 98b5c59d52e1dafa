"""A real single-node Slurm cluster with slurmrestd, for tests and for a newcomer's machine.

Everything runs from the Debian packages (installed when missing, as root): munged,
slurmctld and slurmd as root, slurmrestd as the unprivileged ``slurm`` user with JWT auth
on 127.0.0.1. Eight fake GPUs are character devices (the major/minor of /dev/null) that
Slurm schedules and counts as ``gres/gpu``. All state, logs and pid files live under one
directory; teardown cancels every job, then stops each daemon by its pid.

Usage (shared/notes/backends.md §1 has the measured recipe this follows)::

    python -m tests.support.slurm install        # the packages, when missing
    python -m tests.support.slurm up DIR         # prints IGNARA_SLURM_URL=... lines
    python -m tests.support.slurm status DIR
    python -m tests.support.slurm down DIR

In Python: ``with slurm_cluster(Path(dir)) as cluster: cluster.url, cluster.token``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support.processes import alive

__all__ = [
    "API_VERSION",
    "PACKAGES",
    "SlurmCluster",
    "install_packages",
    "missing_packages",
    "slurm_cluster",
    "start_cluster",
    "stop_cluster",
    "unavailable_reason",
]

PACKAGES = (
    "munge",
    "slurm-wlm",
    "slurmctld",
    "slurmd",
    "slurm-client",
    "slurmrestd",
    "slurm-wlm-jwt-plugin",
)
API_VERSION = "v0.0.38"
FAKE_GPUS = 8
REST_USER = "slurm"  # slurmrestd refuses to run as root; it binds, then drops to this user
PARTITION = "debug"


@dataclass(frozen=True)
class SlurmCluster:
    """A running cluster: where slurmrestd answers, a root token, and its state directory."""

    directory: Path
    url: str
    token: str
    user: str = "root"
    partition: str = PARTITION

    @property
    def env(self) -> dict[str, str]:
        """What the Slurm command-line tools need to talk to this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.directory / "slurm.conf")}

    def rest(self, method: str, path: str) -> dict[str, object]:
        """One call to slurmrestd (``path`` after ``/slurm/<version>``), its JSON body."""
        response = httpx.request(
            method,
            f"{self.url}/slurm/{API_VERSION}{path}",
            headers={"X-SLURM-USER-NAME": self.user, "X-SLURM-USER-TOKEN": self.token},
            timeout=10,
        )
        body: dict[str, object] = response.json()
        return body

    def stop_controller(self) -> None:
        """Stop slurmctld alone (it saves its state; slurmd and the jobs on it keep running,
        slurmrestd answers with errors): a backend outage."""
        _stop_pid(_pid(self.directory / "slurmctld.pid"))

    def start_controller(self, *, forget_jobs: bool = False) -> None:
        """Start slurmctld again; it recovers its jobs from its saved state, or, with
        ``forget_jobs``, starts without it (``-c``: a controller that lost its state; the
        jobs still on the node are killed as orphans)."""
        clear = ["-c"] if forget_jobs else []
        subprocess.run(
            ["slurmctld", *clear, "-f", str(self.directory / "slurm.conf")],
            check=True,
            env=self.env,
        )
        _wait("the node back", lambda: _node_idle(self.env) or _node_busy(self.env))


def missing_packages() -> list[str]:
    missing = []
    for package in PACKAGES:
        result = subprocess.run(
            ["dpkg-query", "-W", "-f=${Status}", package],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0 or "install ok installed" not in result.stdout:
            missing.append(package)
    return missing


def unavailable_reason() -> str | None:
    """Why a Slurm cluster cannot be had on this machine, or ``None`` if it can."""
    if os.geteuid() != 0:
        return "a real Slurm needs root (slurmd, munged and fake GPU devices)"
    if shutil.which("dpkg-query") is None:
        return "a real Slurm needs the Debian packages, and this is no Debian system"
    if missing_packages() and shutil.which("apt-get") is None:
        return "the Slurm packages are missing and apt-get is not available to install them"
    return None


def install_packages() -> None:
    """Install the packages that are missing (``apt-get update`` first, once)."""
    missing = missing_packages()
    if not missing:
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update"], check=True, env=env, stdout=subprocess.DEVNULL)
    subprocess.run(
        ["apt-get", "install", "-y", "--no-install-recommends", *missing],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _node_line(hostname: str, gpus: int, cpus: int | None) -> str:
    """The node as slurmd sees it (its RealMemory must not exceed what slurmd finds);
    ``cpus``: claim that many cores instead (with ``config_overrides``), for benchmarks
    of many tiny jobs on a small machine."""
    first = subprocess.run(
        ["slurmd", "-C"], capture_output=True, text=True, check=True
    ).stdout.splitlines()[0]
    fields = [f for f in first.split() if not f.startswith("NodeName=")]
    if cpus is not None:
        shape = ("CPUs=", "Boards=", "SocketsPerBoard=", "CoresPerSocket=", "ThreadsPerCore=")
        fields = [f for f in fields if not f.startswith(shape)]
        fields += [
            f"CPUs={cpus}",
            "SocketsPerBoard=1",
            f"CoresPerSocket={cpus}",
            "ThreadsPerCore=1",
        ]
    return f"NodeName={hostname} NodeAddr=127.0.0.1 {' '.join(fields)} Gres=gpu:{gpus}"


def _write_config(
    directory: Path,
    hostname: str,
    ports: Mapping[str, int],
    gpus: int = FAKE_GPUS,
    cpus: int | None = None,
) -> None:
    fake_gpus = gpus
    gpus = directory / "gpus"
    gpus.mkdir(exist_ok=True)
    for i in range(fake_gpus):
        device = gpus / f"fakegpu{i}"
        if not device.exists():
            # The major/minor of /dev/null: a real character device slurmd accepts as a GPU.
            os.mknod(device, 0o666 | 0o020000, os.makedev(1, 3))
    key = directory / "jwt_hs256.key"
    if not key.exists():
        key.write_bytes(secrets.token_bytes(32))
        key.chmod(0o600)
    (directory / "spool").mkdir(exist_ok=True)
    (directory / "state").mkdir(exist_ok=True)
    d = directory
    conf = f"""\
ClusterName=ignara
SlurmctldHost={hostname}(127.0.0.1)
SlurmctldPort={ports["ctld"]}
SlurmdPort={ports["slurmd"]}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={d}/munge/munge.socket
CredType=cred/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key={key}
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=256
GresTypes=gpu
JobCompType=jobcomp/filetxt
JobCompLoc={d}/jobcomp.txt
MinJobAge=3600
KillWait=5
MailProg=/bin/true
ReturnToService=2
SchedulerParameters=sched_interval=2
{"SlurmdParameters=config_overrides" if cpus is not None else ""}
{_node_line(hostname, fake_gpus, cpus)} State=UNKNOWN
PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
    (directory / "slurm.conf").write_text(conf)
    (directory / "gres.conf").write_text(
        f"AutoDetect=off\nNodeName={hostname} Name=gpu File={gpus}/fakegpu[0-{fake_gpus - 1}]\n"
    )


def _start_munge(directory: Path) -> None:
    run = directory / "munge"
    run.mkdir(exist_ok=True)
    shutil.chown(run, "munge", "munge")
    run.chmod(0o755)
    key = Path("/etc/munge/munge.key")
    if not key.exists():  # the package's postinst makes one; a stripped image may lack it
        key = run / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        shutil.chown(key, "munge", "munge")
        key.chmod(0o400)
    subprocess.run(
        [
            "runuser",
            "-u",
            "munge",
            "--",
            "munged",
            f"--socket={run}/munge.socket",
            f"--pid-file={run}/munged.pid",
            f"--log-file={run}/munged.log",
            f"--seed-file={run}/munged.seed",
            f"--key-file={key}",
        ],
        check=True,
    )


def _wait(what: str, ready: object, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(ready) and ready():
            return
        time.sleep(0.2)
    raise RuntimeError(f"Slurm did not come up: {what} within {timeout:.0f} s")


def _node_idle(env: Mapping[str, str]) -> bool:
    result = subprocess.run(
        ["sinfo", "-h", "-N", "-o", "%T"], capture_output=True, text=True, env=env, check=False
    )
    return result.returncode == 0 and result.stdout.strip() in ("idle", "mixed", "allocated")


def _node_busy(env: Mapping[str, str]) -> bool:
    out = subprocess.run(
        ["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True, check=False
    ).stdout
    return out.strip().rstrip("*") in ("mixed", "allocated")


def _token(env: Mapping[str, str]) -> str:
    out = subprocess.run(
        ["scontrol", "token", "username=root", "lifespan=86400"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout.strip()
    return out.removeprefix("SLURM_JWT=")


def start_cluster(
    directory: Path, *, gpus: int = FAKE_GPUS, cpus: int | None = None
) -> SlurmCluster:
    """Start munged, slurmctld, slurmd and slurmrestd with their state in ``directory``
    (created; it must be new or from a cluster that was stopped)."""
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o755)  # munged (as munge) and slurmrestd (as slurm) go through it
    hostname = socket.gethostname().split(".")[0]
    ports = {"ctld": _free_port(), "slurmd": _free_port(), "rest": _free_port()}
    _write_config(directory, hostname, ports, gpus, cpus)
    env = {**os.environ, "SLURM_CONF": str(directory / "slurm.conf")}
    _start_munge(directory)
    subprocess.run(["slurmctld", "-f", str(directory / "slurm.conf")], check=True, env=env)
    subprocess.run(["slurmd", "-f", str(directory / "slurm.conf")], check=True, env=env)
    _wait("the node idle", lambda: _node_idle(env))
    url = f"http://127.0.0.1:{ports['rest']}"
    log = open(directory / "slurmrestd.log", "wb")  # noqa: SIM115 - the daemon keeps it
    rest = subprocess.Popen(
        [
            "slurmrestd",
            "-u",
            REST_USER,
            "-a",
            "rest_auth/jwt",
            "-s",
            f"openapi/{API_VERSION}",
            f"127.0.0.1:{ports['rest']}",
        ],
        env={**env, "SLURM_JWT": "daemon"},
        stdout=log,
        stderr=log,
        start_new_session=True,  # outlives `up`; stopped by its pid file
    )
    log.close()
    (directory / "slurmrestd.pid").write_text(str(rest.pid))
    cluster = SlurmCluster(directory, url, _token(env))
    (directory / "cluster.json").write_text(
        json.dumps({"url": cluster.url, "token": cluster.token, "user": cluster.user})
    )
    cluster.directory.joinpath("cluster.json").chmod(0o600)

    def answers() -> bool:
        with contextlib.suppress(httpx.HTTPError, ValueError):
            return "errors" in cluster.rest("GET", "/ping")
        return False

    _wait("slurmrestd answering", answers)
    return cluster


def _pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _stop_pid(pid: int | None, timeout: float = 15.0) -> None:
    if pid is None or not alive(pid):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and alive(pid):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.1)
    if alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def stop_cluster(directory: Path) -> None:
    """Cancel every job (slurmstepd outlives slurmd), then stop each daemon by its pid."""
    env = {**os.environ, "SLURM_CONF": str(directory / "slurm.conf")}
    if (directory / "slurm.conf").exists() and alive(_pid(directory / "slurmctld.pid") or 0):
        subprocess.run(["scancel", "--user=root"], env=env, check=False, capture_output=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            queue = subprocess.run(
                ["squeue", "-h", "-t", "all", "-o", "%T"],
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            states = set(queue.stdout.split())
            if queue.returncode != 0 or not states & {"RUNNING", "PENDING", "COMPLETING"}:
                break
            time.sleep(0.5)
    _stop_pid(_pid(directory / "slurmrestd.pid"))
    _stop_pid(_pid(directory / "slurmd.pid"))
    _stop_pid(_pid(directory / "slurmctld.pid"))
    _stop_pid(_pid(directory / "munge" / "munged.pid"))


def cluster_status(directory: Path) -> dict[str, bool]:
    return {
        name: alive(_pid(directory / path) or 0)
        for name, path in (
            ("munged", "munge/munged.pid"),
            ("slurmctld", "slurmctld.pid"),
            ("slurmd", "slurmd.pid"),
            ("slurmrestd", "slurmrestd.pid"),
        )
    }


@contextlib.contextmanager
def slurm_cluster(
    directory: Path, *, gpus: int = FAKE_GPUS, cpus: int | None = None
) -> Iterator[SlurmCluster]:
    """A cluster for the duration of the block; stopped however the block ends."""
    try:
        yield start_cluster(directory, gpus=gpus, cpus=cpus)
    finally:
        stop_cluster(directory)


def _main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.slurm", description=__doc__)
    parser.add_argument("command", choices=("install", "up", "down", "status", "env"))
    parser.add_argument("directory", nargs="?", default=".slurm")
    args = parser.parse_args(argv)
    directory = Path(args.directory).absolute()
    if args.command == "install":
        if (reason := unavailable_reason()) is not None:
            print(f"not installing Slurm (its tests will skip): {reason}", file=sys.stderr)
            return 0
        try:
            install_packages()
        except subprocess.CalledProcessError as err:
            # Outside CI the rest of the suite still runs; the Slurm tests say why they fail.
            print(f"cannot install the Slurm packages: {err}", file=sys.stderr)
            return 1 if os.environ.get("CI") else 0
        return 0
    if args.command == "up":
        if (reason := unavailable_reason()) is not None:
            print(f"cannot start Slurm: {reason}", file=sys.stderr)
            return 1
        install_packages()
        if all(cluster_status(directory).values()):
            print("already up", file=sys.stderr)
        else:
            stop_cluster(directory)
            start_cluster(directory)
        args.command = "env"
    if args.command == "env":
        info = json.loads((directory / "cluster.json").read_text())
        print(f"IGNARA_SLURM_URL={info['url']}")
        print(f"IGNARA_SLURM_TOKEN={info['token']}")
        return 0
    if args.command == "status":
        status = cluster_status(directory)
        for name, alive in status.items():
            print(f"{name}: {'up' if alive else 'down'}")
        return 0 if all(status.values()) else 1
    stop_cluster(directory)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
