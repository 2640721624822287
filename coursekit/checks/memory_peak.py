"""The memory a student's function takes, as the kernel counts it.

Accumulation is for memory: one micro-batch's activations alive at a time, never the
window's. The checks' hooks see which forward passes the model makes, but a function can
make its whole-batch forward on a hook-free copy of the model and bring the gradient back
behind micro-batch passes made for show. Memory cannot be shown: :func:`measured` runs the
call in a fork of its own, where

- malloc keeps what is freed and hands it out again (no trimming; blocks under 32 MiB come
  from its heap), and transparent huge pages are off, so that every page the call needs
  beyond what it reuses is a page fault of its own;
- a warm-up (one micro-batch, made by the check) touches the memory an honest micro-batch
  reuses;
- the measure is the kernel's, read by the parent from ``wait4`` once the child has ended:
  the page faults of the call (each one a page first written, or first read, in the call:
  fresh memory, or memory shared with the parent that it now copies) and its high-water
  resident size above the warm-up's. Freeing memory the notebook held before does not
  help: writing the freed pages again faults (they are still the parent's, copy on write),
  and returning them to the kernel and asking again faults too. The one way to lower the
  high-water mark, writing to ``/proc/<pid>/clear_refs``, is closed besides: the child is
  not dumpable, so that file is root's (a hand-in never runs as root), and opening it is
  flagged;
- the function can make threads, which share the memory counted, but no process and no
  shared memory (:func:`coursekit.grading.sandbox.seccomp.install_threads_only`): a shared
  file's pages come from the page cache, filled by ``write`` with no fault of the process's
  and mapped sixteen at a time, so the parent's writable shared mappings are made
  inaccessible in the fork too, and the verdict also takes the resident size's rise, which
  counts such pages; it inherits no pipe or
  socket of its parent's (each is closed in the child before its call), and the parent's own
  threads are held while it runs (the parent waits holding the GIL, so none of its Python
  runs).

What the function could still reach is a process already running beside it; the grader
ends every process the notebook left running before a measured test
(:func:`end_children`). Off Linux (no ``fork``, no ``wait4``) nothing is measured, and the
outputs say so.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import sys

# mallopt's parameters (malloc.h): blocks under 32 MiB (its largest) come from malloc's heap,
# and freed memory is never given back: an honest loop reuses one micro-batch's pages
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_MMAP_THRESHOLD, _TRIM_THRESHOLD = 32 * 2**20, 2**30
_PR_SET_THP_DISABLE = 41
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_PR_SET_DUMPABLE, _PR_SET_CHILD_SUBREAPER = 4, 36
_HEADER = 16  # after the warm-up, before any of the function's code: its peak (KiB), faults
CPU_LIMIT_S = 30  # the child's own: its parent's CPU timer does not count the child's time
MEASURED = sys.platform.startswith("linux") and hasattr(os, "fork")


class _Timeval(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("usec", ctypes.c_long)]


class _Rusage(ctypes.Structure):
    _fields_ = [
        ("utime", _Timeval),
        ("stime", _Timeval),
        ("maxrss", ctypes.c_long),
        ("ixrss", ctypes.c_long),
        ("idrss", ctypes.c_long),
        ("isrss", ctypes.c_long),
        ("minflt", ctypes.c_long),
        ("majflt", ctypes.c_long),
    ] + [(f"field{i}", ctypes.c_long) for i in range(8)]


if MEASURED:  # looked up once, on import: nothing is resolved in a hand-in's process
    _LIBC = ctypes.CDLL(None, use_errno=True)
    _MALLOPT, _PRCTL, _MPROTECT = _LIBC.mallopt, _LIBC.prctl, _LIBC.mprotect
    _WAIT4 = ctypes.PyDLL(None, use_errno=True).wait4  # PyDLL: the GIL stays held
    _WAIT4.argtypes = [
        ctypes.c_int,
        ctypes.POINTER(ctypes.c_int),
        ctypes.c_int,
        ctypes.POINTER(_Rusage),
    ]


class MeasurementFailed(RuntimeError):
    """The measurement itself failed (no fork, or the child ended before the function was
    called): the grader's failure, never the function's. The runner reports it as one, and
    the grader grades the hand-in again on a fresh process."""


def measured(call, warm_up, limit_s: int = CPU_LIMIT_S) -> dict:
    """``call()``'s outputs (a dict of plain data), computed in a fork of this process, with
    ``"fresh_memory"``: the bytes of the pages the call faulted in, and
    ``"peak_above_warm_up"``: how many bytes the child's resident size rose above the peak
    ``warm_up()`` reached. A call that failed gives ``{"error": ...}`` beside them; one
    that died gives ``{"died": ...}``; one that raised NotImplementedError (an exercise's
    stub) raises it here too, as an unmeasured call would. Off Linux: ``call()``'s outputs
    from this process, with ``{"memory": "not measured"}``."""
    if not MEASURED:
        return {**call(), "memory": "not measured"}
    inherited, shared = _open_descriptors(), _writable_shared_mappings()
    try:
        read_end, write_end = os.pipe()
        pid = os.fork()
    except OSError as error:  # no room for a process, or for its memory: the machine's
        raise MeasurementFailed(f"the memory test could not fork ({error})") from None
    if pid == 0:  # pragma: no cover - the child ends with os._exit; its work is read back
        os.close(read_end)
        for fd in inherited:  # no pipe or socket left to a process that could do the work
            if fd > 2 and fd != write_end:
                _close_quietly(fd)
        _child(call, warm_up, write_end, limit_s, shared)
    os.close(write_end)
    try:
        status, peak_kib, faults = _wait(pid)
        data = _read_all(read_end)
    finally:
        os.close(read_end)
    warm_kib = int.from_bytes(data[:8], "little") if len(data) >= _HEADER else None
    warm_faults = int.from_bytes(data[8:_HEADER], "little")
    try:
        outputs = json.loads(data[_HEADER:].decode("utf-8")) if len(data) > _HEADER else None
    except ValueError:
        outputs = None
    if not isinstance(outputs, dict):
        outputs = {"died": _how_it_ended(status)}
    if warm_kib is None:  # the warm-up itself did not finish: the check's own failure
        raise MeasurementFailed(f"the memory test's fork {_how_it_ended(status)}")
    if outputs.get("not_implemented") is True:
        raise NotImplementedError("the function is the exercise's stub")
    outputs["peak_above_warm_up"] = max(0, peak_kib - warm_kib) * 1024
    outputs["fresh_memory"] = max(0, faults - warm_faults) * _PAGE
    return outputs


def _child(call, warm_up, write_end: int, limit_s: int, shared=()) -> None:
    """In the fork: confine, warm up, record the peak so far, run ``call``, report."""
    code = 0
    try:
        for start, end in shared:  # its parent's shared memory: the page cache's, not its own
            if _MPROTECT(ctypes.c_void_p(start), ctypes.c_size_t(end - start), 0) != 0:
                raise OSError(ctypes.get_errno(), "mprotect")
        # not dumpable: its /proc files are root's, so it cannot open its own clear_refs,
        # which resets the peak the kernel counts
        _PRCTL(_PR_SET_DUMPABLE, 0, 0, 0, 0)
        os.set_blocking(write_end, False)  # filled by the function, the pipe refuses, no hang
        resource.setrlimit(resource.RLIMIT_CPU, (limit_s, limit_s))
        from coursekit.grading.sandbox import seccomp

        seccomp.install_threads_only()
        # one thread: a fork's OpenMP pool is its parent's, whose threads did not come along
        # (a parallel region would wait for them for ever); the reference runs so too
        _set_torch_threads(1)
        _PRCTL(_PR_SET_THP_DISABLE, 1, 0, 0, 0)  # a huge page would be 512 pages, one fault
        _MALLOPT(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)
        _MALLOPT(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD)
        warm_up()
        usage = resource.getrusage(resource.RUSAGE_SELF)
        header = int(usage.ru_maxrss).to_bytes(8, "little")
        header += int(usage.ru_minflt + usage.ru_majflt).to_bytes(8, "little")
        os.write(write_end, header)
        try:
            outputs = call()
        except NotImplementedError:  # the exercise as handed out: not attempted
            outputs = {"not_implemented": True}
        except BaseException as error:  # noqa: BLE001 - the function's, reported as data
            from coursekit.checks.registry import error_message

            outputs = {"error": error_message(error)}
        _write_all(write_end, json.dumps(outputs).encode("utf-8"))
    except BaseException:  # noqa: BLE001 - nothing of the child may reach its parent's code
        code = 1
    finally:
        os._exit(code)


def _set_torch_threads(count: int) -> None:
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(count)


def _wait(pid: int) -> tuple[int, int, int]:
    """Wait for the child, holding the GIL (no Python of this process runs meanwhile);
    its wait status, peak resident size in KiB, and page faults. A signal (the task's
    timer) interrupts the wait; the child is then killed and reaped, and the handler's
    exception goes on."""
    status, usage = ctypes.c_int(0), _Rusage()
    try:
        while True:
            if _WAIT4(pid, ctypes.byref(status), 0, ctypes.byref(usage)) == pid:
                return status.value, int(usage.maxrss), int(usage.minflt + usage.majflt)
            if ctypes.get_errno() != 4:  # EINTR: let a handler run, then wait again
                raise OSError(ctypes.get_errno(), "waiting for the measured call failed")
            signal.getsignal(signal.SIGINT)  # a bytecode boundary: pending handlers run here
    except BaseException:
        _kill_and_reap(pid)
        raise


def _open_descriptors() -> list[int]:
    """This process's open descriptors, from its own ``/proc`` folder (which the sandbox
    leaves readable; a fork's would not be)."""
    try:
        return sorted(int(name) for name in os.listdir(f"/proc/{os.getpid()}/fd"))
    except (OSError, ValueError):
        return []


def _writable_shared_mappings() -> list[tuple[int, int]]:
    """This process's writable shared mappings (a file or ``memfd`` mapped ``MAP_SHARED``,
    a SysV segment), from its own ``/proc`` folder: the fork makes them inaccessible before
    the call, since their pages live in the page cache, where a write fills them without a
    page fault of the process's."""
    found = []
    try:
        with open(f"/proc/{os.getpid()}/maps") as handle:
            for line in handle:
                fields = line.split(maxsplit=2)
                if len(fields) >= 2 and fields[1][1] == "w" and fields[1][3] == "s":
                    start, _, end = fields[0].partition("-")
                    found.append((int(start, 16), int(end, 16)))
    except (OSError, ValueError, IndexError):
        pass
    return found


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:  # the grader's channel: pinned open by the seccomp filter
        pass


def _kill_and_reap(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


def _how_it_ended(status: int) -> str:
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        if number == signal.SIGXCPU or number == signal.SIGKILL:
            return f"ended by {signal.Signals(number).name} (its CPU time ran out)"
        return f"ended by {signal.Signals(number).name}"
    return f"exited with status {os.WEXITSTATUS(status)} before reporting"


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def end_children() -> int:
    """End every process this one has as a child, and those they leave behind (the runner
    makes the hand-in's process their subreaper, so orphans come back to it): a process the
    notebook left running could do a measured call's work in memory of its own. The number
    ended."""
    ended = 0
    for _ in range(100):  # each round ends the children; their orphans are the next round's
        pids = _children()
        if not pids:
            break
        for pid in pids:
            _kill_and_reap(pid)
            ended += 1
    while True:  # zombies reparented meanwhile
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                break
        except ChildProcessError:
            break
    return ended


def _children() -> list[int]:
    """This process's children, from ``/proc/<pid>/task/<tid>/children`` (its own folder,
    which the sandbox leaves readable)."""
    base = f"/proc/{os.getpid()}/task"
    pids: set[int] = set()
    try:
        threads = os.listdir(base)
    except OSError:
        return []
    for tid in threads:
        try:
            with open(f"{base}/{tid}/children") as handle:
                pids.update(int(word) for word in handle.read().split())
        except (OSError, ValueError):
            continue
    return sorted(pids)


def set_subreaper() -> bool:
    """Make this process the one orphans of its descendants are given to (Linux only)."""
    if not MEASURED:
        return False
    return _PRCTL(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
