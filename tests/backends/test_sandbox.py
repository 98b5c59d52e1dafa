"""Real jobs try to escape the local backend's sandbox, and fail.

Each isolation mode that runs here is exercised through a stand-in gateway process
(``sandbox_agent``): ``uid`` with the agent as root, ``userns`` with the agent as an
unprivileged user (setpriv, the system's python3). The agent's environment holds secrets,
its working directory a key pepper and a database file, its job root the other jobs: the
jobs attack exactly those, by the paths a job would guess. A positive control shows that
the job itself runs and writes its own files. Every wait is bounded.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.backends.test_local import new_marker, processes_with

PY3 = "/usr/bin/python3"
WORKTREE = Path(__file__).resolve().parents[2]
UNPRIVILEGED = 61234  # the userns agent's uid: no account, nothing owned
MAX_PROCESSES = 32
SECRET_ENV = {
    "IGNARA_ADMIN_KEY": "admin-key-must-not-leak-7f3a9",
    "OPENAI_API_KEY": "sk-upstream-must-not-leak-91c2e",
}
PEPPER = "pepper-must-not-leak-5d1e0"
DATABASE = "database-row-must-not-leak-2b8c4"
SECRETS = (*SECRET_ENV.values(), PEPPER, DATABASE)

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox tests set up users"),
    pytest.mark.skipif(
        not os.access(PY3, os.X_OK)
        or subprocess.run([PY3, "-c", "import sys; assert sys.version_info >= (3, 11)"]).returncode,
        reason=f"jobs and the unprivileged gateway need {PY3} 3.11+",
    ),
]


# -- the stand-in gateway -------------------------------------------------------------------


class Agent:
    """A ``sandbox_agent`` process and its request/reply pipe."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path, log: Path) -> None:
        self._log = log.open("wb")
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, env=env, cwd=cwd
        )

    def call(self, op: str, timeout: float = 30, **fields: Any) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps({"op": op, **fields}).encode() + b"\n")
        self.process.stdin.flush()
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        assert ready, f"the agent did not answer {op!r} within {timeout} s"
        line = self.process.stdout.readline()
        assert line, f"the agent died (exit {self.process.poll()})"
        reply: dict[str, Any] = json.loads(line)
        assert "error" not in reply, reply
        return reply

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        self._log.close()


@dataclass
class Gateway:
    mode: str
    agent: Agent
    home: Path  # the agent's working directory: pepper and database live here
    root: Path  # its job root
    pid: int
    uid: int
    info: dict[str, Any]

    def submit(self, workload_id: str, command: list[str], **fields: Any) -> None:
        self.agent.call("submit", id=workload_id, command=command, **fields)

    def wait(self, workload_id: str, timeout: float = 20) -> dict[str, Any]:
        return self.agent.call("wait", timeout=timeout + 5, id=workload_id, within=timeout)

    def run(self, workload_id: str, command: list[str], **fields: Any) -> dict[str, Any]:
        self.submit(workload_id, command, **fields)
        return self.wait(workload_id)

    def logs(self, workload_id: str) -> str:
        logs: str = self.agent.call("logs", id=workload_id)["logs"]
        return logs

    def wait_logs(self, workload_id: str, text: str, timeout: float = 10) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in (logs := self.logs(workload_id)):
                return logs
            time.sleep(0.05)
        raise AssertionError(f"{text!r} never appeared in {workload_id}'s log: {logs!r}")

    def alive(self) -> bool:
        return self.agent.process.poll() is None and self.agent.call("info")["pid"] == self.pid


def py(code: str, *args: object) -> list[str]:
    return [PY3, "-c", code, *map(str, args)]


def new_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(4)}"


def last_json(result: dict[str, Any]) -> Any:
    assert result["state"] == "succeeded", result
    return json.loads(result["logs"].strip().splitlines()[-1])


def wait_until_gone(marker: str, timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while processes_with(marker):
        assert time.monotonic() < deadline, f"processes with {marker!r} outlived their job"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def suid_dir() -> Iterator[Path]:
    """A setuid-root copy of ``id``, offered to jobs as an operator's read-only path."""
    # Not under /tmp: inside the sandbox, /tmp is the job's own.
    parent = "/srv" if os.path.isdir("/srv") else "/var/lib"
    directory = Path(tempfile.mkdtemp(prefix="ignara-suid-", dir=parent))
    directory.chmod(0o755)
    shutil.copy("/usr/bin/id", directory / "id")
    os.chown(directory / "id", 0, 0)
    (directory / "id").chmod(0o4755)
    yield directory
    shutil.rmtree(directory)


def _kill_jobs(root: Path) -> None:
    for status_file in root.glob("*/status.json"):
        data = json.loads(status_file.read_text())
        if data.get("pid") and data.get("state") in ("pending", "running"):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(data["pid"], signal.SIGKILL)


@pytest.fixture(scope="module", params=["uid", "userns"])
def gateway(request: pytest.FixtureRequest, suid_dir: Path) -> Iterator[Gateway]:
    mode: str = request.param
    owner = 0 if mode == "uid" else UNPRIVILEGED
    home = Path(tempfile.mkdtemp(prefix=f"ignara-gw-{mode}-"))
    (home / ".ignara-pepper").write_text(PEPPER)
    (home / "ignara.db").write_text(f"SQLite format 3\0{DATABASE}")
    for path in (home, home / ".ignara-pepper", home / "ignara.db"):
        os.chown(path, owner, owner)
        path.chmod(0o700 if path.is_dir() else 0o600)
    root = home / ".ignara-jobs"
    config = {"root": str(root), "readonly_paths": [str(suid_dir)], "max_processes": MAX_PROCESSES}
    module = ["-m", "tests.backends.sandbox_agent", json.dumps(config)]
    if mode == "uid":
        argv = [sys.executable, *module]
    else:
        ids = [f"--reuid={owner}", f"--regid={owner}", "--clear-groups"]
        argv = ["setpriv", *ids, PY3, *module]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(WORKTREE), "HOME": str(home), **SECRET_ENV}
    log = Path(tempfile.mkstemp(prefix=f"ignara-agent-{mode}-", suffix=".log")[1])
    agent = Agent(argv, env, home, log)
    try:
        info = agent.call("info")
        if mode == "userns" and info["mode"] == "none":
            pytest.skip(f"unprivileged user namespaces do not work here: {info['describe']}")
        assert info["mode"] == mode, info
        yield Gateway(mode, agent, home, root, info["pid"], info["uid"], info)
    finally:
        agent.close()
        if root.exists():
            _kill_jobs(root)
        shutil.rmtree(home, ignore_errors=True)
        log.unlink()


# -- the probe and the positive control -----------------------------------------------------


def test_the_probe_reports_what_holds(gateway: Gateway) -> None:
    info = gateway.info
    assert {"mount", "pid", "net", "ipc", "uts"} <= set(info["namespaces"])
    assert ("user" in info["namespaces"]) == (gateway.mode == "userns")
    assert info["describe"].startswith(f"{gateway.mode}: ")
    assert "network: loopback only" in info["describe"]
    assert set(info["limits"]) == {"memory", "cpu", "processes"}
    assert str(MAX_PROCESSES) in info["limits"]["processes"]


POSITIVE = """
import json, os
open("mine.txt", "w").write("mine")
open("/tmp/scratch", "w").write("scratch")
print(json.dumps({
    "uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(), "groups": os.getgroups(),
    "cwd": os.getcwd(), "home": os.environ["HOME"], "pid": os.getpid(),
    "fds": sorted(os.listdir("/proc/self/fd")), "tmp": open("/tmp/scratch").read(),
    "root": sorted(os.listdir("/")), "env": sorted(os.environ),
}))
"""


def test_a_job_runs_and_owns_its_home(gateway: Gateway) -> None:
    workload_id = new_id("own")
    seen = last_json(gateway.run(workload_id, py(POSITIVE), env={"SEED": "1"}))
    assert (gateway.root / workload_id / "work" / "mine.txt").read_text() == "mine"
    assert seen["cwd"] == seen["home"] == "/home/job"
    assert seen["tmp"] == "scratch"
    assert seen["pid"] == 2  # its own PID namespace: the reaper is 1
    assert seen["fds"] == ["0", "1", "2", "3"]  # 3: listdir's own; nothing inherited
    assert set(seen["env"]) - {"LC_CTYPE"} == {"PATH", "HOME", "LANG", "SEED", "IGNARA_WORKLOAD_ID"}
    assert set(seen["root"]) <= {
        *("bin", "dev", "etc", "home", "lib", "lib32", "lib64", "libx32"),
        *("proc", "sbin", "srv", "tmp", "usr", "var"),
    }
    if gateway.mode == "uid":
        assert 900_000 <= seen["uid"] <= 965_535
        assert seen["uid"] == seen["euid"] == seen["gid"] and seen["groups"] == []
    else:
        assert seen["uid"] == seen["euid"] == UNPRIVILEGED


# -- files ----------------------------------------------------------------------------------

READ = """
import glob, json, os, sys
results = {}
for path in sys.argv[1:]:
    for found in sorted(glob.glob(path)) or [path]:
        try:
            if os.path.isdir(found):
                results[found] = sorted(os.listdir(found))
            else:
                with open(found, "rb") as source:
                    results[found] = source.read(1 << 20).decode(errors="replace")
        except OSError as exc:
            results[found] = "ERR " + type(exc).__name__
print(json.dumps(results))
"""

WRITE = """
import json, sys
results = {}
for path in sys.argv[1:]:
    try:
        with open(path, "a") as target:
            target.write("pwned")
        results[path] = "written"
    except OSError as exc:
        results[path] = "ERR " + type(exc).__name__
print(json.dumps(results))
"""

VICTIM = """
import sys, time
open("secret.txt", "w").write(sys.argv[1])
print(sys.argv[1], flush=True)
time.sleep(60)
"""


def assert_all_failed(results: dict[str, Any]) -> None:
    failed = {path: value for path, value in results.items() if str(value).startswith("ERR ")}
    assert failed == results, f"reached: {set(results) - set(failed)}"


def test_other_jobs_files_and_logs_are_out_of_reach(gateway: Gateway) -> None:
    victim, secret = new_id("victim"), f"victim-secret-{secrets.token_hex(8)}"
    gateway.submit(victim, py(VICTIM, secret))
    gateway.wait_logs(victim, secret)
    mine = gateway.root / victim
    try:
        reads = [
            str(mine / "work" / "secret.txt"),
            str(mine / "output.log"),
            str(mine / "status.json"),
            str(gateway.root),
            f"../../{victim}/work/secret.txt",  # relative to a job's work dir on the host
            "/proc/[0-9]*/root/home/job/secret.txt",
            "/proc/[0-9]*/cwd/secret.txt",
        ]
        attacker = gateway.run(new_id("reader"), py(READ, *reads))
        assert secret not in attacker["logs"]
        assert_all_failed(last_json(attacker))
        writes = [str(mine / "work" / "pwned"), str(mine / "stop.json"), str(mine / "output.log")]
        assert_all_failed(last_json(gateway.run(new_id("writer"), py(WRITE, *writes))))
        assert not (mine / "work" / "pwned").exists()
        assert not (mine / "stop.json").exists()
        assert "pwned" not in gateway.logs(victim)
    finally:
        assert gateway.agent.call("cancel", id=victim)["state"] == "cancelled"


def test_the_gateways_pepper_database_and_directory_are_out_of_reach(gateway: Gateway) -> None:
    paths = [
        str(gateway.home / ".ignara-pepper"),
        str(gateway.home / "ignara.db"),
        str(gateway.home),
        f"/proc/{gateway.pid}/cwd/.ignara-pepper",
        f"/proc/{gateway.pid}/root{gateway.home}/ignara.db",
        "/proc/[0-9]*/cwd/.ignara-pepper",
        "/root",
    ]
    result = gateway.run(new_id("files"), py(READ, *paths))
    assert not any(secret in result["logs"] for secret in SECRETS)
    assert_all_failed(last_json(result))


def test_the_gateways_environment_is_out_of_reach(gateway: Gateway) -> None:
    paths = [f"/proc/{gateway.pid}/environ", "/proc/1/environ", "/proc/self/environ"]
    result = gateway.run(new_id("environ"), py(READ, *paths))
    assert not any(secret in result["logs"] for secret in SECRETS)
    assert f"/proc/{gateway.pid}/environ" in last_json(result)  # tried, and got nothing


PROCESSES = """
import json, os, signal, sys
target = int(sys.argv[1])
seen = {}
for entry in os.listdir("/proc"):
    if entry.isdigit():
        try:
            seen[entry] = open(f"/proc/{entry}/cmdline", "rb").read().decode(errors="replace")
        except OSError:
            seen[entry] = "?"
attempts = {}
for signum in (0, signal.SIGTERM, signal.SIGKILL):
    try:
        os.kill(target, signum)
        attempts[str(signum)] = "sent"
    except OSError as exc:
        attempts[str(signum)] = "ERR " + type(exc).__name__
print(json.dumps({"processes": seen, "kill": attempts}))
"""


def test_the_gateways_processes_are_invisible_and_cannot_be_signalled(gateway: Gateway) -> None:
    seen = last_json(gateway.run(new_id("signals"), py(PROCESSES, gateway.pid)))
    assert str(gateway.pid) not in seen["processes"]
    assert not any("sandbox_agent" in cmdline for cmdline in seen["processes"].values())
    assert sorted(seen["processes"], key=int)[:2] == ["1", "2"]  # the reaper and the job
    assert_all_failed(seen["kill"])
    assert gateway.alive()


# -- network ----------------------------------------------------------------------------------

CONNECT = """
import json, socket, sys
results = {}
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=3).close()
    results["host"] = "connected"
except OSError as exc:
    results["host"] = "ERR " + type(exc).__name__
with socket.socket() as server:
    server.bind(("127.0.0.1", 0))
    server.listen()
    socket.create_connection(server.getsockname(), timeout=3).close()
    results["own loopback"] = "connected"
print(json.dumps(results))
"""


def test_the_hosts_loopback_services_are_unreachable(gateway: Gateway) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)
        port = listener.getsockname()[1]
        seen = last_json(gateway.run(new_id("network"), py(CONNECT, port)))
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody came
    assert seen == {"host": "ERR ConnectionRefusedError", "own loopback": "connected"}


# -- privileges -------------------------------------------------------------------------------

PRIVILEGES = """
import json, os, subprocess, sys
status = dict(line.split(":\\t", 1) for line in open("/proc/self/status").read().splitlines())
results = {key: status[key].strip() for key in ("NoNewPrivs", "CapEff", "CapPrm", "CapBnd")}
try:
    os.setuid(0)
    results["setuid"] = "became root"
except OSError as exc:
    results["setuid"] = "ERR " + type(exc).__name__
results["suid id"] = subprocess.run([sys.argv[1], "-u"], capture_output=True, text=True).stdout
print(json.dumps(results))
"""


def test_a_job_cannot_gain_privileges(gateway: Gateway, suid_dir: Path) -> None:
    seen = last_json(gateway.run(new_id("privileges"), py(PRIVILEGES, suid_dir / "id")))
    assert seen["NoNewPrivs"] == "1"
    assert int(seen["CapEff"], 16) == int(seen["CapPrm"], 16) == int(seen["CapBnd"], 16) == 0
    # EPERM; EINVAL in a user namespace, where uid 0 does not even exist.
    assert seen["setuid"] in ("ERR PermissionError", "ERR OSError")
    assert seen["suid id"].strip() not in ("", "0")


# -- stopping ---------------------------------------------------------------------------------

DAEMON = """
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv("/bin/sleep", ["/bin/sleep", sys.argv[1]])
    os._exit(0)
os.wait()
print("escaped", flush=True)
if sys.argv[2] != "exit":
    time.sleep(60)
"""


@pytest.mark.parametrize("ending", ["cancel", "exit", "max-runtime"])
def test_a_setsid_double_forked_daemon_dies_with_its_job(gateway: Gateway, ending: str) -> None:
    marker = new_marker()
    workload_id = new_id("daemon")
    try:
        runtime = 2 if ending == "max-runtime" else 60
        gateway.submit(workload_id, py(DAEMON, marker, ending), max_runtime=runtime)
        gateway.wait_logs(workload_id, "escaped")
        if ending == "cancel":
            assert processes_with(marker), "the daemon never started"
            assert gateway.agent.call("cancel", id=workload_id)["state"] == "cancelled"
        final = gateway.wait(workload_id)
        expected = {"cancel": "cancelled", "exit": "succeeded", "max-runtime": "failed"}[ending]
        assert final["state"] == expected, final
        wait_until_gone(marker)
    finally:
        for pid in processes_with(marker):
            os.kill(pid, signal.SIGKILL)


# -- limits -----------------------------------------------------------------------------------

ALLOCATE = """
import sys
chunks = [b"x" * (16 << 20) for _ in range(int(sys.argv[1]) // 16)]
print("allocated", sys.argv[1], "MiB", flush=True)
"""
LIMIT = 128 << 20


def test_a_job_past_its_memory_limit_fails(gateway: Gateway) -> None:
    small = gateway.run(new_id("fits"), py(ALLOCATE, 32), limits={"memory_bytes": LIMIT})
    assert small["state"] == "succeeded", small
    big = gateway.run(new_id("greedy"), py(ALLOCATE, 1024), limits={"memory_bytes": LIMIT})
    assert big["state"] == "failed", big
    assert "allocated" not in big["logs"]
    if gateway.info["limits"]["memory"].startswith("cgroup"):
        assert big["message"].startswith("out of memory: the job exceeded its limit of")
    else:
        assert "MemoryError" in big["logs"]


FORK = """
import errno, os, time
count = 0
try:
    for _ in range(200):
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
        count += 1
    print("forked", count)
except OSError as exc:
    print("refused after", count, errno.errorcode[exc.errno], flush=True)
"""


def test_a_job_forking_past_its_process_cap_gets_eagain(gateway: Gateway) -> None:
    result = gateway.run(new_id("forker"), py(FORK))
    assert result["state"] == "succeeded", result
    words = result["logs"].split()
    assert words[:2] == ["refused", "after"] and words[3] == "EAGAIN", result["logs"]
    assert int(words[2]) < MAX_PROCESSES


SLEEP = "import time; time.sleep(60)"


def test_the_job_cgroup_holds_its_limits(gateway: Gateway) -> None:
    if not gateway.info["limits"]["cpu"].startswith("cgroup"):
        assert gateway.info["limits"]["cpu"].startswith("not enforced")
        return
    workload_id = new_id("limited")
    limits = {"memory_bytes": LIMIT, "cpu_millis": 500}
    gateway.submit(workload_id, py(SLEEP), limits=limits)
    try:
        cgroups = {k: Path(v) for k, v in gateway.agent.call("cgroups", id=workload_id).items()}
        deadline = time.monotonic() + 10
        while not (cgroups["pids"] / "cgroup.procs").read_text().strip():
            assert time.monotonic() < deadline, "the job never joined its cgroup"
            time.sleep(0.05)
        if cgroups["cpu"] == cgroups["memory"]:  # v2: one directory
            assert (cgroups["cpu"] / "cpu.max").read_text().split() == ["50000", "100000"]
            assert (cgroups["memory"] / "memory.max").read_text().strip() == str(LIMIT)
        else:
            assert (cgroups["cpu"] / "cpu.cfs_quota_us").read_text().strip() == "50000"
            memory = cgroups["memory"] / "memory.limit_in_bytes"
            assert memory.read_text().strip() == str(LIMIT)
        assert (cgroups["pids"] / "pids.max").read_text().strip() == str(MAX_PROCESSES)
    finally:
        gateway.agent.call("cancel", id=workload_id)
    deadline = time.monotonic() + 10
    while any(path.exists() for path in cgroups.values()):
        assert time.monotonic() < deadline, "the job's cgroups were not removed"
        time.sleep(0.05)
