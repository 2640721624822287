"""The hand-in's seccomp filter is an allow list: what it does not name is refused (ENOSYS),
new system calls included; socket families are limited to what grading needs; and an
everyday workload, and a one-process gloo group where sockets are allowed, still run under it.

The first tests read the BPF program itself, with a small interpreter, for both machines;
the others install the filter in a child process (a fresh Python) on this machine."""

import os
import struct
import subprocess
import sys
import textwrap

import pytest

from coursekit.grading.sandbox import seccomp
from coursekit.grading.sandbox.seccomp_allow_list import ALLOWED, NOT_PERMITTED, NOT_SUPPORTED
from coursekit.grading.sandbox.syscall_numbers import NUMBERS

pytestmark = [pytest.mark.grading]

on_this_machine = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not seccomp.supported(),
    reason="needs Linux on a processor coursekit has a table for",
)
MACHINES = ("x86_64", "aarch64")
EPERM, EACCES, ENOSYS, EAFNOSUPPORT = (
    seccomp._ERRNO | errno for errno in (1, 13, 38, 97)
)  # what the filter returns
AF_UNIX, AF_INET, AF_INET6, AF_NETLINK, AF_PACKET, AF_VSOCK = 1, 2, 10, 16, 17, 40
SOCK_STREAM, SOCK_DGRAM, SOCK_RAW, SOCK_SEQPACKET = 1, 2, 3, 5
SOCK_CLOEXEC = 0o2000000
NETLINK_ROUTE, NETLINK_SOCK_DIAG, NETLINK_AUDIT, NETLINK_KOBJECT_UEVENT = 0, 4, 9, 15
CLONE_THREAD_FLAGS = 0x3D0F00  # what glibc's pthread_create passes to clone
CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000
# Calls the allow list leaves out, with their numbers (from the kernel's tables): the module
# keeps numbers only for the calls it names.
NOT_LISTED = {
    "x86_64": {"setuid": 105, "setgroups": 116, "personality": 135, "kcmp": 312,
               "process_madvise": 440, "name_to_handle_at": 303, "move_pages": 279,
               "shmget": 29, "io_setup": 206, "modify_ldt": 154, "fanotify_init": 300},
    "aarch64": {"setuid": 146, "setgroups": 159, "personality": 92, "kcmp": 272,
                "process_madvise": 440, "name_to_handle_at": 264, "move_pages": 239,
                "shmget": 194, "io_setup": 0, "fanotify_init": 262},
}  # fmt: skip


# ------------------------------------------------------------------------ the program itself


def run_filter(program, machine: str, nr: int, *args: int, arch: int | None = None) -> int:
    """What the classic-BPF ``program`` returns for system call ``nr`` with ``args``."""
    arch = seccomp._AUDIT_ARCH[machine] if arch is None else arch
    words = [a & 0xFFFFFFFFFFFFFFFF for a in (list(args) + [0] * 6)[:6]]
    data = struct.pack("<IIQ6Q", nr, arch, 0, *words)
    accumulator, pc = 0, 0
    for _ in range(len(program) + 1):  # no backward jumps: each instruction at most once
        ins = program[pc]
        code, jt, jf, k = ins.code, ins.jt, ins.jf, ins.k
        if code == seccomp._LD_W_ABS:
            accumulator = struct.unpack_from("<I", data, k)[0]
        elif code == seccomp._AND_K:
            accumulator &= k
        elif code == seccomp._RET_K:
            return k
        elif code in (seccomp._JEQ_K, seccomp._JGE_K, seccomp._JSET_K):
            taken = {
                seccomp._JEQ_K: accumulator == k,
                seccomp._JGE_K: accumulator >= k,
                seccomp._JSET_K: bool(accumulator & k),
            }[code]
            pc += jt if taken else jf
        else:
            raise AssertionError(f"unexpected instruction {code:#x} at {pc}")
        pc += 1
    raise AssertionError("the program did not return")


def expected(machine: str, nr: int) -> int:
    """What the allow list says about ``nr``, argument rules aside."""
    names = {number: name for name, number in NUMBERS[machine].items()}
    name = names.get(nr)
    allowed = {n for group in ALLOWED.values() for n in group}
    if name in ("io_uring_setup", "io_uring_enter", "io_uring_register", "clone3", "close_range"):
        return ENOSYS
    if name in NOT_PERMITTED:
        return EPERM
    return seccomp.ALLOW if name in allowed else ENOSYS


@pytest.mark.parametrize("machine", MACHINES)
@pytest.mark.parametrize("inet", seccomp.INET_MODES)
@pytest.mark.parametrize("protected", [(), (1022, 1023)])
def test_the_program_refuses_every_number_it_does_not_list(machine, inet, protected):
    program = seccomp.program(machine, protected, inet=inet)
    assert len(program) < 255  # far below the kernel's 4096: a short search on every call
    nr = NUMBERS[machine]
    ruled = {"clone", "socket", "socketpair", "prlimit64"}
    if protected:
        ruled |= {"close", "dup", "dup2", "dup3", "fcntl", "ioctl"}
    ruled_numbers = {nr[name] for name in ruled if name in nr}
    for number in [*range(1100), 0x3FFFFFFF, 0xFFFFFFFF]:
        if machine == "x86_64" and number >= 0x40000000:
            continue  # x32: killed, below
        if number not in ruled_numbers:
            assert run_filter(program, machine, number) == expected(machine, number), number
    # numbers a newer kernel added, or will: open_tree_attr, the *xattrat calls, listns...
    for number in (463, 464, 465, 466, 467, 468, 469, 470, 500, 1000):
        assert run_filter(program, machine, number) == ENOSYS, number
    for name in ("ptrace", "mount", "bpf", "keyctl", "unshare", "open_tree", "pidfd_getfd"):
        assert run_filter(program, machine, nr[name]) == EPERM, name
    for name, number in NOT_LISTED[machine].items():
        assert number not in nr.values(), name
        assert run_filter(program, machine, number) == ENOSYS, name
    # another ABI is killed: a 32-bit caller on either machine, x32 on x86-64
    assert run_filter(program, machine, 39, arch=0x40000003) == seccomp.KILL_PROCESS
    assert run_filter(program, machine, 20, arch=0x40000028) == seccomp.KILL_PROCESS
    if machine == "x86_64":
        assert run_filter(program, machine, 0x40000000 | 41) == seccomp.KILL_PROCESS


@pytest.mark.parametrize("machine", MACHINES)
def test_the_program_s_argument_rules(machine):
    nr = NUMBERS[machine]
    modes = {mode: seccomp.program(machine, (1023,), inet=mode) for mode in seccomp.INET_MODES}
    assert seccomp.program(machine, (1023,), allow_inet=True)[-1].k == seccomp.KILL_PROCESS
    assert len(seccomp.program(machine, (1023,), True)) == len(modes["all"])

    def socket(mode, *args):
        return run_filter(modes[mode], machine, nr["socket"], *args)

    for mode in seccomp.INET_MODES:
        assert socket(mode, AF_UNIX, SOCK_STREAM, 0) == EACCES
        for family, protocol in ((AF_VSOCK, 0), (AF_PACKET, 0x300), (AF_NETLINK, NETLINK_AUDIT)):
            assert socket(mode, family, SOCK_RAW, protocol) == EAFNOSUPPORT, (mode, family)
        for protocol in (NETLINK_SOCK_DIAG, NETLINK_KOBJECT_UEVENT):
            assert socket(mode, AF_NETLINK, SOCK_RAW, protocol) == EAFNOSUPPORT
        socketpair = nr["socketpair"]
        for kind in (SOCK_STREAM, SOCK_SEQPACKET, SOCK_STREAM | SOCK_CLOEXEC):
            assert run_filter(modes[mode], machine, socketpair, AF_UNIX, kind) == seccomp.ALLOW
        assert run_filter(modes[mode], machine, socketpair, AF_UNIX, SOCK_DGRAM) == EACCES
        assert run_filter(modes[mode], machine, socketpair, AF_INET, SOCK_STREAM) == EAFNOSUPPORT
    for family in (AF_INET, AF_INET6):
        assert socket("none", family, SOCK_STREAM, 0) == EAFNOSUPPORT
        for kind in (SOCK_STREAM, SOCK_DGRAM, SOCK_RAW):
            assert socket("all", family, kind, 0) == seccomp.ALLOW
        assert socket("stream", family, SOCK_STREAM | SOCK_CLOEXEC, 0) == seccomp.ALLOW
        assert socket("stream", family, SOCK_STREAM, 6) == seccomp.ALLOW  # IPPROTO_TCP
        assert socket("stream", family, SOCK_STREAM, 132) == EACCES  # SCTP
        assert socket("stream", family, SOCK_DGRAM, 0) == EACCES
    assert socket("none", AF_NETLINK, SOCK_RAW, NETLINK_ROUTE) == EAFNOSUPPORT
    for mode in ("stream", "all"):  # gloo finds the loopback's address with getifaddrs
        assert socket(mode, AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE) == seccomp.ALLOW
    program = modes["none"]
    assert run_filter(program, machine, nr["clone"], CLONE_THREAD_FLAGS) == seccomp.ALLOW
    assert run_filter(program, machine, nr["clone"], 17) == seccomp.ALLOW  # fork: SIGCHLD
    for flag in (CLONE_NEWUSER, CLONE_NEWNET):
        assert run_filter(program, machine, nr["clone"], 17 | flag) == EPERM
    assert run_filter(program, machine, nr["prlimit64"], 0, 7) == seccomp.ALLOW
    assert run_filter(program, machine, nr["prlimit64"], 1, 7) == EPERM
    assert run_filter(program, machine, nr["close"], 1023) == EPERM
    assert run_filter(program, machine, nr["close"], 5) == seccomp.ALLOW
    assert run_filter(program, machine, nr["dup3"], 5, 1023, 0) == EPERM
    assert run_filter(program, machine, nr["fcntl"], 1023, 2) == EPERM  # F_SETFD
    assert run_filter(program, machine, nr["fcntl"], 1023, 3) == seccomp.ALLOW  # F_GETFL
    assert run_filter(program, machine, nr["ioctl"], 1023, 0x5450) == EPERM  # FIONCLEX


def test_the_tables_name_every_call_on_x86_64_and_all_but_legacy_ones_on_arm64():
    listed = [n for group in ALLOWED.values() for n in group]
    listed += [*NOT_PERMITTED, *NOT_SUPPORTED]
    assert len(listed) == len(set(listed))
    assert set(listed) <= set(NUMBERS["x86_64"])
    legacy = {"open", "stat", "lstat", "fork", "vfork", "dup2", "pipe", "poll", "select"}
    legacy |= {"getdents", "readlink", "unlink", "rename", "mkdir", "rmdir", "chmod", "time"}
    missing = set(listed) - set(NUMBERS["aarch64"])
    assert legacy <= missing and "arch_prctl" in missing
    assert {"openat", "newfstatat", "fstat", "getdents64", "clone", "rseq"}.isdisjoint(missing)
    with pytest.raises(ValueError):
        seccomp.program("x86_64", inet="udp")


# ------------------------------------------------------------------------ on this machine


HELPERS = """
import ctypes, errno, os, socket
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def refused(call, expected):
    try:
        call()
    except OSError as error:
        assert error.errno == expected, (call, error)
        return
    raise AssertionError(f"{call} was allowed")
def syscall_fails(nr, expected, *args):
    assert libc.syscall(nr, *args) == -1, nr
    assert ctypes.get_errno() == expected, (nr, ctypes.get_errno())
"""


def in_filtered_child(code: str, install: str = "", env: dict | None = None):
    """Run ``code`` in a fresh Python (a child of this one) after installing the filter
    with the keyword arguments ``install``; :data:`HELPERS` are defined for it."""
    script = f"from coursekit.grading.sandbox import seccomp\nassert seccomp.install({install})\n"
    script += HELPERS
    return subprocess.run(
        [sys.executable, "-c", script + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=600,  # against a hang only; nothing here depends on how fast it runs
        env={**os.environ, **(env or {})},
    )


@on_this_machine
def test_sockets_of_other_families_are_refused():
    done = in_filtered_child(
        """
        for family, kind, proto in [(socket.AF_VSOCK, socket.SOCK_STREAM, 0),
                                    (socket.AF_NETLINK, socket.SOCK_RAW, 0),
                                    (socket.AF_NETLINK, socket.SOCK_DGRAM, 15),
                                    (socket.AF_PACKET, socket.SOCK_RAW, 0x300),
                                    (socket.AF_INET, socket.SOCK_STREAM, 0),
                                    (socket.AF_INET6, socket.SOCK_DGRAM, 0)]:
            refused(lambda: socket.socket(family, kind, proto), errno.EAFNOSUPPORT)
        refused(lambda: socket.if_nameindex(), errno.EAFNOSUPPORT)  # netlink underneath
        refused(lambda: socket.socket(socket.AF_UNIX), errno.EACCES)
        refused(lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM), errno.EACCES)
        a, b = socket.socketpair()  # AF_UNIX, stream: multiprocessing needs these
        a.sendall(b"x")
        assert b.recv(1) == b"x"
        socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        print("refused all")
        """
    )
    assert done.returncode == 0 and "refused all" in done.stdout, done.stderr


@on_this_machine
def test_unknown_and_new_system_calls_are_refused_with_enosys():
    machine = os.uname().machine
    nr = {**NUMBERS[machine], **NOT_LISTED[machine]}
    done = in_filtered_child(
        f"""
        AT_FDCWD, OPEN_TREE_CLONE, AT_RECURSIVE = -100, 1, 0x8000
        attr = ctypes.create_string_buffer(64)
        syscall_fails(467, errno.ENOSYS, AT_FDCWD, b"/", OPEN_TREE_CLONE | AT_RECURSIVE, attr, 32)
        for number in (463, 468, 469, 470, 500, 1000, 2**20):
            syscall_fails(number, errno.ENOSYS, 0, 0, 0)
        syscall_fails({nr["setuid"]}, errno.ENOSYS, 0)  # not listed
        syscall_fails({nr["personality"]}, errno.ENOSYS, 0xFFFFFFFF)
        syscall_fails({nr["open_tree"]}, errno.EPERM, AT_FDCWD, b"/", OPEN_TREE_CLONE)
        syscall_fails({nr["ptrace"]}, errno.EPERM, 0, 0, 0, 0)  # PTRACE_TRACEME
        syscall_fails({nr["prlimit64"]}, errno.EPERM, 1, 7, None, attr)  # another process
        assert libc.unshare(0x10000000) == -1 and ctypes.get_errno() == errno.EPERM
        # CLONE_PARENT | SIGCHLD: a sibling, outside the tree the runner watches
        syscall_fails({nr["clone"]}, errno.EPERM, 0x8000 | 17, 0, 0, 0, 0)
        syscall_fails(425, errno.ENOSYS, 4, attr)  # io_uring_setup
        import resource  # this process's own limits: prlimit64(0, ...)
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        print("refused all")
        """
    )
    assert done.returncode == 0 and "refused all" in done.stdout, done.stderr


EVERYDAY = """
import os, subprocess, sys, tempfile, threading
folder = tempfile.mkdtemp()
os.environ["MPLCONFIGDIR"] = os.path.join(folder, "mpl")  # a font cache built under the filter
import numpy as np
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
for _ in range(2):
    loss = model(torch.randn(32, 8)).pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
torch.set_num_threads(2)  # OpenMP threads
assert torch.isfinite(torch.randn(128, 128) @ torch.randn(128, 128)).all()
assert np.isfinite(np.linalg.svd(np.random.default_rng(0).normal(size=(64, 64)))[1]).all()
seen = []
thread = threading.Thread(target=lambda: seen.append(threading.get_native_id()))
thread.start()
thread.join()
assert seen
pid = os.fork()
if pid == 0:
    os._exit(7)
assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 7
assert subprocess.run(["true"]).returncode == 0
assert subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True,
                      text=True).stdout.strip() == "42"
path = os.path.join(folder, "notes.txt")
with open(path, "w") as handle:
    handle.write("accumulate")
os.rename(path, path + ".old")
assert open(path + ".old").read() == "accumulate" and "notes.txt.old" in os.listdir(folder)
torch.save(model.state_dict(), os.path.join(folder, "model.pt"))
model.load_state_dict(torch.load(os.path.join(folder, "model.pt")))
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
plt.plot([1, 2, 3], [3, 1, 2])
plt.title("loss")
plt.savefig(os.path.join(folder, "plot.png"))
assert os.path.getsize(os.path.join(folder, "plot.png")) > 0
print("everyday work done")
"""


@on_this_machine
@pytest.mark.slow  # torch, matplotlib and a process pool in a child: seconds each
@pytest.mark.parametrize("inet", ["none", "all"])
def test_an_everyday_workload_runs_under_the_filter(inet):
    done = in_filtered_child(EVERYDAY, install=f"inet={inet!r}")
    assert done.returncode == 0 and "everyday work done" in done.stdout, done.stderr[-3000:]


GLOO = """
import os, socket, tempfile
import torch
import torch.distributed as dist
store = dist.FileStore(os.path.join(tempfile.mkdtemp(), "store"), 1)
if {allowed}:
    for family, kind, proto in [(socket.AF_VSOCK, socket.SOCK_STREAM, 0),
                                (socket.AF_PACKET, socket.SOCK_RAW, 0),
                                (socket.AF_NETLINK, socket.SOCK_RAW, 15)]:  # KOBJECT_UEVENT
        refused(lambda: socket.socket(family, kind, proto), errno.EAFNOSUPPORT)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    total = torch.ones(3)
    dist.all_reduce(total)
    ddp = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
    ddp(torch.randn(2, 4)).sum().backward()
    dist.destroy_process_group()
    print("gloo group ran", total.tolist(), flush=True)
    # ended as a hand-in's process ends (runner.py: os._exit, no interpreter teardown). On a
    # loaded machine, teardown after gloo sometimes aborts in torch's C++ ("terminate called
    # without an active exception", SIGABRT), after the group ran: not the filter's doing.
    os._exit(0)
else:
    try:
        socket.socket(socket.AF_INET)
    except OSError as error:
        assert error.errno == 97, error  # EAFNOSUPPORT
    else:
        raise AssertionError("an AF_INET socket was allowed")
    try:
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    except RuntimeError as error:
        print("gloo refused:", error)
"""


@on_this_machine
@pytest.mark.slow
@pytest.mark.parametrize("install", ["allow_inet=True", "inet='stream'"])
def test_a_one_process_gloo_group_runs_where_sockets_are_allowed(install):
    done = in_filtered_child(
        GLOO.format(allowed=True), install=install, env={"GLOO_SOCKET_IFNAME": "lo"}
    )
    assert done.returncode == 0 and "gloo group ran [1.0, 1.0, 1.0]" in done.stdout, done.stderr[
        -3000:
    ]


@on_this_machine
def test_without_allow_inet_there_is_no_inet_socket_and_no_gloo_group():
    done = in_filtered_child(
        GLOO.format(allowed=False), install="allow_inet=False", env={"GLOO_SOCKET_IFNAME": "lo"}
    )
    assert done.returncode == 0 and "gloo refused" in done.stdout, done.stderr[-3000:]
