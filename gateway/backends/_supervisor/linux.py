"""The Linux system calls the sandbox needs and Python 3.11's ``os`` lacks, through ctypes.

Why ctypes and not util-linux's ``unshare``/``setpriv``: the supervisor must set up the
namespaces, the mounts, the reaper and the privilege drop in one process tree it controls and
can report errors from, on hosts where util-linux is old, partial or absent; the calls below
are stable kernel ABI. Every wrapper raises ``OSError`` with the real errno.
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform

__all__ = [
    "CLONE_NEWCGROUP",
    "CLONE_NEWIPC",
    "CLONE_NEWNET",
    "CLONE_NEWNS",
    "CLONE_NEWPID",
    "CLONE_NEWUSER",
    "CLONE_NEWUTS",
    "MNT_DETACH",
    "MS_BIND",
    "MS_NODEV",
    "MS_NOEXEC",
    "MS_NOSUID",
    "MS_PRIVATE",
    "MS_RDONLY",
    "MS_REC",
    "MS_REMOUNT",
    "clear_capabilities",
    "drop_bounding_set",
    "locked_mount_flags",
    "mount",
    "pivot_root",
    "set_dumpable",
    "set_no_new_privs",
    "set_parent_death_signal",
    "umount",
    "unshare",
]

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_NOATIME = 1024
MS_NODIRATIME = 2048
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_RELATIME = 1 << 21
MS_STRICTATIME = 1 << 24
MNT_DETACH = 2

_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_LAST_CAP_FILE = "/proc/sys/kernel/cap_last_cap"

# glibc has no pivot_root() wrapper; the number differs per architecture.
_SYS_PIVOT_ROOT = {
    "x86_64": 155,
    "aarch64": 41,
    "riscv64": 41,
    "loongarch64": 41,
    "ppc64": 203,
    "ppc64le": 203,
    "s390x": 217,
    "i386": 217,
    "i686": 217,
    "armv7l": 218,
    "armv6l": 218,
}

# statvfs() flag -> mount flag. A bind mount made inside a user namespace may not clear
# these flags of its source ("locked"), so every remount must repeat them.
_LOCKED = {
    os.ST_RDONLY: MS_RDONLY,
    os.ST_NOSUID: MS_NOSUID,
    os.ST_NODEV: MS_NODEV,
    os.ST_NOEXEC: MS_NOEXEC,
    os.ST_NOATIME: MS_NOATIME,
    os.ST_NODIRATIME: MS_NODIRATIME,
    os.ST_RELATIME: MS_RELATIME,
}


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _check(result: int, what: str) -> None:
    if result == -1:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _path(value: str | None) -> bytes | None:
    return None if value is None else os.fsencode(value)


def unshare(flags: int) -> None:
    _check(_libc().unshare(ctypes.c_int(flags)), "unshare")


def mount(
    source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None
) -> None:
    result = _libc().mount(
        _path(source), _path(target), _path(fstype), ctypes.c_ulong(flags), _path(data)
    )
    _check(result, f"mount {target}")


def umount(target: str, flags: int = 0) -> None:
    _check(_libc().umount2(_path(target), ctypes.c_int(flags)), f"umount {target}")


def pivot_root(new_root: str, put_old: str) -> None:
    number = _SYS_PIVOT_ROOT.get(platform.machine())
    if number is None:
        raise OSError(0, f"pivot_root: unknown system call number on {platform.machine()}")
    result = _libc().syscall(ctypes.c_long(number), _path(new_root), _path(put_old))
    _check(result, "pivot_root")


def _prctl(option: int, value: int) -> None:
    zero = ctypes.c_ulong(0)
    result = _libc().prctl(ctypes.c_int(option), ctypes.c_ulong(value), zero, zero, zero)
    _check(result, "prctl")


def set_parent_death_signal(signum: int) -> None:
    _prctl(_PR_SET_PDEATHSIG, signum)


def set_no_new_privs() -> None:
    """execve() can never again grant privileges: no setuid bits, no file capabilities."""
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)


def set_dumpable(dumpable: bool) -> None:
    _prctl(_PR_SET_DUMPABLE, int(dumpable))


def drop_bounding_set() -> None:
    """Empty the capability bounding set (needs CAP_SETPCAP in the current user namespace)."""
    with open(_LAST_CAP_FILE, encoding="ascii") as last:
        highest = int(last.read())
    for cap in range(highest + 1):
        _prctl(_PR_CAPBSET_DROP, cap)


def clear_capabilities() -> None:
    """No effective, permitted or inheritable capability is left to this process."""
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_libc().capset(ctypes.byref(header), ctypes.byref(data)), "capset")


def locked_mount_flags(path: str) -> int:
    """The mount flags of the mount holding ``path`` that a remount must keep."""
    present = os.statvfs(path).f_flag
    return sum(flag for stat_flag, flag in _LOCKED.items() if present & stat_flag)
