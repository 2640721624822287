"""What a hand-in's process gives up: root, capabilities, and processes and memory over its
cgroup's.

Graded as root (with or without namespaces), a hand-in runs as a user of its own: a uid and
gid that no file and no other process has (:func:`hand_in_ids`, one per runner process, so
two hand-ins cannot signal each other either), with no supplementary groups. It owns only
its scratch folder, so the grader's files (gradebook, key, the course's ``notebooks/``, the
Gradescope bundle's source and results) are out of its reach by ownership and permissions,
whatever else is in place, and RLIMIT_NPROC, which root ignores, holds its processes. Its
capabilities are dropped for good (the bounding set, and no_new_privs from Landlock or
seccomp, stop execve from giving any back). Where the grader runs in a user namespace of
its own (an ordinary user), the hand-in keeps that namespace's single uid and drops the
capabilities the namespace gave. Pids and memory cgroups, where they can be made, cap the
processes and the memory of a hand-in and everything it starts, together; the grader empties
and removes them, and ends every process of the hand-in's uid, when the hand-in is done.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import time
from pathlib import Path

from coursekit.grading.sandbox import reaping

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


# Hand-in users: 0x70000000 + the runner's host pid (at most 2**22): far above any account
# a system or a container image makes (useradd stops at 60000, systemd's dynamic users at
# 65519), and below 2**31 - 1, which some tools read as -1.
HAND_IN_ID_BASE = 0x70000000


def hand_in_ids(runner_pid: int) -> tuple[int, int]:
    """(uid, gid) a hand-in run by the runner process ``runner_pid`` (its host pid) gets."""
    return HAND_IN_ID_BASE + runner_pid, HAND_IN_ID_BASE + runner_pid


def become_hand_in_user(uid: int, gid: int) -> None:
    """From root: drop every capability from the bounding and ambient sets, then become
    ``uid``/``gid`` with no supplementary groups (real, effective and saved ids all), which
    clears the permitted and effective capabilities; finally clear them explicitly."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in range(64):
        libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0)  # EINVAL past the last one: fine
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    header = _CapHeader(_CAPABILITY_VERSION_3, 0)
    if libc.capset(ctypes.byref(header), (_CapData * 2)()) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")
    if os.getuid() != uid or os.geteuid() != uid or os.getgroups() not in ([], [gid]):
        raise OSError("the hand-in's user could not be taken on")


def processes_of(uid: int) -> list[int]:
    """Live processes whose real or effective uid is ``uid`` (read from /proc); zombies,
    which run nothing and wait only to be reaped, are not counted."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as handle:
                for line in handle:
                    if line.startswith(b"State:") and line.split()[1] in (b"Z", b"X"):
                        break
                    if line.startswith(b"Uid:"):
                        real, effective = (int(x) for x in line.split()[1:3])
                        if uid in (real, effective):
                            found.append(int(name))
                        break
        except (OSError, ValueError, IndexError):
            continue
    return found


def end_processes_of(uid: int, seconds: float = 10.0) -> bool:
    """SIGKILL every process of ``uid`` (a hand-in's user) until none is left; whether none is.

    Those /proc names are killed one by one and waited for (most are ending already, killed
    with their runner's process group). Then, while any is left, a helper process takes on
    ``uid`` and sends ``kill(-1, SIGKILL)``, which reaches every process of that user but
    itself in one call, so a hand-in forking as fast as it can is still ended; then /proc is
    read for any that slipped through. Needs root. The helper is
    the calling thread's own child (:func:`coursekit.grading.sandbox.reaping.fork_owned`):
    another grading thread's sweep for strays neither kills nor reaps it."""
    deadline = time.monotonic() + seconds
    left = processes_of(uid)
    if left and _end_each(left, uid, min(seconds, ENDING_S)):
        # most often the hand-in's processes were killed with their runner's group and are
        # still ending: killed one by one and waited for, they need no helper
        left = processes_of(uid)
    while True:
        if not left:
            return True
        if time.monotonic() > deadline:
            return False

        def kill_as_the_user() -> None:  # in the helper: kill(-1) reaches only the user's
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            for _ in range(3):
                with contextlib.suppress(OSError):
                    os.kill(-1, signal.SIGKILL)

        # the calling grading thread's own child: no other thread's sweep signals or reaps it
        reaping.fork_owned(kill_as_the_user)
        for pid in processes_of(uid):
            _kill_if_of(pid, uid)
        time.sleep(0.01)
        left = processes_of(uid)


# How long :func:`end_processes_of` waits for processes it killed one by one to end before it
# sends the helper that reaches every process of the user at once, and for how many at most.
ENDING_S = 0.5
MOST_ONE_BY_ONE = 64


def _end_each(pids: list[int], uid: int, seconds: float) -> bool:
    """SIGKILL each of ``pids`` that is still ``uid``'s (held by a pidfd while its user is
    read, as in :func:`_kill_if_of`) and wait up to ``seconds`` for those to end; whether they
    did. False, leaving it all to the caller's helper, where pidfds are missing (before Linux
    5.3), cannot be opened, or more than :data:`MOST_ONE_BY_ONE` processes are left."""
    if not hasattr(os, "pidfd_open") or len(pids) > MOST_ONE_BY_ONE:
        return False
    handles: list[int] = []
    waiting = select.poll()
    left = 0
    try:
        for pid in pids:
            try:
                handle = os.pidfd_open(pid)
            except ProcessLookupError:  # ended already
                continue
            except OSError:  # out of descriptors, or not allowed: the helper does it
                return False
            handles.append(handle)
            if reaping.uid_of(pid) == uid:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    signal.pidfd_send_signal(handle, signal.SIGKILL)
                waiting.register(handle, select.POLLIN)
                left += 1
        deadline = time.monotonic() + seconds
        while left:  # a pidfd is readable once its process has ended
            wait_ms = int((deadline - time.monotonic()) * 1000)
            if wait_ms <= 0:
                return False
            for handle, _ in waiting.poll(wait_ms):
                waiting.unregister(handle)
                left -= 1
        return True
    finally:
        for handle in handles:
            os.close(handle)


def _kill_if_of(pid: int, uid: int) -> None:
    """SIGKILL process ``pid`` if it is still ``uid``'s: held by a pidfd while its user is
    read, so a pid given to another process since /proc was read is never signalled."""
    try:
        handle = os.pidfd_open(pid)
    except (AttributeError, OSError):  # gone, or before Linux 5.3: a plain kill
        if reaping.uid_of(pid) == uid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        return
    try:
        if reaping.uid_of(pid) == uid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                signal.pidfd_send_signal(handle, signal.SIGKILL)
    finally:
        os.close(handle)


# World-writable folders a hand-in's user could leave files in where it has no root of its
# own (and no Landlock keeps its writes to its scratch folder).
SHARED_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")


def remove_files_of(uid: int, folders=SHARED_WRITABLE) -> list[str]:
    """Remove what ``uid`` left at the top of the world-writable ``folders`` (in a sticky
    folder a user can make entries only there, and inside entries of its own)."""
    import shutil

    removed = []
    for folder in folders:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.stat(follow_symlinks=False).st_uid != uid:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)
                removed.append(entry.path)
            except OSError:
                continue
    return removed


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
    deadline, pause = time.monotonic() + seconds, 0.001
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
        time.sleep(pause)  # a killed process ends within milliseconds: looked at soon, then
        pause = min(2 * pause, 0.02)  # less often
    while group.exists():  # an emptied group can take a moment to be removable
        try:
            group.rmdir()
        except OSError:
            if time.monotonic() > deadline:
                return False
            time.sleep(pause)
            pause = min(2 * pause, 0.02)
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
