"""Issue 40: a measured fork cannot give back the memory it started with, nor reuse what its
parent had freed (:mod:`coursekit.grading.sandbox.seccomp_measured`,
:mod:`coursekit.checks.heap_plug`).

Each test forks: the filter goes on the child alone, which reports what the kernel
answered, as JSON on a pipe, and ends.
"""

from __future__ import annotations

import ctypes
import json
import os
import socket
import tempfile

import pytest
import torch

from coursekit.checks import heap_plug
from coursekit.grading.sandbox import seccomp_measured
from coursekit.grading.sandbox.seccomp import NUMBERS

pytestmark = pytest.mark.skipif(
    not (hasattr(os, "fork") and os.uname().machine in NUMBERS), reason="Linux x86_64/arm64"
)
_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.mmap.restype = ctypes.c_void_p
_LIBC.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t] + [ctypes.c_int] * 3 + [ctypes.c_long]
_LIBC.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_LIBC.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_LIBC.syscall.restype = ctypes.c_long
_LIBC.malloc.restype, _LIBC.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
_LIBC.free.argtypes = [ctypes.c_void_p]
PAGE, MIB = 4096, 2**20
PROT_RW, MAP_PRIVATE_ANON, MAP_FIXED = 3, 0x22, 0x10


def _anonymous(size: int) -> int:
    return _LIBC.mmap(None, size, PROT_RW, MAP_PRIVATE_ANON, -1, 0)


def _in_a_filtered_fork(body) -> dict:
    """``body()``'s dict, computed in a child with the measured fork's filter on."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - reported through the pipe
        code = 0
        try:
            os.close(read_end)
            seccomp_measured.install_measured_fork_filter()
            os.write(write_end, json.dumps(body()).encode())
        except BaseException as error:  # noqa: BLE001
            os.write(write_end, json.dumps({"raised": repr(error)}).encode())
            code = 1
        finally:
            os._exit(code)
    os.close(write_end)
    data = b""
    while chunk := os.read(read_end, 65536):
        data += chunk
    os.close(read_end)
    os.waitpid(pid, 0)
    return json.loads(data)


def _answer(result: int) -> str:
    """``ok``, or the errno's name, for a libc call's result (-1 or MAP_FAILED: an error)."""
    if result in (-1, 2**64 - 1):
        return os.strerror(ctypes.get_errno())
    return "ok"


def test_the_memory_it_started_with_cannot_be_given_back():
    inherited = _anonymous(MIB)
    ctypes.memset(inherited, 1, MIB)

    def body():
        new = _anonymous(MIB)
        return {
            "munmap inherited": _answer(_LIBC.munmap(inherited, MIB)),
            "munmap its tail": _answer(_LIBC.munmap(inherited + MIB - PAGE, PAGE)),
            "munmap from below into it": _answer(_LIBC.munmap(inherited - 4 * PAGE, 8 * PAGE)),
            "MAP_FIXED over it": _answer(
                _LIBC.mmap(inherited, PAGE, PROT_RW, MAP_PRIVATE_ANON | MAP_FIXED, -1, 0)
            ),
            "madvise DONTNEED": _answer(_LIBC.madvise(inherited, MIB, 4)),
            "madvise FREE": _answer(_LIBC.madvise(inherited, MIB, 8)),
            "madvise PAGEOUT": _answer(_LIBC.madvise(inherited, MIB, 21)),
            "madvise WILLNEED": _answer(_LIBC.madvise(inherited, MIB, 3)),
            "munmap its own": _answer(_LIBC.munmap(new, MIB)),
        }

    answers = _in_a_filtered_fork(body)
    refused = os.strerror(1)  # EPERM
    assert answers == {
        "munmap inherited": refused,
        "munmap its tail": refused,
        "munmap from below into it": refused,
        "MAP_FIXED over it": refused,
        "madvise DONTNEED": refused,
        "madvise FREE": refused,
        "madvise PAGEOUT": refused,
        "madvise WILLNEED": "ok",
        "munmap its own": "ok",
    }
    _LIBC.munmap(inherited, MIB)


def _refused(action) -> str:
    """What ``action()`` met: ``ok``, or the error's words."""
    try:
        action()
    except OSError as error:
        return error.strerror or str(error)
    return "ok"


def test_no_process_no_shared_memory_no_store_outside_no_break_below_the_heap(tmp_path):
    numbers = NUMBERS[os.uname().machine]
    existing = tmp_path / "written-before"
    existing.write_bytes(b"x")

    def body():
        heap_end = _LIBC.syscall(numbers["brk"], 0)
        return {
            "brk asked": heap_end > 0,
            "brk lowered": _LIBC.syscall(numbers["brk"], ctypes.c_long(heap_end - PAGE)),
            "process_madvise": _answer(_LIBC.syscall(seccomp_measured.PROCESS_MADVISE, 0)),
            "io_uring_setup": _answer(_LIBC.syscall(numbers["io_uring_setup"], 1, 0)),
            "mmap shared": _answer(_LIBC.mmap(None, PAGE, PROT_RW, 0x21, -1, 0)),
            "fork": _answer(_LIBC.fork()),
            "execve": _refused(lambda: os.execv("/bin/true", ["true"])),
            "pipe": _refused(os.pipe),
            "socketpair": _refused(socket.socketpair),
            "create a file": _refused(lambda: os.open(tmp_path / "new", os.O_WRONLY | os.O_CREAT)),
            "open one to write": _refused(lambda: os.open(existing, os.O_RDWR)),
            "open one to append": _refused(lambda: os.open(existing, os.O_WRONLY | os.O_APPEND)),
            "a temporary file": _refused(lambda: tempfile.TemporaryFile(dir=tmp_path)),
            "open one to read": _refused(lambda: os.close(os.open(existing, os.O_RDONLY))),
        }

    answers = _in_a_filtered_fork(body)
    refused = os.strerror(1)
    assert answers.pop("brk asked") is True
    assert answers.pop("brk lowered") == -1  # the raw call: -EPERM
    assert answers.pop("open one to read") == "ok"
    assert answers == dict.fromkeys(answers, refused)


def test_hundreds_of_kept_mappings_make_a_program_the_kernel_takes():
    """Each kept range is a block of its own (a jump reaches 255 instructions at most)."""
    machine = os.uname().machine
    kept = [(0x7F0000000000 + i * 2 * MIB, 0x7F0000000000 + i * 2 * MIB + MIB) for i in range(300)]
    program = seccomp_measured.measured_fork_program(machine, kept, heap_end=0x560000000000)
    assert len(program) < 4096


def test_the_fork_takes_what_its_parent_freed_before_its_call():
    """Blocks freed into malloc's heap before a fork are resident and shared with it: once
    plugged, a new block comes from memory of the fork's own. (In a child, whose malloc is
    set never to trim, with 48 MiB freed into its heap.)"""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - reported through the pipe
        try:
            _LIBC.mallopt(-1, 2**30)  # M_TRIM_THRESHOLD
            _LIBC.mallopt(-3, 32 * MIB)  # M_MMAP_THRESHOLD: 1 MiB blocks from the heap
            freed = [torch.ones(2**17, dtype=torch.float64) for _ in range(48)]
            del freed
            kept, _ = seccomp_measured.own_mappings()

            def inherited(address: int) -> bool:
                return any(low <= address < high for low, high in kept)

            probe = _LIBC.malloc(8 * MIB)
            before = inherited(probe)
            _LIBC.free(ctypes.c_void_p(probe))
            taken = heap_plug.plug(kept)
            after = inherited(_LIBC.malloc(8 * MIB))
            os.write(write_end, json.dumps([before, taken, after]).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    before, taken, after = json.loads(os.read(read_end, 4096))
    os.close(read_end)
    os.waitpid(pid, 0)
    assert before is True and taken >= 40 * MIB and after is False
