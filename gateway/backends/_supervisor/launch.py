"""Fork and exec the job's own process, and tell how it ended.

Used by the supervisor directly (isolation ``none``) and by the sandbox's reaper. The child
resets what Python changed (ignored SIGPIPE/SIGXFSZ, the blocked SIGTERM), applies the
plan's rlimits, closes every inherited descriptor but 0-2, and execs with the job's
environment. What fails before or at exec comes back over a close-on-exec pipe: nothing on
it means the exec succeeded.
"""

from __future__ import annotations

import errno
import json
import os
import resource
import signal
from dataclasses import dataclass

from .plan import Plan

__all__ = ["Started", "outcome", "start"]

NOT_FOUND = 127
NOT_EXECUTABLE = 126
_FD_LIMIT = 1 << 20
_RESET_SIGNALS = (signal.SIGTERM, signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT)


@dataclass(frozen=True)
class Started:
    pid: int
    error_fd: int  # read end of the exec-error pipe


def start(plan: Plan, cwd: str, *, new_session: bool, join_cgroups: bool) -> Started:
    """Fork the job: it execs ``plan.command`` in ``cwd``. Call with SIGTERM blocked."""
    read_end, write_end = os.pipe()  # both close-on-exec
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_end)
            _become_job(plan, cwd, write_end, new_session=new_session, join=join_cgroups)
        except (OSError, ValueError) as exc:
            _report(write_end, exc)
        finally:
            # Whatever happened, the child never returns into its parent's code.
            os._exit(NOT_FOUND)
    os.close(write_end)
    return Started(pid, read_end)


def _become_job(plan: Plan, cwd: str, error_fd: int, *, new_session: bool, join: bool) -> None:
    for signum in _RESET_SIGNALS:
        signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    if new_session:
        os.setsid()
    if join:
        for procs in plan.cgroup_procs:
            with open(procs, "w", encoding="ascii") as out:
                out.write("0")
    if plan.rlimit_as is not None:
        resource.setrlimit(resource.RLIMIT_AS, (plan.rlimit_as, plan.rlimit_as))
    if plan.rlimit_nproc is not None:
        resource.setrlimit(resource.RLIMIT_NPROC, (plan.rlimit_nproc, plan.rlimit_nproc))
    os.chdir(cwd)
    os.closerange(3, error_fd)
    os.closerange(error_fd + 1, _FD_LIMIT)
    try:
        os.execvpe(plan.command[0], list(plan.command), plan.env)
    except OSError as exc:
        _report(error_fd, exc, stage="exec")


def _report(error_fd: int, exc: Exception, stage: str = "setup") -> None:
    code = exc.errno if isinstance(exc, OSError) else None
    message = (exc.strerror if isinstance(exc, OSError) else None) or str(exc) or repr(exc)
    os.write(error_fd, json.dumps({"stage": stage, "errno": code, "message": message}).encode())


def outcome(program: str, wait_status: int, error_fd: int) -> tuple[int | None, str | None]:
    """``(exit code, error)`` of a job that has ended; ``-N`` when signal ``N`` ended it."""
    chunks = []
    while chunk := os.read(error_fd, 65536):
        chunks.append(chunk)
    os.close(error_fd)
    if not chunks:
        return os.waitstatus_to_exitcode(wait_status), None
    failure = json.loads(b"".join(chunks))
    code, message = failure.get("errno"), failure.get("message", "")
    if failure.get("stage") != "exec":
        return NOT_EXECUTABLE, f"could not start the job: {message}"
    if code in (errno.ENOENT, errno.ENOTDIR):
        return NOT_FOUND, f"command not found: {program!r}"
    if code in (errno.EACCES, errno.EPERM, errno.ENOEXEC, errno.EISDIR):
        return NOT_EXECUTABLE, f"command not executable: {program!r}"
    return NOT_EXECUTABLE, f"could not run {program!r}: {message}"
