"""A seccomp filter for a hand-in's process: an allow list of the system calls it may make.

Installed with TSYNC (every thread of the process) and inherited by every child, it:

- kills the process on any system call made through another ABI than the native one: the
  32-bit ``int 0x80`` entry, x32 (x86-64 numbers with bit 30 set), or AArch32 on arm64. A
  filter that only knows native numbers must not let other tables through unread;
- allows only the system calls listed in :data:`ALLOWED` (grouped there, with the reason for
  each group). Every other number, including those a newer kernel adds (``open_tree_attr``,
  467, was one), is refused with ENOSYS, so that libc and Python fall back where they can;
- refuses with EPERM, as before, the calls in :data:`NOT_PERMITTED` that administer the
  system or reach outside the process: mounts, ``setns``, ``pivot_root``, kernel keyrings,
  ``ptrace`` and ``process_vm_*``, ``pidfd_getfd``, ``bpf``, ``perf_event_open``,
  ``userfaultfd``, modules, kexec, reboot, swap, clocks, quotas, ``open_by_handle_at``;
- refuses ``io_uring`` (ENOSYS): its operations (socket, connect, open...) run in the kernel
  without passing through this filter, so allowing it would undo every rule here;
- refuses ``clone3`` (ENOSYS, so libc falls back to ``clone``, whose flags can be read) and
  ``clone`` or ``unshare`` with any namespace flag: a hand-in makes no namespaces of its own;
  and ``clone`` with ``CLONE_PARENT``, which would make a process the hand-in's sibling,
  outside the tree the runner watches (a child the notebook leaves running is ended before a
  memory measurement, :mod:`coursekit.checks.memory_peak`);
- limits sockets to the families grading needs. ``socket(AF_UNIX)`` is refused (EACCES: a Unix
  socket of its own could reach a host's socket by its path) and ``socketpair(AF_UNIX)`` is
  allowed for stream and seqpacket only (a datagram socket can ``sendto`` a path without
  ``socket``/``connect``). ``AF_INET`` and ``AF_INET6`` are allowed only with
  ``allow_inet=True`` (``inet="all"``), which the runner passes when the hand-in has a
  network namespace of its own with only a loopback device (for torch.distributed's gloo),
  or, with ``inet="stream"``, as TCP sockets only (for a hand-in without that namespace,
  whose TCP Landlock confines; UDP, SCTP and MPTCP it does not); and then also
  ``AF_NETLINK`` with protocol ``NETLINK_ROUTE`` only, because gloo needs it: with
  ``GLOO_SOCKET_IFNAME=lo`` it finds the interface's address with ``getifaddrs``, which asks
  the kernel over a ``NETLINK_ROUTE`` socket (seen in a trace of module 4's grading; without
  it ``init_process_group`` fails). The socket reads the namespace's interfaces and
  addresses; changing them needs ``CAP_NET_ADMIN``, which the hand-in dropped. Every other
  family (``AF_VSOCK``, ``AF_PACKET``, ``AF_NETLINK`` otherwise...) is refused with
  EAFNOSUPPORT;
- pins the grader's channel: its descriptors cannot be closed, duplicated, replaced by
  ``dup2``/``dup3`` or stripped of close-on-exec, and ``close_range`` is refused (ENOSYS:
  libc and Python fall back to one ``close`` at a time), so what the runner writes reaches
  the grader, and an ``exec``'d program does not inherit them;
- allows ``prlimit64`` on this process only (pid 0, as libc's ``getrlimit``/``setrlimit``
  call it): another process's limits are not the hand-in's to change.

The lists, as names with the reason for each group, are data of their own
(:mod:`coursekit.grading.sandbox.seccomp_allow_list`, derived from what really runs), and so are
the numbers, from the kernel's tables (:mod:`coursekit.grading.sandbox.syscall_numbers`). This
module turns them into a program: a binary search over the ranges of numbers that share an
action, so it stays short (120 to 175 instructions, far under the kernel's 4096) and takes six
or seven comparisons to find a system call's rule.
"""

from __future__ import annotations

import ctypes
import os

from coursekit.grading.sandbox.seccomp_allow_list import ALLOWED, NOT_PERMITTED, NOT_SUPPORTED
from coursekit.grading.sandbox.syscall_numbers import NUMBERS

# Return values (include/uapi/linux/seccomp.h)
KILL_PROCESS, ALLOW, _ERRNO = 0x80000000, 0x7FFF0000, 0x00050000
EPERM, EACCES, ENOSYS, EAFNOSUPPORT = 1, 13, 38, 97
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_X32_SYSCALL_BIT = 0x40000000
AF_UNIX, AF_INET, AF_INET6, AF_NETLINK = 1, 2, 10, 16
SOCK_STREAM, SOCK_SEQPACKET, NETLINK_ROUTE, IPPROTO_TCP = 1, 5, 0, 6
NAMESPACE_FLAGS = 0x7E020000  # CLONE_NEW{NS,CGROUP,UTS,IPC,USER,PID,NET}
CLONE_PARENT, CLONE_THREAD = 0x00008000, 0x00010000
MAP_SHARED = 0x01  # and MAP_SHARED_VALIDATE, 0x03
F_DUPFD, F_SETFD, F_DUPFD_CLOEXEC, FIONCLEX = 0, 2, 1030, 0x5450

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
        if len(out) > 4096:  # BPF_MAXINSNS
            raise ValueError(f"seccomp program: {len(out)} instructions, over the kernel's 4096")
        return out


def actions(machine: str, protected: tuple[int, ...] = ()) -> dict[int, str]:
    """System call number -> what the filter does with it: ``allow``, ``eperm``, ``enosys``
    or the label of a rule that reads its arguments. Numbers not in it get ENOSYS."""
    nr = NUMBERS[machine]
    action: dict[int, str] = {}
    for names in ALLOWED.values():
        for name in names:
            if name in nr:
                action[nr[name]] = "allow"
    for name in NOT_PERMITTED:
        if name in nr:
            action[nr[name]] = "eperm"  # unshare among them: each makes or leaves a namespace
    for name in NOT_SUPPORTED:
        action[nr[name]] = "enosys"
    rules = {name: name for name in ("clone", "socket", "socketpair", "prlimit64")}
    if protected:
        rules.update(close="first_is_protected", dup="first_is_protected")
        rules.update(dup2="either_is_protected", dup3="either_is_protected")
        rules.update(fcntl="fcntl", ioctl="ioctl")
    for name, label in rules.items():
        if name in nr or name != "dup2":  # arm64 has no dup2; every other one is needed
            action[nr[name]] = label
    return action


def _ranges(action: dict[int, str]) -> list[tuple[int, str]]:
    """(first number, label) of each run of numbers with one action, from 0 up; the last
    run (past the highest number known) is ENOSYS."""
    runs: list[tuple[int, str]] = []
    for number in range(max(action) + 2):
        label = action.get(number, "enosys")
        if not runs or runs[-1][1] != label:
            runs.append((number, label))
    return runs


def _search(p: _Program, runs: list[tuple[int, str]]) -> None:
    """A binary search over ``runs`` for the number in the accumulator: one JGE for each
    boundary, jumping straight to each run's label."""

    def target(lo: int, hi: int) -> str:
        return runs[lo][1] if hi - lo == 1 else f"search_{lo}_{hi}"

    def emit(lo: int, hi: int) -> None:
        if hi - lo == 1:
            return
        mid = (lo + hi) // 2
        p.label(target(lo, hi))
        p.jump(_JGE_K, runs[mid][0], target(mid, hi), target(lo, mid))
        emit(lo, mid)
        emit(mid, hi)

    emit(0, len(runs))


INET_MODES = ("none", "stream", "all")


def _inet_mode(allow_inet: bool, inet: str | None) -> str:
    """``inet`` checked, or what ``allow_inet`` stands for."""
    if inet is None:
        return "all" if allow_inet else "none"
    if inet not in INET_MODES or (allow_inet and inet != "all"):
        raise ValueError(f"inet must be one of {INET_MODES} (and 'all' with allow_inet)")
    return inet


def program(
    machine: str,
    protected: tuple[int, ...] = (),
    allow_inet: bool = False,
    *,
    inet: str | None = None,
) -> list[_SockFilter]:
    """The filter for ``machine`` (``os.uname().machine``), pinning the ``protected``
    descriptors (the channel to the grader); ``allow_inet`` and ``inet``: see :func:`install`."""
    mode = _inet_mode(allow_inet, inet)
    p = _Program()
    p.load(_ARCH)
    p.jump(_JEQ_K, _AUDIT_ARCH[machine], 0, "kill")
    p.load(_NR)
    if machine == "x86_64":
        p.jump(_JGE_K, _X32_SYSCALL_BIT, "kill", 0)
    _search(p, _ranges(actions(machine, protected)))
    if protected:
        p.label("fcntl")  # F_DUPFD, F_SETFD and F_DUPFD_CLOEXEC on a protected descriptor
        p.load(_arg(1))
        for command in (F_DUPFD, F_SETFD, F_DUPFD_CLOEXEC):
            p.jump(_JEQ_K, command, "first_is_protected", 0)
        p.ret(ALLOW)
        p.label("ioctl")  # FIONCLEX: how Python's os.set_inheritable clears close-on-exec
        p.load(_arg(1))
        p.jump(_JEQ_K, FIONCLEX, "first_is_protected", "allow")
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
    p.jump(_JSET_K, NAMESPACE_FLAGS | CLONE_PARENT, "eperm", "allow")
    p.label("prlimit64")  # pid 0: this process
    p.load(_arg(0))
    p.jump(_JEQ_K, 0, "allow", "eperm")
    p.label("socket")  # (family, type, protocol); the kernel reads each as a 32-bit int
    p.load(_arg(0))
    p.jump(_JEQ_K, AF_UNIX, "eacces", 0)
    if mode == "none":
        p.ret(_ERRNO | EAFNOSUPPORT)
    else:
        inet_rule = "allow" if mode == "all" else "inet_stream"
        p.jump(_JEQ_K, AF_INET, inet_rule, 0)
        p.jump(_JEQ_K, AF_INET6, inet_rule, 0)
        p.jump(_JEQ_K, AF_NETLINK, 0, "eafnosupport")
        p.load(_arg(2))
        p.jump(_JEQ_K, NETLINK_ROUTE, "allow", "eafnosupport")
        if mode == "stream":  # TCP only: what Landlock's network rules cover
            p.label("inet_stream")
            p.load(_arg(1))
            p.and_(0xF)  # the type without SOCK_NONBLOCK / SOCK_CLOEXEC
            p.jump(_JEQ_K, SOCK_STREAM, 0, "eacces")
            p.load(_arg(2))  # not SCTP or MPTCP, which are streams too
            p.jump(_JEQ_K, 0, "allow", 0)
            p.jump(_JEQ_K, IPPROTO_TCP, "allow", "eacces")
    p.label("socketpair")
    p.load(_arg(0))
    p.jump(_JEQ_K, AF_UNIX, 0, "eafnosupport")
    p.load(_arg(1))
    p.and_(0xF)  # the type without SOCK_NONBLOCK / SOCK_CLOEXEC
    p.jump(_JEQ_K, SOCK_STREAM, "allow", 0)
    p.jump(_JEQ_K, SOCK_SEQPACKET, "allow", "eacces")
    p.label("allow")
    p.ret(ALLOW)
    p.label("enosys")
    p.ret(_ERRNO | ENOSYS)
    p.label("eperm")
    p.ret(_ERRNO | EPERM)
    p.label("eacces")
    p.ret(_ERRNO | EACCES)
    p.label("eafnosupport")
    p.ret(_ERRNO | EAFNOSUPPORT)
    p.label("kill")
    p.ret(KILL_PROCESS)
    return p.assemble()


_PR_SET_NO_NEW_PRIVS = 38
_SECCOMP_SET_MODE_FILTER, _SECCOMP_FILTER_FLAG_TSYNC = 1, 1
# looked up once, on import (in the warm parent): a hand-in's ctypes use is flagged, and a
# fork's child measured for memory installs a filter with no new lookup
_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.syscall.restype = ctypes.c_long
_LIBC.prctl, _LIBC.syscall  # noqa: B018 - resolved now, not in a hand-in's process


def supported() -> bool:
    return os.uname().machine in NUMBERS


def install(
    protected: tuple[int, ...] = (), allow_inet: bool = False, *, inet: str | None = None
) -> bool:
    """Install the filter on every thread of this process; False on an unknown machine.

    ``protected``: the descriptors to pin (the channel to the grader). ``allow_inet``: allow
    IPv4 and IPv6 sockets, and NETLINK_ROUTE ones, which gloo needs to find the loopback's
    address; only for a process in a network namespace of its own (with only a loopback).
    ``inet`` says the same in words: ``"all"`` (``allow_inet=True``), ``"none"`` (the
    default), or ``"stream"``: IPv4 and IPv6 TCP sockets only (with NETLINK_ROUTE), for a
    process without a network namespace whose TCP Landlock confines.
    Raises OSError when the kernel refuses it (a thread that could not be synchronised).
    """
    machine = os.uname().machine
    if machine not in NUMBERS:
        return False
    _load(program(machine, tuple(protected), allow_inet, inet=inet), _SECCOMP_FILTER_FLAG_TSYNC)
    return True


def no_handlers_program(machine: str) -> list[_SockFilter]:
    """A filter that refuses (EPERM) ``rt_sigaction`` with a new action: no signal handler
    can be set or changed; reading one (a null action) is allowed, and so is every other
    call (the main filter, installed first, decides those)."""
    p = _Program()
    p.load(_ARCH)
    p.jump(_JEQ_K, _AUDIT_ARCH[machine], 0, "allow")  # the main filter ends other ABIs
    p.load(_NR)
    p.jump(_JEQ_K, NUMBERS[machine]["rt_sigaction"], 0, "allow")
    p.load(_arg(1))  # the new action's address: 64 bits, compared as two halves
    p.jump(_JEQ_K, 0, 0, "eperm")
    p.load(_arg(1) + 4)
    p.jump(_JEQ_K, 0, "allow", "eperm")
    p.label("allow")
    p.ret(ALLOW)
    p.label("eperm")
    p.ret(_ERRNO | EPERM)
    return p.assemble()


def install_no_handlers() -> bool:
    """Freeze this process's signal handlers, in it and in every child (False on an unknown
    machine). Why: Python hands a signal handler the frame that was running, and so the
    frames beneath it, and Python audits none of that; a handler that a hand-in's function
    set, raised and took off again within one call reached the runner's own frames. Once
    this filter is in, ``signal.signal`` raises OSError before Python records the new
    handler, so the handlers the runner set (its timers') are the only ones there are.
    Raises OSError when the kernel refuses it."""
    machine = os.uname().machine
    if machine not in NUMBERS:
        return False
    _load(no_handlers_program(machine), _SECCOMP_FILTER_FLAG_TSYNC)
    return True


def _load(instructions: list[_SockFilter], flags: int) -> None:
    """Set no_new_privs, then install ``instructions`` as a filter on this process."""
    machine = os.uname().machine
    filters = (_SockFilter * len(instructions))(*instructions)
    fprog = _SockFprog(len(instructions), filters)
    libc = _LIBC
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    result = libc.syscall(
        NUMBERS[machine]["seccomp"], _SECCOMP_SET_MODE_FILTER, flags, ctypes.byref(fprog)
    )
    if result != 0:
        raise OSError(ctypes.get_errno(), f"installing the seccomp filter failed ({result})")
