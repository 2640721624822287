"""The seccomp filter of a fork whose memory is measured (:mod:`coursekit.checks.memory_peak`).

Stacked on any filter already there, it keeps the kernel's counts of the fork's memory
honest:

- threads, which share the address space the kernel counts, and no process: ``fork``,
  ``vfork`` and a ``clone`` without ``CLONE_THREAD`` are refused with EPERM, ``clone3``
  with ENOSYS (libc's ``pthread_create`` then falls back to ``clone``);
- no new shared memory (``mmap`` with ``MAP_SHARED``, ``memfd_create``, ``shmat``): a shared
  file's pages come from the page cache, which writes fill with no page fault of the
  process's, and are mapped sixteen at a time on a fault;
- nowhere to keep data outside its own memory, where the kernel does not count it (the
  second hostile review of issue 40 kept a whole window's saved activations, through
  ``torch.autograd.graph.saved_tensors_hooks``, in pipes, in a socket pair's buffers and in
  a file, and passed at 1.6 MiB): no pipe, socket, message queue, key, ``userfaultfd``,
  ``bpf`` or ``perf_event_open``; no file opened for writing (``open`` and ``openat``
  with a flag that writes, creates or truncates; ``creat`` and ``openat2``, whose flags
  the filter cannot read), no file, folder or link made or renamed and no extended attribute
  set (a link's target, a name, an attribute: data the kernel keeps); no ``ptrace`` or
  ``process_vm_writev`` into another process;
  and no ``execve``, whose new image's peak the old image's would hide;
- none of the memory it started with given back: the high-water mark of its resident size
  is one of the two measures, and memory the notebook held, returned to the kernel, would
  leave room under it. ``munmap``, ``mremap`` and ``mmap`` with ``MAP_FIXED`` whose range
  meets one of ``kept`` (the mappings the fork had when the filter went on), and ``brk``
  below the heap's end then, are refused with EPERM; so are ``madvise`` with any advice
  but the harmless ones (``MADV_DONTNEED``, ``MADV_FREE``, ``MADV_PAGEOUT``... drop pages),
  ``process_madvise`` and ``io_uring_setup`` (whose operations include ``madvise``). malloc
  ignores a refused ``munmap`` (the block stays mapped, and counted); a freed block of
  the fork's own, mapped after the filter, is given back as usual.

The ranges are compared as 64-bit numbers (two 32-bit halves: classic BPF's words), and a
range meets another when each starts before the other ends: ``[addr, addr + len)`` is
computed with its carry, so a call that starts below a kept mapping and runs into it is
refused too.
"""

from __future__ import annotations

import os

from coursekit.grading.sandbox.seccomp import (
    _ARCH,
    _AUDIT_ARCH,
    _ERRNO,
    _JEQ_K,
    _JGE_K,
    _JSET_K,
    _NR,
    ALLOW,
    CLONE_THREAD,
    ENOSYS,
    EPERM,
    KILL_PROCESS,
    MAP_SHARED,
    NUMBERS,
    _arg,
    _load,
    _Program,
    _SockFilter,
)

MAP_FIXED, MREMAP_FIXED = 0x10, 0x02
PROCESS_MADVISE = 440  # the same number on x86_64 and arm64
# O_WRONLY, O_RDWR, O_CREAT, O_TRUNC, O_APPEND and __O_TMPFILE (the same on both machines)
WRITE_FLAGS = 0o1 | 0o2 | 0o100 | 0o1000 | 0o2000 | 0o20000000
# refused with EPERM; the numbers syscall_numbers.py has no name for are added here
ELSEWHERE = (
    "execve",
    "execveat",
    "pipe",
    "pipe2",
    "socket",
    "socketpair",
    "creat",
    "openat2",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "add_key",
    "keyctl",
    "userfaultfd",
    "bpf",
    "perf_event_open",
    "splice",
    "tee",
    # names, link targets and extended attributes hold data in the kernel's memory, not the
    # process's: a symlink's target keeps 4 KiB (third hostile review of issue 40)
    "symlink",
    "symlinkat",
    "link",
    "linkat",
    "rename",
    "renameat",
    "renameat2",
    "mknod",
    "mknodat",
    "mkdir",
    "mkdirat",
    "setxattr",
    "lsetxattr",
    "fsetxattr",
)
_MORE_NUMBERS = {  # msgget, msgsnd, mq_open, vmsplice, memfd_secret, shmget
    "x86_64": (68, 69, 240, 278, 447, 29),
    "aarch64": (186, 189, 180, 75, 447, 194),
}
# madvise's advice that leaves every page where it was: the rest drop or reclaim pages
HARMLESS_ADVICE = (0, 1, 2, 3, 10, 11, 14, 15, 16, 17, 22, 23)

# classic BPF beyond seccomp.py's: scratch memory, the X register, addition, long jumps
_ST, _LD_MEM, _LDX_MEM = 0x02, 0x60, 0x61
_ADD_X, _ADD_K, _JA, _JGE_X, _JGT_K = 0x0C, 0x04, 0x05, 0x3D, 0x25
_ADDR_LO, _ADDR_HI, _END_LO, _END_HI, _LEN_LO = 0, 1, 2, 3, 4  # scratch words


class _Assembler(_Program):
    """seccomp.py's assembler, with scratch memory, addition and unconditional long jumps."""

    def store(self, slot: int) -> None:
        self.code.append((_ST, 0, 0, slot))

    def load_slot(self, slot: int) -> None:
        self.code.append((_LD_MEM, 0, 0, slot))

    def load_x(self, slot: int) -> None:
        self.code.append((_LDX_MEM, 0, 0, slot))

    def add_x(self) -> None:
        self.code.append((_ADD_X, 0, 0, 0))

    def add(self, value: int) -> None:
        self.code.append((_ADD_K, 0, 0, value))

    def jump_always(self, target: str) -> None:
        self.code.append((_JA, 0, 0, target))

    def assemble(self) -> list[_SockFilter]:
        resolved = []
        for at, (op, true, false, value) in enumerate(self.code):
            if op == _JA:
                value = self.labels[value] - at - 1
            resolved.append((op, true, false, value))
        self.code = resolved
        return super().assemble()


def _hi(value: int) -> int:
    return (value >> 32) & 0xFFFFFFFF


def _lo(value: int) -> int:
    return value & 0xFFFFFFFF


def _range_of(p: _Assembler, addr_arg: int, len_arg: int) -> None:
    """Scratch words: the call's range ``[addr, addr + len)``, as 64-bit halves; then on to
    the kept ranges' test."""
    p.load(_arg(addr_arg))
    p.store(_ADDR_LO)
    p.load(_arg(addr_arg) + 4)
    p.store(_ADDR_HI)
    p.load(_arg(len_arg))
    p.store(_LEN_LO)
    p.load_x(_ADDR_LO)
    p.add_x()  # A = lo(addr) + lo(len), modulo 2**32
    p.store(_END_LO)
    n = len(p.code)
    p.jump(_JGE_X, 0, f"no_carry{n}", f"carry{n}")  # lo(end) >= lo(addr): no carry
    p.label(f"carry{n}")
    p.load(_arg(len_arg) + 4)
    p.add(1)
    p.jump_always(f"high{n}")
    p.label(f"no_carry{n}")
    p.load(_arg(len_arg) + 4)
    p.label(f"high{n}")
    p.load_x(_ADDR_HI)
    p.add_x()
    p.store(_END_HI)
    p.jump_always("kept")


def _meets(p: _Assembler, index: int, start: int, end: int) -> None:
    """EPERM when the call's range meets ``[start, end)``: addr < end and addr + len > start
    (each block returns on its own: a jump reaches at most 255 instructions)."""
    following, refuse = f"range{index + 1}", f"refuse{index}"
    p.label(f"range{index}")
    p.load_slot(_ADDR_HI)
    p.jump(_JGT_K, _hi(end), following, 0)
    p.jump(_JEQ_K, _hi(end), 0, f"end_above{index}")  # hi(addr) < hi(end): below its end
    p.load_slot(_ADDR_LO)
    p.jump(_JGE_K, _lo(end), following, 0)
    p.label(f"end_above{index}")
    p.load_slot(_END_HI)
    p.jump(_JGT_K, _hi(start), refuse, 0)
    p.jump(_JEQ_K, _hi(start), 0, following)
    p.load_slot(_END_LO)
    p.jump(_JGT_K, _lo(start), refuse, following)
    p.label(refuse)
    p.ret(_ERRNO | EPERM)


def measured_fork_program(
    machine: str, kept: list[tuple[int, int]] = (), heap_end: int = 0
) -> list[_SockFilter]:
    """The filter (see the module's text). ``kept``: ``(start, end)`` of the mappings whose
    memory must stay; ``heap_end``: the program break below which ``brk`` is refused."""
    nr = NUMBERS[machine]
    p = _Assembler()
    p.load(_ARCH)
    for slot in (_ADDR_LO, _ADDR_HI, _END_LO, _END_HI, _LEN_LO):
        p.store(slot)  # the kernel's check: every scratch word written before any read
    p.jump(_JEQ_K, _AUDIT_ARCH[machine], 0, "kill")
    p.load(_NR)
    for name in ("fork", "vfork", "memfd_create", "shmat", "io_uring_setup", *ELSEWHERE):
        if name in nr:  # arm64 has no fork, vfork, pipe or creat
            p.jump(_JEQ_K, nr[name], "eperm", 0)
    for number in (PROCESS_MADVISE, *_MORE_NUMBERS[machine]):
        p.jump(_JEQ_K, number, "eperm", 0)
    p.jump(_JEQ_K, nr["clone3"], "enosys", 0)
    for name in ("mmap", "munmap", "mremap", "madvise", "brk", "clone", "openat"):
        p.jump(_JEQ_K, nr[name], name, 0)
    if "open" in nr:
        p.jump(_JEQ_K, nr["open"], "open", 0)
    p.jump_always("allow")

    p.label("open")  # (path, flags, mode)
    p.load(_arg(1))
    p.jump(_JSET_K, WRITE_FLAGS, "eperm", "allow")

    p.label("openat")  # (dirfd, path, flags, mode)
    p.load(_arg(2))
    p.jump(_JSET_K, WRITE_FLAGS, "eperm", "allow")

    p.label("clone")
    p.load(_arg(0))
    p.jump(_JSET_K, CLONE_THREAD, "allow", "eperm")

    p.label("madvise")  # (addr, length, advice)
    p.load(_arg(2))
    for advice in HARMLESS_ADVICE:
        p.jump(_JEQ_K, advice, "allow", 0)
    p.jump_always("eperm")

    p.label("brk")  # brk(0) asks; a break below the heap's end would give pages back
    p.load(_arg(0) + 4)
    p.jump(_JGT_K, _hi(heap_end), "allow", 0)
    p.jump(_JEQ_K, _hi(heap_end), 0, "brk_low")
    p.load(_arg(0))
    p.jump(_JGE_K, _lo(heap_end), "allow", 0)
    p.label("brk_low")
    p.load(_arg(0) + 4)
    p.jump(_JEQ_K, 0, 0, "eperm")
    p.load(_arg(0))
    p.jump(_JEQ_K, 0, "allow", "eperm")

    p.label("mmap")  # (addr, length, prot, flags, fd, offset)
    p.load(_arg(3))
    p.jump(_JSET_K, MAP_SHARED, "eperm", 0)
    p.jump(_JSET_K, MAP_FIXED, 0, "allow")
    _range_of(p, 0, 1)

    p.label("mremap")  # (old_address, old_size, new_size, flags, new_address)
    p.load(_arg(3))
    p.jump(_JSET_K, MREMAP_FIXED, "eperm", 0)
    _range_of(p, 0, 1)

    p.label("munmap")  # (addr, length)
    _range_of(p, 0, 1)

    p.label("allow")
    p.ret(ALLOW)
    p.label("eperm")
    p.ret(_ERRNO | EPERM)
    p.label("enosys")
    p.ret(_ERRNO | ENOSYS)
    p.label("kill")
    p.ret(KILL_PROCESS)

    p.label("kept")  # last: every jump goes forward, and the ranges are many
    for index, (start, end) in enumerate(kept):
        _meets(p, index, start, end)
    p.label(f"range{len(kept)}")
    p.ret(ALLOW)
    return p.assemble()


def own_mappings() -> tuple[list[tuple[int, int]], int]:
    """This process's mappings (adjacent ones merged) and its heap's end, from its own
    ``/proc`` folder; ``([], 0)`` where it cannot be read."""
    ranges: list[list[int]] = []
    heap_end = 0
    try:
        with open(f"/proc/{os.getpid()}/maps") as handle:
            for line in handle:
                fields = line.split()
                start, _, end = fields[0].partition("-")
                low, high = int(start, 16), int(end, 16)
                if fields[-1] == "[heap]":
                    heap_end = high
                if fields[-1] == "[vsyscall]":  # above user space: no call can meet it
                    continue
                if ranges and ranges[-1][1] == low:
                    ranges[-1][1] = high
                else:
                    ranges.append([low, high])
    except (OSError, ValueError, IndexError):
        return [], 0
    return [(low, high) for low, high in ranges], heap_end


def install_measured_fork_filter() -> bool:
    """Install :func:`measured_fork_program` on this process (one thread: a fork's child),
    keeping every mapping it has now; False on an unknown machine. Raises OSError when the
    kernel refuses it."""
    machine = os.uname().machine
    if machine not in NUMBERS:
        return False
    kept, heap_end = own_mappings()
    _load(measured_fork_program(machine, kept, heap_end), flags=0)
    return True
