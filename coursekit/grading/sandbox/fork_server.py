"""The warm parent's own process: imports once, then serves the grader as a fork server.

Started by the grader (:class:`coursekit.grading.sandbox.warm_parent.WarmParent`) as
``python -P -m coursekit.grading.sandbox.fork_server --warm FD``, from a clean environment, it
imports torch, IPython and coursekit once (:mod:`coursekit.grading.sandbox.preload`) and makes
the tampering instruments (:mod:`coursekit.grading.sandbox.instruments`), while no hand-in
exists. It is never told anything of the grader's: no gradebook, no key, no specs. For each
hand-in it receives the three pipe ends of one channel on its control socket, forks twice so
that the runner re-parents to the grader (a subreaper), and closes them. The runner drops
this process's socket and builds the whole sandbox
(:func:`coursekit.grading.sandbox.process_tree.run_sandbox`) before any hand-in code runs.
"""

from __future__ import annotations

# first, before any module that registers a fork hook (bz2, imported by shutil, imports
# threading): the hook that keeps a notebook's code out of the memory test's fork runs first
from coursekit.grading.sandbox import trusted_fork  # isort: skip

import contextlib
import ctypes
import gc
import os
import shutil
import signal
import socket
import struct
import sys
import time

from coursekit.grading.sandbox import channel, instruments, preload, process_tree, scratch
from coursekit.grading.sandbox.exit_codes import SETUP_FAILED

_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE = 1, 4


def _prctl(option: int, value: int) -> int:
    return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def serve(control_fd: int, temp: str | None = None) -> None:
    """The warm parent: import once, then fork a runner for each set of pipes received.
    ``temp`` is the grader's temporary folder, where its caches go."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # if the grader dies, so does this
    grader = os.getppid()
    if grader == 1:  # the grader died before the line above
        os._exit(1)
    control = socket.socket(fileno=control_fd)
    caches = None
    try:
        if trusted_fork.FORKS and not trusted_fork.FIRST:
            early = [name for name in trusted_fork.HOOKING_MODULES if name in sys.modules]
            raise RuntimeError(
                f"Python imported {', '.join(early)} as it started (a sitecustomize or .pth "
                "file?), before the grader's fork hook: their hooks would run a notebook's "
                "objects in the memory test's fork. Grade from an environment that does not "
                "(`python -P -X importtime -c pass` shows what starts with Python)."
            )
        # if this is killed, the grader removes it (scratch.folders_of finds it by its name)
        caches = str(scratch.make(grader, os.getpid(), parent=temp))
        os.environ["MPLCONFIGDIR"] = caches  # matplotlib's font cache, built once here
        gc.disable()  # no collection while everything is imported and recorded
        preload.preload()
        preload.preload_course()
        instruments.prepare()  # after every import: their code is the libraries' own
        # What is imported now lives as long as grading: out of the collector's sight, so no
        # hand-in's process spends its time traversing torch, nor copies its pages doing so
        # (as CPython's docs advise before forking workers).
        gc.freeze()
        gc.enable()
    except BaseException as error:  # noqa: BLE001 - said to the grader, then this ends
        channel.send(control_fd, {"kind": "failed", "why": f"{type(error).__name__}: {error}"})
        if caches is not None:
            shutil.rmtree(caches, ignore_errors=True)
        os._exit(SETUP_FAILED)
    _prctl(_PR_SET_DUMPABLE, 0)  # no process of the same user may read or write its memory
    channel.send(control_fd, {"kind": "ready"})
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(control, 8, 3)
        except OSError:
            break
        if not data:  # the grader closed its end: grading is over
            for fd in fds:
                os.close(fd)
            break
        if len(fds) == 3 and len(data) == 8:
            reply = _fork_runner(tuple(fds), control_fd, grader)
        else:
            reply = {"kind": "failed", "why": f"{len(fds)} pipes and {len(data)} bytes came"}
        reply["sequence"] = struct.unpack(">Q", data)[0] if len(data) == 8 else None
        for fd in fds:
            os.close(fd)
        channel.send(control_fd, reply)
    shutil.rmtree(caches, ignore_errors=True)
    os._exit(0)


def _fork_runner(fds: tuple[int, int, int], control_fd: int, grader: int) -> dict:
    """Fork twice, so that the runner re-parents to the grader; its pid, or why not."""
    read_pid, write_pid = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        middle = os.fork()
    except OSError as error:
        os.close(read_pid)
        os.close(write_pid)
        return {"kind": "failed", "why": f"fork: {error}"}
    if middle == 0:
        try:
            os.close(read_pid)
            middle_pid = os.getpid()
            child = os.fork()
            if child == 0:
                os.close(write_pid)
                _become_runner(fds, control_fd, grader, middle_pid)
            os.write(write_pid, struct.pack(">q", child))
        finally:
            os._exit(0)
    os.close(write_pid)
    data = b""
    with contextlib.suppress(OSError):
        while len(data) < 8 and (chunk := os.read(read_pid, 8 - len(data))):
            data += chunk
    os.close(read_pid)
    os.waitpid(middle, 0)  # once it has ended, the runner is the grader's child
    if len(data) != 8:
        return {"kind": "failed", "why": "the runner's process could not be forked"}
    return {"kind": "forked", "pid": struct.unpack(">q", data)[0]}


def wait_until_reparented(middle: int, grader: int) -> bool:
    """Wait until the process ``middle`` (which forked this one, and ends at once) is gone,
    so that this process is the ``grader``'s child; whether it is.

    ``middle`` must be known from before the fork. Read afterwards with ``os.getppid()`` it
    can already be the grader's pid (the middle process ended before this one first ran),
    and a wait for the parent to change would never end: a hang seen on a loaded machine."""
    while os.getppid() == middle:
        time.sleep(0.0005)
    return os.getppid() == grader


def _become_runner(fds: tuple[int, int, int], control_fd: int, grader: int, middle: int) -> None:
    """In the forked process: drop the parent's channel, take the hand-in's, wait to be the
    grader's child, then build the sandbox and serve (never returns). ``middle``: the pid of
    the process that forked this one, taken before the fork (see wait_until_reparented)."""
    runner_in, runner_out, output = fds
    try:
        os.close(control_fd)  # nothing of another hand-in's, nor a way to ask for forks
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        os.dup2(output, 1)
        os.dup2(output, 2)
        os.close(output)
        reparented = wait_until_reparented(middle, grader)
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if not reparented or os.getppid() != grader:  # the grader is gone, or no subreaper
            os._exit(SETUP_FAILED)
        _prctl(_PR_SET_DUMPABLE, 1)  # as a process started afresh is (user namespaces need it)
        import random

        random.seed()  # not the parent's state: as a fresh process would have it
        process_tree.run_sandbox(runner_in, runner_out)
    except BaseException:  # noqa: BLE001 - its output reaches the grader's tail
        import traceback

        traceback.print_exc()
        os._exit(SETUP_FAILED)
    os._exit(0)


if __name__ == "__main__":  # python -P -m ...fork_server [--temp FOLDER] --warm FD
    # run from the module imported by its name, which the harness's seal records with every
    # other coursekit module, rather than from __main__
    from coursekit.grading.sandbox import fork_server

    arguments = sys.argv[1:]
    temp = arguments[arguments.index("--temp") + 1] if "--temp" in arguments else None
    fork_server.serve(int(arguments[-1]), temp)
