"""The grader as a subreaper, and its handle on each runner the warm parent forks.

The warm parent forks each runner twice over, so that it re-parents to the grader: the grader
then waits for it, kills it and reads how it ended exactly as it would a process of its own
(:class:`Child`), and daemons a hand-in starts where no PID namespace ends them re-parent to
the grader too, where they are found (:func:`children`) and killed.

Several grading threads share the grader's process, so every child belongs to exactly one of
them, which alone waits for it: a runner (the :class:`Child` its worker holds), or a helper a
worker starts and waits for itself (:func:`run_owned`, :func:`starting`). Such helpers are
registered while the registry's lock is held across their start, and a sweep for strays scans
under the same lock (:func:`registry`), so no sweep ever sees, signals or reaps a child another
thread started: a stray is a child that nobody in the grader started.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from coursekit.grading.sandbox.errors import SandboxSetupError
from coursekit.grading.sandbox.exit_codes import SETUP_FAILED

_PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> int:
    return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def become_subreaper() -> None:
    """Orphans of our descendants re-parent to us: the warm parent's forks (so the grader can
    wait for them), and daemons a hand-in starts where no PID namespace ends them."""
    if sys.platform.startswith("linux") and _prctl(_PR_SET_CHILD_SUBREAPER, 1) != 0:
        code = ctypes.get_errno()
        raise SandboxSetupError(f"the grader could not become a subreaper: {os.strerror(code)}")


_REGISTRY_LOCK = threading.RLock()
_OWNED: set[int] = set()


@contextlib.contextmanager
def starting():
    """Hold the registry while starting a child; yields the function that registers its pid.

    A sweep (:func:`registry`) cannot scan between the fork and the registration, so the new
    child is never taken for a stray. Its starter must :func:`disown` it once reaped."""
    with _REGISTRY_LOCK:
        yield _OWNED.add


def disown(pid: int) -> None:
    """Forget a child its starter has reaped (its pid may now be given to another process)."""
    with _REGISTRY_LOCK:
        _OWNED.discard(pid)


@contextlib.contextmanager
def registry():
    """Hold the registry (no child can be started meanwhile); yields the pids of the children
    grading threads started and still own."""
    with _REGISTRY_LOCK:
        yield frozenset(_OWNED)


def run_owned(argv: list[str]) -> int:
    """Run a helper program to its end (its output discarded) as a registered child of the
    calling thread, which alone waits for it; its exit status."""
    with starting() as own:
        process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        own(process.pid)
    try:
        return process.wait()
    finally:
        disown(process.pid)


def fork_owned(child) -> int:
    """Fork a child that runs ``child()`` and ends (``os._exit``, 0 unless it raised), wait for
    it as the calling thread's own; its exit status. The child must not take locks."""
    with starting() as own:
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                child()
                code = 0
            finally:
                os._exit(code)
        own(pid)
    try:
        while True:
            try:
                _, status = os.waitpid(pid, 0)
                return os.waitstatus_to_exitcode(status)
            except InterruptedError:
                continue
    finally:
        disown(pid)


def uid_of(pid: int) -> int | None:
    """The real uid of process ``pid`` (a zombie's too), or None if it is gone."""
    try:
        with open(f"/proc/{pid}/status", "rb") as handle:
            for line in handle:
                if line.startswith(b"Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def session_of(pid: int) -> int | None:
    """The session id of process ``pid`` (a zombie's too), or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return int(handle.read().rsplit(b")", 1)[1].split()[3])
    except (OSError, ValueError, IndexError):
        return None


def children() -> set[int]:
    """Process ids of this process's children (zombies too, until they are reaped): read
    from each of its threads' ``/proc/<pid>/task/<tid>/children`` (a few small files: each
    hand-in's runner reads them as it starts), or, on a kernel without those files, from
    every process's ``stat``."""
    for _ in range(3):  # a thread that ended between the listing and the read: read again
        try:
            return _children_by_thread()
        except FileNotFoundError:
            continue
        except OSError:  # no such files (a kernel built without them)
            break
    return _children_by_scan()


def _children_by_thread() -> set[int]:
    base = f"/proc/{os.getpid()}/task"
    found: set[int] = set()
    for thread in os.listdir(base):
        try:
            with open(f"{base}/{thread}/children", "rb") as listed:
                found.update(map(int, listed.read().split()))
        except ProcessLookupError:  # (ESRCH) the thread is ending: its children move on
            raise FileNotFoundError(thread) from None
    return found


def _children_by_scan() -> set[int]:
    me, found = str(os.getpid()), set()
    for status in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = status.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[1] == me:
            found.add(int(status.parent.name))
    return found


class Child:
    """A process the warm parent forked, now a child of the grader: wait, kill, status."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None
        self.generation = self.sequence = 0  # which parent forked it, as its fork number
        self.use = 0  # the parent's count of runners put in use, as this one was
        self.alone = False  # no other runner was in use when it was put in use
        self.sharing: set[int] = set()  # the runners in use with it (until each is forgotten)
        self.lost = False  # someone else reaped it: the grader's fault, never the hand-in's
        try:
            self._pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):  # before Linux 5.3: poll instead
            self._pidfd = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # not ours (any more): nothing to wait for
                self.lost = True
                self.returncode = SETUP_FAILED
                return self.returncode
            if pid == self.pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def ended(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` for it to end, without reaping it (``WNOWAIT``): while it is
        not reaped no other process can be given its pid, nor its session's id, so what is
        named after it is still its own. Whether it has ended."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            try:
                if os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG):
                    return True
            except ChildProcessError:
                self.poll()  # not ours (any more): lost
                break
            except InterruptedError:
                continue
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            if self._pidfd is not None:
                select.select([self._pidfd], [], [], left)
            else:
                time.sleep(0.01 if left is None else min(0.01, left))
        return True

    def wait(self, timeout: float | None = None) -> int | None:
        """Its exit status (as ``Popen.returncode``), or None if it still runs at ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            if self._pidfd is not None:
                select.select([self._pidfd], [], [], left)
            else:
                time.sleep(0.01 if left is None else min(0.01, left))
        return self.returncode

    def kill(self) -> None:
        """SIGKILL its process group (the runner is a session leader), and it."""
        if self.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        if self._pidfd is not None:
            with contextlib.suppress(ProcessLookupError, OSError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)

    def release(self) -> None:
        if self._pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(self._pidfd)
            self._pidfd = None
