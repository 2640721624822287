"""Run a command as a container's root would run it:
``python -m tests.helpers.docker_like [--old] -- CMD``.

Docker's default seccomp profile (and Gradescope's container, and most Kubernetes pods) keeps
root from making namespaces: ``unshare`` and ``setns`` fail with EPERM, ``clone`` with any
namespace flag too, and ``clone3`` with ENOSYS (so libc falls back to ``clone``); cgroups are
mounted read-only. Profiles older than Linux 5.13's Landlock refuse its system calls as
well (``--old``). This wrapper sets that up for the command and everything it starts:

1. in a mount namespace of its own (the only one it makes, before the filter), it makes
   ``/sys/fs/cgroup`` read-only and, as a container's image would have it, makes the
   interpreter readable by every user: root's own 0700 folders (``/root`` holds pyenv here)
   get an empty tmpfs with only the paths the command needs bound back (see
   tests/helpers/as_user.py);
2. it installs a seccomp filter that answers as Docker's profile does, with no_new_privs;
3. it runs the command, as root.

Linux only; needs root. :func:`run` is what tests call.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers.as_user import MS_BIND, expose

MS_RDONLY, MS_REMOUNT = 1, 32
EPERM, ENOSYS = 1, 38
NAMESPACE_FLAGS = 0x7E020000  # CLONE_NEW{NS,CGROUP,UTS,IPC,USER,PID,NET}
_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
LANDLOCK = (444, 445, 446)  # create_ruleset, add_rule, restrict_self: the same on both
_NUMBERS = {  # unshare, setns, clone, clone3
    "x86_64": {"unshare": 272, "setns": 308, "clone": 56, "clone3": 435},
    "aarch64": {"unshare": 97, "setns": 268, "clone": 220, "clone3": 435},
}
REPO = Path(__file__).resolve().parents[2]


class _Filter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_ushort),
        ("jt", ctypes.c_ubyte),
        ("jf", ctypes.c_ubyte),
        ("k", ctypes.c_uint32),
    ]


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Filter))]


def _bpf(code: int, k: int, jt: int = 0, jf: int = 0) -> _Filter:
    return _Filter(code, jt, jf, k)


LD_W_ABS, JEQ, JSET, RET = 0x20, 0x15, 0x45, 0x06
ALLOW, ERRNO = 0x7FFF0000, 0x00050000


def docker_profile(machine: str, old: bool) -> list[_Filter]:
    """The part of Docker's default profile that grading meets, as classic BPF."""
    nr = _NUMBERS[machine]
    refused = [(nr["unshare"], EPERM), (nr["setns"], EPERM), (nr["clone3"], ENOSYS)]
    if old:
        refused += [(number, EPERM) for number in LANDLOCK]
    program = [_bpf(LD_W_ABS, 4), _bpf(JEQ, _ARCH[machine], 1, 0), _bpf(RET, ALLOW)]
    program.append(_bpf(LD_W_ABS, 0))  # the system call's number
    for number, errno in refused:
        program += [_bpf(JEQ, number, 0, 1), _bpf(RET, ERRNO | errno)]
    # clone: its flags are the first argument on both machines
    program += [_bpf(JEQ, nr["clone"], 0, 3), _bpf(LD_W_ABS, 16), _bpf(JSET, NAMESPACE_FLAGS, 0, 1)]
    program += [_bpf(RET, ERRNO | EPERM), _bpf(RET, ALLOW)]
    return program


def install(old: bool) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "no_new_privs")
    instructions = docker_profile(os.uname().machine, old)
    array = (_Filter * len(instructions))(*instructions)
    program = _Program(len(instructions), array)
    if libc.prctl(22, 2, ctypes.byref(program), 0, 0) != 0:  # PR_SET_SECCOMP, FILTER
        raise OSError(ctypes.get_errno(), "seccomp")


def _read_only_cgroups(libc) -> None:
    target = b"/sys/fs/cgroup"
    if os.path.isdir(target) and libc.mount(target, target, None, MS_BIND, None) == 0:
        libc.mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY, None)


def main(argv: list[str]) -> None:
    old = "--old" in argv[: argv.index("--")]
    command = argv[argv.index("--") + 1 :]
    needed = [Path(sys.base_prefix), Path(sys.prefix), REPO]
    needed += [Path(p) for p in os.environ.get("AS_USER_PATHS", "").split(os.pathsep) if p]
    expose([p.resolve() for p in needed])
    _read_only_cgroups(ctypes.CDLL(None, use_errno=True))
    install(old)
    os.execvp(command[0], command)


def available() -> str | None:
    """Why the Docker-like mode cannot be made here, or None."""
    if not sys.platform.startswith("linux") or os.uname().machine not in _NUMBERS:
        return "the Docker-like mode is Linux's, on x86-64 or arm64"
    if os.geteuid() != 0:
        return "the Docker-like mode needs root (as CI has)"
    return None


def run(command: list[str], old: bool = False, **kwargs) -> subprocess.CompletedProcess:
    """Run ``command`` in the Docker-like mode (see the module's docstring)."""
    start = f"import sys; sys.path.insert(0, {str(REPO)!r}); "
    start += "from tests.helpers.docker_like import main"
    wrapper = [sys.executable, "-c", f"{start}; main(sys.argv[1:])"]
    wrapper += [*(["--old"] if old else []), "--"]
    kwargs.setdefault("cwd", REPO)
    return subprocess.run([*wrapper, *command], **kwargs)


if __name__ == "__main__":
    main(sys.argv[1:])


def in_docker_like(test):
    """Run this test in the Docker-like mode: in a pytest of its own under :func:`run` (the
    outer run only starts it and reports its failure); skipped where the mode cannot be made.
    For tests of the sandbox's fallback without namespaces, as a container's root meets it."""
    import functools

    import pytest

    @functools.wraps(test)
    def wrapper(*args, **kwargs):
        if os.environ.get("COURSEKIT_DOCKER_LIKE") == "1":
            return test(*args, **kwargs)
        why = available()
        if why:
            pytest.skip(why)
        node = os.environ["PYTEST_CURRENT_TEST"].rsplit(" ", 1)[0]
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", node]
        env = {**os.environ, "COURSEKIT_DOCKER_LIKE": "1"}
        env.pop("PYTEST_ADDOPTS", None)
        done = run(command, env=env, capture_output=True, text=True)
        assert done.returncode == 0, (done.stdout[-4000:], done.stderr[-2000:])

    return wrapper
