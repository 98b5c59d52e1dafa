"""The sandbox: namespaces, a minimal root, the privilege drop, and the reaper that is PID 1.

Three processes under the supervisor (S)::

    S  outside everything; writes exit.json
    '- C  joins the job's cgroups, unshares the namespaces (a user namespace too in
       |  ``userns`` mode, mapping only the gateway's own uid and gid), waits for I
       '- I  PID 1 of the new PID namespace: builds the root, brings up loopback, drops
          |  privileges, starts the job, reaps orphans, and reports the job's status to S
          '- J  the job: its own session, cwd and HOME /home/job, the job's environment

S, C and I stay in the process group the gateway signals; J and everything it starts are only
reachable through I. A SIGTERM to the group makes I send SIGTERM to every process of its
namespace (so one that called setsid() or double-forked gets it too). When J exits, I
reports and exits, and the kernel kills whatever is left in the namespace; a SIGKILL to the
group kills S, C and I, with the same effect. C and I die with their parent
(PR_SET_PDEATHSIG), so nothing of the job outlives its supervisor.

The root I builds on a tmpfs (then made read-only) and pivots into, so the host's root is
detached, not merely hidden::

    /usr /bin /sbin /lib* (where present)   the host's, read-only, nosuid, nodev
    /etc                                     a few host entries read-only; passwd, group,
                                             hosts, hostname written for the job
    /dev                                     null zero full random urandom tty, shm (tmpfs)
    /proc                                    a new procfs: only this PID namespace
    /home/job                                the job's work directory (read-write)
    /tmp (and /var/tmp)                      the job's own tmp directory (read-write)
    the operator's read-only paths           at the same paths, read-only

Nothing else: not the job root (other jobs, their logs), not the gateway's working
directory (database, key pepper), not /root, /home, /run, /sys or /var.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import json
import os
import re
import select
import signal
import socket
import struct
from collections.abc import Iterator
from types import FrameType

from . import launch, linux
from .plan import HOME, HOSTNAME, Plan

__all__ = ["StopFlag", "run"]

_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# /etc entries a program commonly needs; globbed, bound read-only where they exist.
_ETC = (
    "alternatives",
    "ca-certificates",
    "ca-certificates.conf",
    "crypto-policies",
    "debian_version",
    "fonts",
    "gai.conf",
    "host.conf",
    "inputrc",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "locale.alias",
    "localtime",
    "magic",
    "mime.types",
    "nsswitch.conf",
    "os-release",
    "pki",
    "protocols",
    "python3*",
    "resolv.conf",
    "services",
    "ssl",
    "timezone",
)
_DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_IFREQ = "16sH22x"
_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")
_SETUP_FAILED = "sandbox setup failed"


class StopFlag:
    """Remembers a SIGTERM; in the reaper, also passes it on to the whole namespace."""

    def __init__(self) -> None:
        self.requested = False
        self.forward = False

    def handle(self, signum: int, frame: FrameType | None) -> None:
        # A Python handler, not SIG_IGN: ignored signals stay ignored across exec.
        self.requested = True
        if self.forward:
            _signal_namespace(signal.SIGTERM)


def _signal_namespace(signum: int) -> None:
    # From PID 1, kill(-1) reaches every process of its namespace but itself, and nothing
    # outside it.
    with contextlib.suppress(ProcessLookupError):
        os.kill(-1, signum)


def run(plan: Plan, stop: StopFlag) -> tuple[int | None, str | None]:
    """Run the job in the sandbox; ``(exit code, error)`` as the reaper reported them."""
    report_r, report_w = os.pipe()
    supervisor = os.getpid()
    child = os.fork()
    if child == 0:
        try:
            os.close(report_r)
            _middle(plan, stop, report_w, supervisor)
        finally:
            os._exit(1)
    os.close(report_w)
    _wait(child)
    with os.fdopen(report_r, "rb") as report:
        data = report.read()
    try:
        outcome = json.loads(data)
        exit_code, error = outcome.get("exit_code"), outcome.get("error")
    except (ValueError, AttributeError):
        return None, "the sandbox ended without reporting the job's exit status"
    if isinstance(exit_code, int) and isinstance(error, str | None):
        return exit_code, error
    return None, error if isinstance(error, str) else "the sandbox reported nonsense"


def _wait(pid: int) -> int:
    """Wait for ``pid``; signals received meanwhile run their handlers (PEP 475)."""
    return os.waitpid(pid, 0)[1]


def _send(report_fd: int, exit_code: int | None, error: str | None) -> None:
    os.write(report_fd, json.dumps({"exit_code": exit_code, "error": error}).encode())


def _middle(plan: Plan, stop: StopFlag, report_fd: int, supervisor: int) -> None:
    """C: join the cgroups, unshare, start the reaper and wait for it."""
    if plan.keep_fd is not None:
        os.close(plan.keep_fd)
    try:
        linux.set_parent_death_signal(signal.SIGKILL)
        if os.getppid() != supervisor:
            return
        for procs in plan.cgroup_procs:
            with open(procs, "w", encoding="ascii") as out:
                out.write("0")
        _unshare(plan)
    except OSError as exc:
        _send(report_fd, None, f"{_SETUP_FAILED}: {exc}")
        return
    lifeline_r, lifeline_w = os.pipe()
    reaper = os.fork()
    if reaper == 0:
        try:
            os.close(lifeline_w)
            _reaper(plan, stop, report_fd, lifeline_r)
        finally:
            os._exit(1)
    os.close(lifeline_r)
    _wait(reaper)
    os._exit(0)


def _unshare(plan: Plan) -> None:
    flags = (
        linux.CLONE_NEWNS
        | linux.CLONE_NEWPID
        | linux.CLONE_NEWIPC
        | linux.CLONE_NEWUTS
        | linux.CLONE_NEWCGROUP
    )
    if plan.network != "host":
        flags |= linux.CLONE_NEWNET
    if plan.isolation != "userns":
        linux.unshare(flags)
        return
    uid, gid = os.getuid(), os.getgid()
    linux.unshare(flags | linux.CLONE_NEWUSER)
    # An unprivileged process may map exactly its own ids, once setgroups() is denied.
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as out:
        out.write(text)


def _reaper(plan: Plan, stop: StopFlag, report_fd: int, lifeline: int) -> None:
    """I, PID 1: build the sandbox, run the job in it, report how it ended."""
    linux.set_parent_death_signal(signal.SIGKILL)
    # C died before the line above took effect: the lifeline's write end is closed.
    if select.select([lifeline], [], [], 0)[0]:
        return
    os.close(lifeline)
    try:
        _build_root(plan)
        if plan.network != "host":
            _loopback_up()
        socket.sethostname(HOSTNAME)
        _drop_privileges(plan)
    except (OSError, ValueError) as exc:
        _send(report_fd, None, f"{_SETUP_FAILED}: {exc}")
        return
    if stop.requested:
        _send(report_fd, None, "cancelled before the command started")
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        job = launch.start(plan, HOME, new_session=True, join_cgroups=False)
    except OSError as exc:
        _send(report_fd, None, f"could not start the job: {exc.strerror or exc}")
        return
    stop.forward = True
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    if stop.requested:
        _signal_namespace(signal.SIGTERM)
    status = _reap_until(job.pid)
    exit_code, error = launch.outcome(plan.command[0], status, job.error_fd)
    _send(report_fd, exit_code, error)
    os._exit(0)


def _reap_until(job: int) -> int:
    """Reap every orphan the namespace hands to PID 1 until the job itself ends."""
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == job:
            return status


def _drop_privileges(plan: Plan) -> None:
    linux.drop_bounding_set()
    if plan.isolation == "uid":
        if plan.uid is None or plan.gid is None:
            raise ValueError("the plan names no uid and gid for the job")
        os.setgroups([])
        os.setresgid(plan.gid, plan.gid, plan.gid)
        # Leaving uid 0 for a non-zero uid clears every capability.
        os.setresuid(plan.uid, plan.uid, plan.uid)
    else:
        # The gateway's own uid inside the namespace; the caps the namespace gave go.
        linux.clear_capabilities()
    linux.set_no_new_privs()
    linux.set_dumpable(False)


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack(_IFREQ, b"lo", 0)
        flags = struct.unpack(_IFREQ, fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack(_IFREQ, b"lo", flags | _IFF_UP))


# -- the root -------------------------------------------------------------------------------


def _build_root(plan: Plan) -> None:
    root = plan.rootfs
    # Nothing mounted from here on may propagate back to the host.
    linux.mount(None, "/", None, linux.MS_REC | linux.MS_PRIVATE)
    linux.mount("tmpfs", root, "tmpfs", linux.MS_NOSUID | linux.MS_NODEV, "mode=0755,size=4m")
    for path in _SYSTEM_DIRS:
        if os.path.islink(path):
            os.symlink(os.readlink(path), root + path)
        elif os.path.isdir(path):
            _bind(path, root + path)
    _populate_etc(plan, root)
    _populate_dev(plan, root)
    os.mkdir(root + "/proc")
    proc_flags = linux.MS_NOSUID | linux.MS_NODEV | linux.MS_NOEXEC
    linux.mount("proc", root + "/proc", "proc", proc_flags)
    os.makedirs(root + HOME)
    _bind(plan.work, root + HOME, writable=True)
    os.mkdir(root + "/tmp")
    _bind(plan.tmp, root + "/tmp", writable=True)
    os.mkdir(root + "/var")
    os.symlink("/tmp", root + "/var/tmp")
    for path in plan.readonly_paths:
        _bind(path, root + path)
    linux.mount(
        None,
        root,
        None,
        linux.MS_REMOUNT | linux.MS_BIND | linux.MS_RDONLY | linux.MS_NOSUID | linux.MS_NODEV,
    )
    os.chdir(root)
    linux.pivot_root(".", ".")
    # The old root now sits on top of the new one: detach it, and the host is gone.
    linux.umount(".", linux.MNT_DETACH)
    os.chdir("/")


def _populate_etc(plan: Plan, root: str) -> None:
    etc = root + "/etc"
    os.mkdir(etc)
    system = tuple(os.path.realpath(path) for path in _SYSTEM_DIRS if os.path.isdir(path))
    for pattern in _ETC:
        for source in glob.glob(os.path.join("/etc", pattern)):
            target = etc + "/" + os.path.basename(source)
            resolved = os.path.realpath(source)
            if os.path.islink(source) and _under(resolved, system):
                os.symlink(os.readlink(source), target)
            elif os.path.exists(resolved):
                _bind(resolved, target)
    uid, gid = plan.uid, plan.gid
    _write(
        etc + "/passwd",
        "root:x:0:0:root:/root:/usr/sbin/nologin\n"
        f"job:x:{uid}:{gid}:ignara job:{HOME}:/bin/sh\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    )
    _write(etc + "/group", f"root:x:0:\njob:x:{gid}:\nnogroup:x:65534:\n")
    _write(etc + "/hostname", HOSTNAME + "\n")
    _write(etc + "/hosts", f"127.0.0.1 localhost {HOSTNAME}\n::1 localhost\n")


def _populate_dev(plan: Plan, root: str) -> None:
    dev = root + "/dev"
    os.mkdir(dev)
    linux.mount("tmpfs", dev, "tmpfs", linux.MS_NOSUID | linux.MS_NOEXEC, "mode=0755,size=64k")
    for name in _DEVICES:
        if os.path.exists("/dev/" + name):
            _bind("/dev/" + name, f"{dev}/{name}", writable=True, devices=True)
    for name, target in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ):
        os.symlink(target, f"{dev}/{name}")
    os.mkdir(dev + "/shm")
    # Pages in tmpfs are charged to the job's memory cgroup; the size caps them without one.
    size = f",size={plan.memory_bytes}" if plan.memory_bytes else ""
    linux.mount(
        "tmpfs", dev + "/shm", "tmpfs", linux.MS_NOSUID | linux.MS_NODEV, "mode=1777" + size
    )
    linux.mount(
        None, dev, None, linux.MS_REMOUNT | linux.MS_RDONLY | linux.MS_NOSUID | linux.MS_NOEXEC
    )


def _bind(source: str, target: str, *, writable: bool = False, devices: bool = False) -> None:
    """Bind ``source`` (and what is mounted under it) at ``target``, then restrict each mount."""
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "a", encoding="utf-8"):
            pass
    linux.mount(source, target, None, linux.MS_BIND | linux.MS_REC)
    flags = linux.MS_REMOUNT | linux.MS_BIND | linux.MS_NOSUID
    flags |= linux.MS_NOEXEC if devices else linux.MS_NODEV
    if not writable:
        flags |= linux.MS_RDONLY
    # Read-only must hold for mounts under the target too (e.g. a separate /usr/local).
    for mount_point in _mounts_at_or_under(target):
        linux.mount(None, mount_point, None, flags | linux.locked_mount_flags(mount_point))


def _mounts_at_or_under(target: str) -> Iterator[str]:
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as info:
        lines = info.read().splitlines()
    for line in lines:
        fields = line.split(" ")
        mount_point = _OCTAL_ESCAPE.sub(lambda m: chr(int(m[1], 8)), fields[4])
        if mount_point == target or mount_point.startswith(target + "/"):
            yield mount_point


def _under(path: str, prefixes: tuple[str, ...]) -> bool:
    return any(path == prefix or path.startswith(prefix + "/") for prefix in prefixes)
