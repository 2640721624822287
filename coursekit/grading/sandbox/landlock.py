"""Linux Landlock: let a process read and write only where it is told, unprivileged.

The grader runs each hand-in under a Landlock ruleset: it may read Python, its packages and
system libraries, write only in its scratch folder, open no TCP connections and signal no
process outside its sandbox. Reading the course's source notebooks (with the reference and
hidden tests), or writing the gradebook, fails with PermissionError. Landlock needs Linux
5.13 or newer; :func:`abi_version` says whether this kernel has it.
"""

from __future__ import annotations

import ctypes
import os
import platform
from collections.abc import Iterable

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446  # same on x86-64, arm64
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_MAKE_AND_REMOVE = sum(1 << bit for bit in range(4, 13))  # remove/make dir, file, sock, ...
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
READ = EXECUTE | READ_FILE | READ_DIR
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1 << 0, 1 << 1


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPortAttr(ctypes.Structure):
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


_RULE_NET_PORT = 2


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def abi_version() -> int:
    """Landlock ABI version of this kernel; 0 when Landlock is not there."""
    if platform.system() != "Linux":
        return 0
    try:
        version = _libc().syscall(_SYS_CREATE_RULESET, None, 0, _CREATE_RULESET_VERSION)
    except (OSError, AttributeError):
        return 0
    return max(int(version), 0)


def _fs_rights(abi: int) -> int:
    rights = READ | WRITE_FILE | _MAKE_AND_REMOVE
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


def restrict(
    read_paths: Iterable[str],
    write_paths: Iterable[str],
    block_tcp: bool = True,
    ephemeral_bind: bool = False,
) -> int:
    """Confine this process and its future children; return the ABI used.

    ``read_paths`` may be read (and executed); ``write_paths`` may also be written, created
    in and deleted from. Everything else on the file system is off limits, as are TCP (ABI 4+,
    unless ``block_tcp`` is False: inside a network namespace of its own, TCP reaches only
    that namespace's loopback, which torch.distributed's gloo needs) and signals to processes
    outside the sandbox (ABI 6+). With ``ephemeral_bind``, a TCP socket may still be bound
    to port 0 (a port the kernel picks), as gloo's one-process group does to listen; it can
    connect nowhere. Paths that do not exist are skipped. Raises OSError when the kernel
    refuses.
    """
    abi = abi_version()
    if abi < 1:
        raise OSError("Landlock is not available on this kernel.")
    handled = _fs_rights(abi)
    attr = _RulesetAttr(handled_access_fs=handled)
    size = ctypes.sizeof(ctypes.c_uint64)
    if abi >= 4:
        attr.handled_access_net = (_NET_BIND_TCP | _NET_CONNECT_TCP) if block_tcp else 0
        size = 2 * ctypes.sizeof(ctypes.c_uint64)
    if abi >= 6:
        attr.scoped = _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL
        size = ctypes.sizeof(_RulesetAttr)
    libc = _libc()
    ruleset = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), size, 0)
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    try:
        for paths, rights in ((read_paths, READ), (write_paths, handled)):
            for path in paths:
                _allow(libc, ruleset, path, rights)
        if abi >= 4 and block_tcp and ephemeral_bind:
            rule = _NetPortAttr(allowed_access=_NET_BIND_TCP, port=0)
            if libc.syscall(_SYS_ADD_RULE, ruleset, _RULE_NET_PORT, ctypes.byref(rule), 0) != 0:
                raise OSError(ctypes.get_errno(), "landlock_add_rule failed for TCP port 0")
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if libc.syscall(_SYS_RESTRICT_SELF, ruleset, 0) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(ruleset)
    return abi


def _allow(libc, ruleset: int, path: str, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if not os.path.isdir(path):  # files take only file rights
            rights &= EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
        rule = _PathBeneathAttr(allowed_access=rights, parent_fd=fd)
        if libc.syscall(_SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0) != 0:
            raise OSError(ctypes.get_errno(), f"landlock_add_rule failed for {path}")
    finally:
        os.close(fd)
