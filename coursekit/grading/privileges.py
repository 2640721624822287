"""What a hand-in's process gives up: capabilities, and processes and memory over its cgroup's.

Switching to an unprivileged user is not an option everywhere: the Python interpreter may
live under /root. So a hand-in graded as root stays uid 0 but drops every capability, for
good (the bounding set and securebits stop execve from giving them back). Root is exempt
from RLIMIT_NPROC, so pids and memory cgroups, where they can be made, cap the processes and
the memory of a hand-in and everything it starts, together; the grader empties and removes
them when the hand-in is done.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time
from pathlib import Path

_PR_CAPBSET_DROP, _PR_SET_SECUREBITS, _PR_CAP_AMBIENT = 24, 28, 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
# SECBIT_NOROOT, SECBIT_NO_SETUID_FIXUP and SECBIT_KEEP_CAPS off, each with its lock bit.
_SECUREBITS = (1 << 0) | (1 << 1) | (1 << 2) | (1 << 3) | (1 << 5)
_CAPABILITY_VERSION_3 = 0x20080522


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


def loopback_up() -> bool:
    """Bring up the loopback device of this (new, empty) network namespace.

    It reaches only this namespace, so nothing leaves it; torch.distributed's gloo backend
    needs it even for a one-process group, which module 4's checks run. False on failure.
    """
    import fcntl
    import socket
    import struct

    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as handle:
            request = struct.pack("16sH", b"lo", 0)
            flags = struct.unpack("16sH", fcntl.ioctl(handle, siocgifflags, request)[:18])[1]
            fcntl.ioctl(handle, siocsifflags, struct.pack("16sH", b"lo", flags | iff_up))
    except OSError:
        return False
    return True


_CGROUP_MOUNT = Path("/sys/fs/cgroup")
# controller -> (v1 limit file, v2 limit file)
_LIMIT_FILES = {"pids": ("pids.max", "pids.max"), "memory": ("memory.limit_in_bytes", "memory.max")}


def _own_cgroups() -> dict[str, Path]:
    """controller -> the folder of this process's current cgroup (v1 per controller, or v2)."""
    found: dict[str, Path] = {}
    for line in _read(Path("/proc/self/cgroup")).splitlines():
        number, controllers, path = line.split(":", 2)
        if number == "0" and (_CGROUP_MOUNT / "cgroup.controllers").exists():
            enabled = _read(_CGROUP_MOUNT / path.lstrip("/") / "cgroup.subtree_control").split()
            for controller in _LIMIT_FILES:
                if controller in enabled:
                    found.setdefault(controller, _CGROUP_MOUNT / path.lstrip("/"))
        for controller in controllers.split(","):
            if controller in _LIMIT_FILES and (_CGROUP_MOUNT / controller).is_dir():
                found[controller] = _CGROUP_MOUNT / controller / path.lstrip("/")
    return found


def cgroup_paths(pid: int) -> list[Path]:
    """The cgroups :func:`join_cgroups` made for process ``pid`` (to remove afterwards)."""
    return [
        folder / f"coursekit-{pid}"
        for folder in set(_own_cgroups().values())
        if (folder / f"coursekit-{pid}").is_dir()
    ]


def join_cgroups(max_processes: int, memory_bytes: int) -> list[str]:
    """Move this process into new cgroups under its own, capping processes and memory for it
    and everything it starts, together; return the controllers that worked."""
    limits = {"pids": max_processes, "memory": memory_bytes}
    joined = []
    for controller, parent in _own_cgroups().items():
        group = parent / f"coursekit-{os.getpid()}"
        version = 1 if parent.is_relative_to(_CGROUP_MOUNT / controller) else 2
        limit_file = _LIMIT_FILES[controller][version - 1]
        try:
            group.mkdir(exist_ok=True)
            (group / limit_file).write_text(str(limits[controller]))
            (group / "cgroup.procs").write_text(str(os.getpid()))
            joined.append(controller)
        except OSError:
            with contextlib.suppress(OSError):
                group.rmdir()
    return joined


def empty_and_remove_cgroup(group: Path, seconds: float = 5.0) -> bool:
    """Kill every process still in ``group`` (cgroup.kill where there is one), then remove
    it; False if processes remained after ``seconds``."""
    deadline = time.monotonic() + seconds
    with contextlib.suppress(OSError):
        (group / "cgroup.kill").write_text("1")
    while True:
        pids = [int(p) for p in _read(group / "cgroup.procs").split() if p.isdigit()]
        if not pids:
            break
        if time.monotonic() > deadline:
            return False
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)
    while group.exists():  # an emptied group can take a moment to be removable
        try:
            group.rmdir()
        except OSError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
    return True


def remove_stale_cgroups() -> list[str]:
    """Empty ``coursekit-<pid>`` cgroups whose process is gone (a grader killed outright)."""
    removed = []
    for parent in set(_own_cgroups().values()):
        for group in parent.glob("coursekit-*"):
            pid = group.name.split("-", 1)[1]
            if (
                pid.isdigit()
                and not Path(f"/proc/{pid}").exists()
                and not _read(group / "cgroup.procs").strip()
            ):
                with contextlib.suppress(OSError):
                    group.rmdir()
                    removed.append(str(group))
    return removed


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
