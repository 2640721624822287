"""What a hand-in's process gives up when the grader runs as root (as CI does).

Switching to an unprivileged user is not an option everywhere: the Python interpreter may
live under /root. So the process stays uid 0 but drops every capability, for good (the
bounding set and securebits stop execve from giving them back). Root is exempt from
RLIMIT_NPROC, so a pids cgroup, where one can be made, caps its processes instead.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from pathlib import Path

_PR_CAPBSET_DROP, _PR_SET_SECUREBITS, _PR_CAP_AMBIENT = 24, 28, 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
# SECBIT_NOROOT, SECBIT_NO_SETUID_FIXUP and SECBIT_KEEP_CAPS off, each with its lock bit.
_SECUREBITS = (1 << 0) | (1 << 1) | (1 << 2) | (1 << 3) | (1 << 5)
_CAPABILITY_VERSION_3 = 0x20080522
_CGROUP_ROOTS = (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/pids"))


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def drop_all_capabilities() -> None:
    """Give up every Linux capability of this process and its future children."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in range(64):
        libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0)  # EINVAL past the last one: fine
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    if libc.prctl(_PR_SET_SECUREBITS, _SECUREBITS, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECUREBITS) failed")
    header = _CapHeader(_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")


def pids_cgroup_path(pid: int) -> Path | None:
    """Where :func:`join_pids_cgroup` puts process ``pid``'s cgroup, if it made one."""
    for root in _CGROUP_ROOTS:
        candidate = root / f"coursekit-{pid}"
        if candidate.is_dir():
            return candidate
    return None


def join_pids_cgroup(max_processes: int) -> Path | None:
    """Move this process into a new pids cgroup capped at ``max_processes``; None if impossible."""
    for root in _CGROUP_ROOTS:
        if not (root / "cgroup.procs").exists():
            continue
        if root.name != "pids" and "pids" not in _read(root / "cgroup.controllers"):
            continue
        group = root / f"coursekit-{os.getpid()}"
        try:
            group.mkdir(exist_ok=True)
            (group / "pids.max").write_text(str(max_processes))
            (group / "cgroup.procs").write_text(str(os.getpid()))
            return group
        except OSError:
            with contextlib.suppress(OSError):
                group.rmdir()
    return None


def remove_cgroup(group: Path) -> None:
    with contextlib.suppress(OSError):
        group.rmdir()


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
