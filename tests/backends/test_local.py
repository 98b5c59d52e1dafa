"""The local backend against real subprocesses: run, fail, cancel, time out, restart.

Every wait is bounded; jobs are small Python or sh one-liners. The backend isolates its jobs
(here, as root: a uid of their own in their own namespaces), so a job sees only the system's
paths and its own work directory (``/home/job``, ``ROOT/<id>/work`` on the host): jobs run
the system's python3 and leave files in their work directory for the test to read, and the
test finds their processes by a marker on their command lines, since pids inside the sandbox
are not the host's. See test_sandbox.py for the escapes.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from gateway.backends import (
    LOST_MESSAGE,
    Backend,
    BackendClosedError,
    BackendStateError,
    InvalidWorkloadIdError,
    JobSpec,
    JobState,
    JobStatus,
    LocalBackend,
)
from gateway.backends._process import signal_group, start_ticks
from tests.backends.test_base import BAD_IDS

PY = "/usr/bin/python3"  # the gateway's venv is not inside the sandbox
HOME = "/home/job"
GRACE = 0.5
POLL = 0.05


def py(code: str, *args: object) -> tuple[str, ...]:
    return (PY, "-c", code, *map(str, args))


def spec(
    workload_id: str,
    command: tuple[str, ...],
    *,
    env: dict[str, str] | None = None,
    max_runtime: int = 30,
) -> JobSpec:
    return JobSpec(workload_id, command, env or {}, max_runtime)


def make_backend(root: Path) -> LocalBackend:
    return LocalBackend(root, grace_seconds=GRACE, poll_seconds=POLL)


def kill_leftovers(root: Path) -> None:
    """Kill any job a failed test left running (verified by pid and start time)."""
    for status_file in root.glob("*/status.json"):
        try:
            data = json.loads(status_file.read_text())
        except ValueError:
            continue  # a test's deliberately broken record
        if isinstance(data, dict) and data.get("pid") and data.get("pid_start_ticks"):
            signal_group(data["pid"], data["pid_start_ticks"], signal.SIGKILL)


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    jobs = tmp_path / "jobs"
    yield jobs
    kill_leftovers(jobs)


@pytest.fixture
async def backend(root: Path) -> AsyncIterator[LocalBackend]:
    local = make_backend(root)
    yield local
    await local.close()


async def wait_final(backend: LocalBackend, workload_id: str, timeout: float = 5.0) -> JobStatus:
    async with asyncio.timeout(timeout):
        while True:
            status = await backend.status(workload_id)
            if status.state.is_final:
                return status
            await asyncio.sleep(POLL)


async def wait_file(path: Path, timeout: float = 5.0) -> str:
    async with asyncio.timeout(timeout):
        while not path.exists() or not path.read_text():
            await asyncio.sleep(0.02)
    return path.read_text()


def new_marker() -> str:
    """A number no other process has on its command line (sleep and Python accept it)."""
    return f"{300 + secrets.randbelow(600)}.{secrets.randbelow(10**6):06d}"


def processes_with(marker: str) -> list[int]:
    """Host pids of live processes (zombies aside) with ``marker`` on their command line."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state not in (b"Z", b"X"):
            found.append(int(entry.name))
    return found


def gone(marker: str) -> bool:
    return not processes_with(marker)


async def wait_gone(marker: str, timeout: float = 2.0) -> None:
    async with asyncio.timeout(timeout):
        while not gone(marker):
            await asyncio.sleep(0.02)


def work(root: Path, workload_id: str) -> Path:
    return root / workload_id / "work"


def write_status(root: Path, workload_id: str, **fields: object) -> None:
    job_dir = root / workload_id
    job_dir.mkdir(parents=True)
    record = {
        "version": 1,
        "workload_id": workload_id,
        "state": "running",
        "exit_code": None,
        "submitted_at": "2025-01-01T00:00:00+00:00",
        "started_at": "2025-01-01T00:00:01+00:00",
        "finished_at": None,
        "message": "running",
        "max_runtime_seconds": 3600,
        "pid": None,
        "pid_start_ticks": None,
    }
    record.update(fields)
    (job_dir / "status.json").write_text(json.dumps(record))


APPEND_LINE = "import sys; open(sys.argv[1], 'a').write('ran\\n')"
# Says it runs (a file in its work directory), then sleeps; argv[1] is its marker.
SLEEP_WHEN_READY = "import time; open('ready', 'w').write('1'); time.sleep(30)"


def sleeper(marker: str, code: str = SLEEP_WHEN_READY) -> tuple[str, ...]:
    return py(code, marker)


# -- running ------------------------------------------------------------------------------


def test_local_backend_is_a_backend(tmp_path: Path) -> None:
    assert isinstance(LocalBackend(tmp_path), Backend)


async def test_success_exit_zero_and_logs_captured(backend: LocalBackend) -> None:
    code = "import sys; print('to stdout'); print('to stderr', file=sys.stderr)"
    await backend.submit(spec("ok", py(code)))
    status = await wait_final(backend, "ok")
    assert status.state is JobState.SUCCEEDED
    assert status.exit_code == 0
    assert status.message == "exited with code 0"
    assert status.started_at is not None and status.finished_at is not None
    assert status.started_at <= status.finished_at
    logs = await backend.logs("ok")
    assert b"to stdout\n" in logs and b"to stderr\n" in logs


async def test_failure_reports_the_exit_code(backend: LocalBackend) -> None:
    await backend.submit(spec("bad", py("import sys; print('oops'); sys.exit(3)")))
    status = await wait_final(backend, "bad")
    assert (status.state, status.exit_code, status.message) == (
        JobState.FAILED,
        3,
        "exited with code 3",
    )
    assert b"oops" in await backend.logs("bad")


async def test_submit_is_idempotent(backend: LocalBackend) -> None:
    marker = work(backend.root, "once") / "runs.txt"
    job = spec("once", py(APPEND_LINE, "runs.txt"))
    await asyncio.gather(*(backend.submit(job) for _ in range(5)))
    await backend.submit(job)
    await wait_final(backend, "once")
    await backend.submit(job)  # after it finished: still nothing
    await asyncio.sleep(0.2)
    assert marker.read_text() == "ran\n"
    assert (await backend.status("once")).state is JobState.SUCCEEDED


async def test_submit_is_idempotent_across_backends_on_one_root(root: Path) -> None:
    marker = work(root, "shared") / "runs.txt"
    job = spec("shared", py(APPEND_LINE, "runs.txt"))
    first, second = make_backend(root), make_backend(root)
    try:
        await asyncio.gather(first.submit(job), second.submit(job))
        assert (await wait_final(first, "shared")).state is JobState.SUCCEEDED
    finally:
        await first.close()
        await second.close()
    assert marker.read_text() == "ran\n"


async def test_environment_is_minimal_plus_job_env(
    backend: LocalBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IGNARA_TEST_GATEWAY_SECRET", "must-not-leak")
    code = "import json, os; print(json.dumps({'env': dict(os.environ), 'cwd': os.getcwd()}))"
    env = {"FOO": "bar baz", "IGNARA_WORKLOAD_ID": "spoofed"}
    await backend.submit(spec("env-job", py(code), env=env))
    assert (await wait_final(backend, "env-job")).state is JobState.SUCCEEDED
    seen = json.loads(await backend.logs("env-job"))
    assert seen["cwd"] == HOME
    assert seen["env"]["FOO"] == "bar baz"
    assert seen["env"]["IGNARA_WORKLOAD_ID"] == "env-job"  # always the backend's, never spoofed
    assert seen["env"]["HOME"] == HOME
    assert "IGNARA_TEST_GATEWAY_SECRET" not in seen["env"]
    # The job's env is exactly the base, its own variables and the id (LC_CTYPE: Python's
    # own locale coercion in the child, not something the backend passed).
    assert set(seen["env"]) - {"LC_CTYPE"} == {"PATH", "HOME", "LANG", "FOO", "IGNARA_WORKLOAD_ID"}


async def test_command_not_found_fails_with_a_clear_message(backend: LocalBackend) -> None:
    await backend.submit(spec("missing", ("no-such-command-ignara",)))
    status = await wait_final(backend, "missing")
    assert status.state is JobState.FAILED
    assert status.exit_code == 127
    assert status.message == "command not found: 'no-such-command-ignara'"
    assert b"command not found" in await backend.logs("missing")


async def test_command_not_executable_fails_with_a_clear_message(backend: LocalBackend) -> None:
    await backend.submit(spec("noexec", ("/etc/passwd",)))  # there, readable, not executable
    status = await wait_final(backend, "noexec")
    assert status.state is JobState.FAILED
    assert status.exit_code == 126
    assert status.message.startswith("command not executable")


async def test_leftover_background_processes_are_killed_when_the_job_ends(
    backend: LocalBackend,
) -> None:
    marker = new_marker()
    await backend.submit(spec("bg", ("/bin/sh", "-c", f"sleep {marker} & echo started")))
    assert (await wait_final(backend, "bg")).state is JobState.SUCCEEDED
    assert b"started" in await backend.logs("bg")
    await wait_gone(marker)


async def test_logs_are_bounded(backend: LocalBackend) -> None:
    await backend.submit(spec("chatty", py("print('x' * 100000 + 'END')")))
    await wait_final(backend, "chatty")
    assert len(await backend.logs("chatty")) == 65536
    assert await backend.logs("chatty", tail_bytes=4) == b"END\n"
    assert await backend.logs("chatty", tail_bytes=0) == b""
    assert await backend.logs("chatty", tail_bytes=-1) == b""


# -- stopping -----------------------------------------------------------------------------


async def test_cancel_stops_a_running_job_fast(backend: LocalBackend) -> None:
    marker = new_marker()
    await backend.submit(spec("long", sleeper(marker)))
    await wait_file(work(backend.root, "long") / "ready")
    assert not gone(marker)
    assert (await backend.status("long")).state is JobState.RUNNING
    started = time.monotonic()
    await backend.cancel("long")
    assert time.monotonic() - started < 2
    status = await backend.status("long")
    assert (status.state, status.message) == (JobState.CANCELLED, "cancelled")
    assert status.exit_code == -signal.SIGTERM
    await wait_gone(marker)
    await backend.cancel("long")  # idempotent
    assert (await backend.status("long")).state is JobState.CANCELLED


async def test_cancel_escalates_to_sigkill_after_the_grace_period(backend: LocalBackend) -> None:
    marker = new_marker()
    code = "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN); " + SLEEP_WHEN_READY
    await backend.submit(spec("stubborn", sleeper(marker, code)))
    await wait_file(work(backend.root, "stubborn") / "ready")
    started = time.monotonic()
    await backend.cancel("stubborn")
    elapsed = time.monotonic() - started
    assert GRACE <= elapsed < GRACE + 2
    assert (await backend.status("stubborn")).state is JobState.CANCELLED
    await wait_gone(marker)


async def test_cancel_of_unknown_or_finished_job_does_nothing(backend: LocalBackend) -> None:
    await backend.cancel("never-submitted")
    assert (await backend.status("never-submitted")).state is JobState.UNKNOWN
    await backend.submit(spec("done", ("true",)))
    assert (await wait_final(backend, "done")).state is JobState.SUCCEEDED
    await backend.cancel("done")
    assert (await backend.status("done")).state is JobState.SUCCEEDED


async def test_max_runtime_is_enforced(backend: LocalBackend) -> None:
    marker = new_marker()
    started = time.monotonic()
    await backend.submit(spec("slow", sleeper(marker), max_runtime=1))
    await wait_file(work(backend.root, "slow") / "ready")
    status = await wait_final(backend, "slow", timeout=5)
    assert time.monotonic() - started < 4
    assert status.state is JobState.FAILED
    assert status.message == "exceeded max runtime of 1 s"
    await wait_gone(marker)


# -- ids ----------------------------------------------------------------------------------


async def test_unknown_id_is_unknown(backend: LocalBackend) -> None:
    status = await backend.status("nope")
    assert status.state is JobState.UNKNOWN
    assert status.exit_code is None and status.started_at is None
    assert await backend.logs("nope") == b""


@pytest.mark.parametrize("workload_id", BAD_IDS)
async def test_bad_ids_are_refused_everywhere(
    backend: LocalBackend, tmp_path: Path, workload_id: str
) -> None:
    for call in (backend.status, backend.cancel, backend.logs):
        with pytest.raises(InvalidWorkloadIdError):
            await call(workload_id)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


# -- restarts -----------------------------------------------------------------------------


async def test_final_status_survives_a_restart(root: Path) -> None:
    first = make_backend(root)
    await first.submit(spec("kept", py("import sys; sys.exit(4)")))
    before = await wait_final(first, "kept")
    await first.close()
    second = make_backend(root)
    try:
        assert await second.status("kept") == before
        assert before.exit_code == 4
    finally:
        await second.close()


async def test_a_restart_resumes_following_a_live_job(root: Path) -> None:
    go = work(root, "survivor") / "go"  # the job waits for it in its own work directory
    code = (
        "import os, sys, time\n"
        "while not os.path.exists('go'): time.sleep(0.02)\n"
        "print('finished after the restart'); sys.exit(5)"
    )
    first = make_backend(root)
    await first.submit(spec("survivor", py(code)))
    await first.close()  # the job keeps running
    with pytest.raises(BackendClosedError):
        await first.status("survivor")

    second = make_backend(root)
    try:
        assert await second.resume() == ["survivor"]
        assert (await second.status("survivor")).state is JobState.RUNNING
        go.touch()
        status = await wait_final(second, "survivor")
        assert (status.state, status.exit_code) == (JobState.FAILED, 5)
        assert b"finished after the restart" in await second.logs("survivor")
    finally:
        await second.close()


async def test_a_job_that_ended_while_no_gateway_watched_reports_its_exit(root: Path) -> None:
    first = make_backend(root)
    await first.submit(spec("quick", ("true",)))
    await first.close()
    await wait_file(root / "quick" / "exit.json")
    second = make_backend(root)
    try:
        # Its supervisor may still be exiting: the second one follows it to its end.
        status = await wait_final(second, "quick")
        assert (status.state, status.exit_code) == (JobState.SUCCEEDED, 0)
    finally:
        await second.close()


async def test_a_resumed_job_can_be_cancelled(root: Path) -> None:
    marker = new_marker()
    first = make_backend(root)
    await first.submit(spec("adopted", sleeper(marker)))
    await wait_file(work(root, "adopted") / "ready")
    await first.close()
    second = make_backend(root)
    try:
        await second.cancel("adopted")
        assert (await second.status("adopted")).state is JobState.CANCELLED
        await wait_gone(marker)
    finally:
        await second.close()


async def test_cancel_from_another_backend_sharing_the_root(root: Path) -> None:
    marker = new_marker()
    owner, other = make_backend(root), make_backend(root)
    try:
        await owner.submit(spec("shared-cancel", sleeper(marker)))
        await wait_file(work(root, "shared-cancel") / "ready")
        assert (await other.status("shared-cancel")).state is JobState.RUNNING
        await other.cancel("shared-cancel")
        assert (await other.status("shared-cancel")).state is JobState.CANCELLED
        assert (await owner.status("shared-cancel")).state is JobState.CANCELLED
        await wait_gone(marker)
    finally:
        await owner.close()
        await other.close()


def _dead_pid() -> int:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("dead-pid", LOST_MESSAGE),
        ("reused-pid", LOST_MESSAGE),
        ("never-started", "lost: the gateway restarted before the job started"),
    ],
)
async def test_a_running_job_lost_in_a_restart_is_failed(
    root: Path, case: str, message: str
) -> None:
    if case == "dead-pid":
        write_status(root, case, pid=_dead_pid(), pid_start_ticks=12345)
    elif case == "reused-pid":
        # A live pid whose start time is not the recorded one belongs to another process.
        own_ticks = start_ticks(os.getpid())
        assert own_ticks is not None
        write_status(root, case, pid=os.getpid(), pid_start_ticks=own_ticks + 1)
    else:
        write_status(root, case, state="pending", started_at=None)
    backend = make_backend(root)
    try:
        status = await backend.status(case)
        assert (status.state, status.message) == (JobState.FAILED, message)
        assert status.finished_at is not None
    finally:
        await backend.close()
    # Settled on disk: another restart reads the same.
    again = make_backend(root)
    try:
        assert await again.status(case) == status
    finally:
        await again.close()


async def test_a_corrupt_status_record_is_an_error(backend: LocalBackend, root: Path) -> None:
    (root / "broken").mkdir(parents=True)
    (root / "broken" / "status.json").write_text("{not json")
    with pytest.raises(BackendStateError):
        await backend.status("broken")
    assert await backend.resume() == []  # skipped, not fatal


async def test_closed_backend_refuses_calls(backend: LocalBackend) -> None:
    await backend.close()
    await backend.close()  # idempotent
    with pytest.raises(BackendClosedError):
        await backend.submit(spec("late", ("true",)))


async def test_max_runtime_is_enforced_after_a_restart(root: Path) -> None:
    marker = new_marker()
    first = make_backend(root)
    await first.submit(spec("overdue", sleeper(marker), max_runtime=1))
    await wait_file(work(root, "overdue") / "ready")
    await first.close()
    await asyncio.sleep(1.1)  # past its deadline while no gateway watched
    second = make_backend(root)
    try:
        assert await second.resume() == ["overdue"]
        status = await wait_final(second, "overdue", timeout=3)
        assert (status.state, status.message) == (JobState.FAILED, "exceeded max runtime of 1 s")
        await wait_gone(marker)
    finally:
        await second.close()
