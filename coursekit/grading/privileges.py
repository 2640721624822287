"""What a hand-in's process gives up when the grader runs as root (as CI does).

Switching to an unprivileged user is not an option everywhere: the Python interpreter may
live under /root. So the process stays uid 0 but drops every capability, for good (the
bounding set and securebits stop execve from giving them back). Root is exempt from
RLIMIT_NPROC, so pids and memory cgroups, where they can be made, cap the processes and
the memory of a hand-in and everything it starts, together.
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


_CLONE_NEWUSER, _CLONE_NEWIPC, _CLONE_NEWNET = 0x10000000, 0x08000000, 0x40000000


def isolate_network_and_ipc() -> bool:
    """Move this process into new network and IPC namespaces; False where not allowed.

    A new network namespace has only a loopback device, down: no TCP, UDP or abstract
    socket reaches anything outside. Its own IPC namespace keeps System V shared memory
    and queues away from other hand-ins, and frees them when the hand-in ends. Root can do
    it directly; other users need an (unprivileged) user namespace first.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    flags = _CLONE_NEWNET | _CLONE_NEWIPC
    if os.getuid() != 0:
        flags |= _CLONE_NEWUSER
    return libc.unshare(flags) == 0


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


def remove_cgroup(group: Path) -> None:
    with contextlib.suppress(OSError):
        group.rmdir()


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


_CLONE_NEWNS = 0x00020000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18
_KEPT_FLAGS = {"nosuid": _MS_NOSUID, "nodev": _MS_NODEV, "noexec": _MS_NOEXEC}


def _mount_points() -> list[tuple[str, int]]:
    """(mount point, flags to keep) for every mount this process sees, in order."""
    points = []
    for line in _read(Path("/proc/self/mountinfo")).splitlines():
        fields = line.split()
        point = fields[4].encode().decode("unicode_escape")  # "\\040" is a space
        flags = sum(_KEPT_FLAGS.get(option, 0) for option in fields[5].split(","))
        points.append((point, flags))
    return points


def read_only_except(writable: list[str]) -> bool:
    """Give this process its own view of the file systems, all read-only but ``writable``.

    Landlock stops reads and writes of files, but not chmod, utime or extended attributes;
    a process that is uid 0 owns most files, so as root those need a read-only mount.
    Returns False (and changes nothing) where mount namespaces are not allowed.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWNS) != 0:
        return False
    if libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        raise OSError(ctypes.get_errno(), "making mounts private failed")
    for path in writable:  # a mount of their own, so the remounts below leave them alone
        if libc.mount(path.encode(), path.encode(), None, _MS_BIND | _MS_REC, None) != 0:
            raise OSError(ctypes.get_errno(), f"bind-mounting {path} failed")
    keep = {str(Path(path)) for path in writable}
    for point, flags in _mount_points():
        if point in keep or any(point.startswith(k + "/") for k in keep):
            continue
        flags |= _MS_REMOUNT | _MS_BIND | _MS_RDONLY
        libc.mount(None, point.encode(), None, flags, None)  # best effort per mount
    return True


_AF_UNIX, _EACCES = 1, 13
_SOCKET_SYSCALL = {"x86_64": 41, "aarch64": 198}
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, _PR_SET_NO_NEW_PRIVS = 22, 2, 38
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
_LD_W_ABS, _JEQ_K, _RET_K = 0x20, 0x15, 0x06


class _SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    ]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


def forbid_unix_sockets() -> bool:
    """Make ``socket(AF_UNIX, ...)`` fail with EACCES for this process and its children.

    A network namespace does not cover Unix sockets with a path (a server's socket file in
    /run or /tmp), and Landlock cannot stop ``connect()`` to one; without a socket of its
    own a hand-in cannot connect to any. (``socketpair``, used by multiprocessing, still
    works: it reaches nothing outside.) Returns False on an architecture we do not know.
    """
    machine = os.uname().machine
    if machine not in _SOCKET_SYSCALL:
        return False
    program = [
        _SockFilter(_LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
        _SockFilter(_JEQ_K, 1, 0, _AUDIT_ARCH[machine]),
        _SockFilter(_RET_K, 0, 0, _RET_ALLOW),
        _SockFilter(_LD_W_ABS, 0, 0, 0),  # seccomp_data.nr
        _SockFilter(_JEQ_K, 0, 3, _SOCKET_SYSCALL[machine]),
        _SockFilter(_LD_W_ABS, 0, 0, 16),  # low half of args[0]: the address family
        _SockFilter(_JEQ_K, 0, 1, _AF_UNIX),
        _SockFilter(_RET_K, 0, 0, _RET_ERRNO | _EACCES),
        _SockFilter(_RET_K, 0, 0, _RET_ALLOW),
    ]
    filters = (_SockFilter * len(program))(*program)
    fprog = _SockFprog(len(program), filters)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "installing the seccomp filter failed")
    return True
