"""A seccomp filter for a hand-in's process: the system calls it has no business making.

Installed with TSYNC (every thread of the process) and inherited by every child, it:

- kills the process on any system call made through another ABI than the native one: the
  32-bit ``int 0x80`` entry, x32 (x86-64 numbers with bit 30 set), or AArch32 on arm64. A
  filter that only knows native numbers must not let other tables through unread;
- refuses ``io_uring`` (ENOSYS): its operations (socket, connect, open...) run in the kernel
  without passing through this filter, so allowing it would undo every rule below;
- refuses ``clone3`` (ENOSYS, so libc falls back to ``clone``, whose flags can be read) and
  ``clone`` or ``unshare`` with any namespace flag: a hand-in makes no namespaces of its own;
- refuses ``socket(AF_UNIX)`` and ``socketpair(AF_UNIX)`` of any type but stream or
  seqpacket (a datagram socket can ``sendto`` a path without ``socket``/``connect``);
- pins the grader's channel: its descriptors cannot be closed, duplicated, replaced by
  ``dup2``/``dup3`` or stripped of close-on-exec, and ``close_range`` is refused (ENOSYS:
  libc and Python fall back to one ``close`` at a time), so what the runner writes reaches
  the grader, and an ``exec``'d program does not inherit them;
- refuses what needs no place in a notebook: mounts, ``setns``, ``pivot_root``, kernel
  keyrings, ``ptrace`` and ``process_vm_*``, ``pidfd_getfd``, ``bpf``, ``perf_event_open``,
  ``userfaultfd``, modules, kexec, reboot, swap, clocks, quotas, ``open_by_handle_at``.

Numbers come from the kernel's tables: ``arch/x86/entry/syscalls/syscall_64.tbl`` and
``include/uapi/asm-generic/unistd.h`` (arm64).
"""

from __future__ import annotations

import ctypes
import os

# Return values (include/uapi/linux/seccomp.h)
KILL_PROCESS, ALLOW, _ERRNO = 0x80000000, 0x7FFF0000, 0x00050000
EPERM, EACCES, ENOSYS = 1, 13, 38
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_X32_SYSCALL_BIT = 0x40000000
AF_UNIX, SOCK_STREAM, SOCK_SEQPACKET = 1, 1, 5
NAMESPACE_FLAGS = 0x7E020000  # CLONE_NEW{NS,CGROUP,UTS,IPC,USER,PID,NET}

_SYSCALLS = {
    "x86_64": {
        "seccomp": 317, "socket": 41, "socketpair": 53, "clone": 56, "clone3": 435,
        "unshare": 272, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161,
        "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
        "fspick": 433, "mount_setattr": 442, "add_key": 248, "request_key": 249, "keyctl": 250,
        "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "pidfd_getfd": 438,
        "perf_event_open": 298, "bpf": 321, "userfaultfd": 323, "kexec_load": 246,
        "kexec_file_load": 320, "init_module": 175, "finit_module": 313, "delete_module": 176,
        "reboot": 169, "swapon": 167, "swapoff": 168, "syslog": 103, "acct": 163,
        "settimeofday": 164, "clock_settime": 227, "clock_adjtime": 305, "adjtimex": 159,
        "quotactl": 179, "quotactl_fd": 443, "lookup_dcookie": 212, "open_by_handle_at": 304,
        "uselib": 134, "iopl": 172, "ioperm": 173, "vhangup": 153,
        "close": 3, "dup": 32, "dup2": 33, "dup3": 292, "fcntl": 72, "close_range": 436,
        "ioctl": 16,
    },
    "aarch64": {
        "seccomp": 277, "socket": 198, "socketpair": 199, "clone": 220, "clone3": 435,
        "unshare": 97, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "setns": 268, "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51,
        "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
        "fspick": 433, "mount_setattr": 442, "add_key": 217, "request_key": 218, "keyctl": 219,
        "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "pidfd_getfd": 438,
        "perf_event_open": 241, "bpf": 280, "userfaultfd": 282, "kexec_load": 104,
        "kexec_file_load": 294, "init_module": 105, "finit_module": 273, "delete_module": 106,
        "reboot": 142, "swapon": 224, "swapoff": 225, "syslog": 116, "acct": 89,
        "settimeofday": 170, "clock_settime": 112, "clock_adjtime": 266, "adjtimex": 171,
        "quotactl": 60, "quotactl_fd": 443, "lookup_dcookie": 18, "open_by_handle_at": 265,
        "close": 57, "dup": 23, "dup3": 24, "fcntl": 25, "close_range": 436,
        "ioctl": 29,
    },
}  # fmt: skip
_NOT_SUPPORTED = ("io_uring_setup", "io_uring_enter", "io_uring_register", "clone3", "close_range")
F_DUPFD, F_SETFD, F_DUPFD_CLOEXEC, FIONCLEX = 0, 2, 1030, 0x5450
_NOT_PERMITTED = (
    "setns", "mount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount", "fsopen",
    "fsconfig", "fsmount", "fspick", "mount_setattr", "add_key", "request_key", "keyctl",
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "perf_event_open", "bpf",
    "userfaultfd", "kexec_load", "kexec_file_load", "init_module", "finit_module",
    "delete_module", "reboot", "swapon", "swapoff", "syslog", "acct", "settimeofday",
    "clock_settime", "clock_adjtime", "adjtimex", "quotactl", "quotactl_fd", "lookup_dcookie",
    "open_by_handle_at", "uselib", "iopl", "ioperm", "vhangup",
)  # fmt: skip

# Classic BPF (include/uapi/linux/filter.h and bpf_common.h)
_LD_W_ABS, _AND_K, _RET_K = 0x20, 0x54, 0x06
_JEQ_K, _JGE_K, _JSET_K = 0x15, 0x35, 0x45
_NR, _ARCH = 0, 4  # offsets in struct seccomp_data


def _arg(index: int) -> int:
    """Offset of the low 32 bits of argument ``index`` (little-endian machines)."""
    return 16 + 8 * index


class _SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    ]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


class _Program:
    """A tiny assembler: instructions whose jumps name labels, resolved at the end."""

    def __init__(self):
        self.code: list[tuple[int, object, object, int]] = []
        self.labels: dict[str, int] = {}

    def load(self, offset: int) -> None:
        self.code.append((_LD_W_ABS, 0, 0, offset))

    def and_(self, mask: int) -> None:
        self.code.append((_AND_K, 0, 0, mask))

    def jump(self, op: int, value: int, true, false) -> None:
        """``true``/``false``: a label, or 0 for the next instruction."""
        self.code.append((op, true, false, value))

    def ret(self, value: int) -> None:
        self.code.append((_RET_K, 0, 0, value))

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def assemble(self) -> list[_SockFilter]:
        out = []
        for at, (op, true, false, value) in enumerate(self.code):
            offsets = [
                self.labels[target] - at - 1 if isinstance(target, str) else target
                for target in (true, false)
            ]
            if not all(0 <= offset <= 255 for offset in offsets):
                raise ValueError(f"seccomp program: jump out of range at {at}")
            out.append(_SockFilter(op, offsets[0], offsets[1], value))
        return out


def program(machine: str, protected: tuple[int, ...] = ()) -> list[_SockFilter]:
    """The filter for ``machine`` (``os.uname().machine``), pinning the ``protected``
    descriptors (the channel to the grader)."""
    nr = _SYSCALLS[machine]
    p = _Program()
    p.load(_ARCH)
    p.jump(_JEQ_K, _AUDIT_ARCH[machine], 0, "kill")
    p.load(_NR)
    if machine == "x86_64":
        p.jump(_JGE_K, _X32_SYSCALL_BIT, "kill", 0)
    for name in _NOT_SUPPORTED:
        p.jump(_JEQ_K, nr[name], "enosys", 0)
    for name in _NOT_PERMITTED:
        if name in nr:
            p.jump(_JEQ_K, nr[name], "eperm", 0)
    p.jump(_JEQ_K, nr["unshare"], "eperm", 0)  # every unshare makes or leaves a namespace
    p.jump(_JEQ_K, nr["clone"], "clone", 0)
    p.jump(_JEQ_K, nr["socket"], "socket", 0)
    p.jump(_JEQ_K, nr["socketpair"], "socketpair", 0)
    if protected:
        p.jump(_JEQ_K, nr["close"], "first_is_protected", 0)
        p.jump(_JEQ_K, nr["dup"], "first_is_protected", 0)
        p.jump(_JEQ_K, nr["dup3"], "either_is_protected", 0)
        if "dup2" in nr:
            p.jump(_JEQ_K, nr["dup2"], "either_is_protected", 0)
        p.jump(_JEQ_K, nr["fcntl"], "fcntl", 0)
        p.jump(_JEQ_K, nr["ioctl"], "ioctl", 0)
    p.ret(ALLOW)
    if protected:
        p.label("fcntl")  # F_DUPFD, F_SETFD and F_DUPFD_CLOEXEC on a protected descriptor
        p.load(_arg(1))
        for command in (F_DUPFD, F_SETFD, F_DUPFD_CLOEXEC):
            p.jump(_JEQ_K, command, "first_is_protected", 0)
        p.ret(ALLOW)
        p.label("ioctl")  # FIONCLEX: how Python's os.set_inheritable clears close-on-exec
        p.load(_arg(1))
        p.jump(_JEQ_K, FIONCLEX, "first_is_protected", 0)
        p.ret(ALLOW)
        p.label("either_is_protected")  # dup2(old, new): neither may be the channel
        p.load(_arg(1))
        for fd in protected:
            p.jump(_JEQ_K, fd, "eperm", 0)
        p.label("first_is_protected")
        p.load(_arg(0))
        for fd in protected:
            p.jump(_JEQ_K, fd, "eperm", 0)
        p.ret(ALLOW)
    p.label("clone")  # flags are the first argument on both machines
    p.load(_arg(0))
    p.jump(_JSET_K, NAMESPACE_FLAGS, "eperm", "allow")
    p.label("socket")
    p.load(_arg(0))
    p.jump(_JEQ_K, AF_UNIX, "eacces", "allow")
    p.label("socketpair")
    p.load(_arg(0))
    p.jump(_JEQ_K, AF_UNIX, 0, "allow")
    p.load(_arg(1))
    p.and_(0xF)  # the type without SOCK_NONBLOCK / SOCK_CLOEXEC
    p.jump(_JEQ_K, SOCK_STREAM, "allow", 0)
    p.jump(_JEQ_K, SOCK_SEQPACKET, "allow", "eacces")
    p.label("allow")
    p.ret(ALLOW)
    p.label("eacces")
    p.ret(_ERRNO | EACCES)
    p.label("eperm")
    p.ret(_ERRNO | EPERM)
    p.label("enosys")
    p.ret(_ERRNO | ENOSYS)
    p.label("kill")
    p.ret(KILL_PROCESS)
    return p.assemble()


_PR_SET_NO_NEW_PRIVS = 38
_SECCOMP_SET_MODE_FILTER, _SECCOMP_FILTER_FLAG_TSYNC = 1, 1


def supported() -> bool:
    return os.uname().machine in _SYSCALLS


def install(protected: tuple[int, ...] = ()) -> bool:
    """Install the filter on every thread of this process; False on an unknown machine.

    Raises OSError when the kernel refuses it (a thread that could not be synchronised).
    """
    machine = os.uname().machine
    if machine not in _SYSCALLS:
        return False
    instructions = program(machine, tuple(protected))
    filters = (_SockFilter * len(instructions))(*instructions)
    fprog = _SockFprog(len(instructions), filters)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    result = libc.syscall(
        _SYSCALLS[machine]["seccomp"],
        _SECCOMP_SET_MODE_FILTER,
        _SECCOMP_FILTER_FLAG_TSYNC,
        ctypes.byref(fprog),
    )
    if result != 0:
        raise OSError(ctypes.get_errno(), f"installing the seccomp filter failed ({result})")
    return True
