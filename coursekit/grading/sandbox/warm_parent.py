"""A warm parent: one process per grading run that imports torch and coursekit once, then
forks one sandboxed runner per hand-in.

Starting Python and importing torch, IPython and coursekit (and torch's lazy imports, which
the first optimizer triggers) costs seconds; the graded work of a hand-in costs a fraction of
one. So the grader starts this parent once, before the reference run, and asks it for a
fresh process per hand-in (and per retry). The parent is started from a clean environment and
is never told anything of the grader's: no gradebook, no key, no specs. It receives only
the three pipe ends of one hand-in's channel, forks a process that takes them, and closes
them. That process re-parents to the grader (a subreaper), which waits for it, kills it and
reads how it ended exactly as it would a process of its own; it applies the whole sandbox
(:func:`coursekit.grading.sandbox.runner.run_sandbox`) before any hand-in code runs.

Both sides live here: :class:`WarmParent` in the grader, :func:`serve` in the parent.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from coursekit.grading.sandbox import channel
from coursekit.grading.sandbox.runner import SCRATCH_PREFIX, SETUP_FAILED
from coursekit.progress import ENV as PROGRESS_ENV

_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE, _PR_SET_CHILD_SUBREAPER = 1, 4, 36
START_TIMEOUT_S = 300.0  # importing torch on a very busy machine
FORK_TIMEOUT_S = 60.0


MAX_RESTARTS = 3


class SandboxSetupError(RuntimeError):
    """The sandbox could not be built (before any hand-in code ran): the machine's fault."""


class _Broken(Exception):
    """The warm parent answered wrongly or not at all: it is ended and started again."""


def _prctl(option: int, value: int) -> int:
    return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def become_subreaper() -> None:
    """Orphans of our descendants re-parent to us: the warm parent's forks (so the grader can
    wait for them), and daemons a hand-in starts where no PID namespace ends them."""
    if sys.platform.startswith("linux") and _prctl(_PR_SET_CHILD_SUBREAPER, 1) != 0:
        code = ctypes.get_errno()
        raise SandboxSetupError(f"the grader could not become a subreaper: {os.strerror(code)}")


def children() -> set[int]:
    """Process ids of this process's live children."""
    me, found = str(os.getpid()), set()
    for status in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = status.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[1] == me:
            found.add(int(status.parent.name))
    return found


def clean_env() -> dict[str, str]:
    """The environment of the warm parent, and so of every hand-in's process."""
    keep = {"PATH", "LANG", "LC_ALL", "PYTHONPATH", "VIRTUAL_ENV", "COURSEKIT_AUDIT_DEBUG"}
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(
        MPLBACKEND="Agg",
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONUNBUFFERED="1",
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        # the hand-in's network namespace has only a loopback device: gloo must use it
        # rather than the interface the host name resolves to
        GLOO_SOCKET_IFNAME="lo",
    )
    env[PROGRESS_ENV] = "0"  # no progress bars from the hand-in's long cells: nobody watches
    return env


class Child:
    """A process the warm parent forked, now a child of the grader: wait, kill, status."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None
        self.generation = self.sequence = 0  # which parent forked it, as its fork number
        self.alone = False  # no other runner was live when it was forked
        try:
            self._pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):  # before Linux 5.3: poll instead
            self._pidfd = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # not ours (any more): nothing to wait for
                self.returncode = SETUP_FAILED
                return self.returncode
            if pid == self.pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

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


class WarmParent:
    """The grader's handle on the warm parent: :meth:`fork` a runner for one hand-in.

    Thread-safe: grading threads share one. :meth:`stop` ends every runner it forked that still
    runs and refuses new ones (a stopped batch); :meth:`close` ends the parent itself.
    """

    def __init__(self, start_timeout_s: float = START_TIMEOUT_S):
        self.start_timeout_s = start_timeout_s
        self.stopped = threading.Event()
        self.process: subprocess.Popen | None = None
        self.seconds_to_start = 0.0
        self._lock = threading.Lock()
        self._live: dict[int, Child] = {}
        self._socket: socket.socket | None = None
        self._log = None
        self._sequence = 0
        self._launched = 0.0
        self._ready = False
        self.restarts = 0
        self.failed_starts = 0  # starts that failed in a row
        self.generation = 0  # parents started: a death shows as a new one (died_during)

    def __enter__(self) -> WarmParent:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def launch(self) -> None:
        """Start the parent without waiting for it: it imports torch while the caller does
        its own work (``grade`` imports the grader meanwhile). :meth:`start` then waits."""
        if self.process is None:
            self._launched = time.monotonic()
            become_subreaper()
            try:
                self._launch()
            except BaseException:
                self._end_process()
                raise

    def start(self) -> None:
        """Start the parent (unless :meth:`launch` did) and wait until it has imported
        everything (or say why not)."""
        if self._ready:
            return
        self.launch()
        try:
            self._wait_ready(self._launched)
        except BaseException:  # Ctrl-C while it imports, too: leave nothing running
            self._end_process()
            raise
        self.seconds_to_start = time.monotonic() - self._launched

    def _start(self, started: float) -> None:
        self._launch()
        self._wait_ready(started)

    def _launch(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._socket = ours
        if self._log is None:
            self._log = tempfile.TemporaryFile()
        try:
            self.process = subprocess.Popen(
                # -P: no current folder ("/") on sys.path, so none reaches the trusted paths
                [
                    sys.executable,
                    "-P",
                    "-m",
                    "coursekit.grading.sandbox.runner",
                    "--warm",
                    str(theirs.fileno()),
                ],
                cwd="/",
                env=clean_env(),
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=self._log,
                pass_fds=(theirs.fileno(),),
                start_new_session=True,
            )
        except OSError as error:
            self.close()
            raise SandboxSetupError(
                f"the grading sandbox's parent could not start: {error}"
            ) from None
        finally:
            theirs.close()

    def died_during(self, child: Child) -> bool:
        """Whether the parent that forked ``child`` died (or was replaced) while ``child``
        was the only runner: no other was live when it was forked, and none was forked
        since. Such a death only that hand-in was there to cause."""
        with self._lock:
            dead = self.process is None or self.process.poll() is not None
            replaced = dead or self.generation != child.generation
            return replaced and child.alone and self._sequence == child.sequence

    def _wait_ready(self, started: float) -> None:
        reply = self._receive(started + self.start_timeout_s)
        if reply.get("kind") != "ready":
            why = reply.get("why") or self._log_tail()
            self.close()
            raise SandboxSetupError(f"the grading sandbox's parent could not start: {why}")
        self.seconds_to_start = time.monotonic() - started
        self._ready = True
        self.generation += 1

    def _receive(self, deadline: float) -> dict:
        fd = self._socket.fileno()
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return {"why": "it did not answer in time"}
            if select.select([fd], [], [], min(left, 1.0))[0]:
                try:
                    return channel.receive(fd)
                except (channel.Closed, OSError, ValueError):
                    return {"why": f"it ended ({self._log_tail()})"}
            if self.process is not None and self.process.poll() is not None:
                return {"why": f"it ended ({self._log_tail()})"}

    def _log_tail(self) -> str:
        if self._log is None:
            return ""
        with contextlib.suppress(OSError):
            self._log.seek(0)
            lines = self._log.read().decode("utf-8", "replace").strip().splitlines()
            return " / ".join(lines[-3:])
        return ""

    def fork(self, fds: tuple[int, int, int]) -> Child:
        """A new runner process holding the runner's ends of one channel (in, out, output).

        A parent that has died (killed, out of memory) is started again. Only starts that
        fail count against :data:`MAX_RESTARTS` in a row (past that this raises
        :class:`SandboxSetupError`, which stops the batch: the machine's fault, not a grade);
        a parent that served and then died is started again as often as it dies, so a death
        that a hand-in caused (:meth:`died_during`) costs that hand-in, not the batch.
        """
        with self._lock:
            if self.stopped.is_set():
                raise SystemExit("grading was stopped")
            for _ in range(2):
                if self.process is not None and self.process.poll() is None:
                    try:
                        return self._fork_locked(fds)
                    except _Broken as broken:  # no answer, or a wrong one: end it, start anew
                        why = str(broken)
                        self._end_process()
                else:
                    why = f"it ended ({self._log_tail()})"
                if self.failed_starts >= MAX_RESTARTS:
                    raise SandboxSetupError(f"the grading sandbox's parent failed: {why}")
                self.restarts += 1
                self._end_process()
                started = time.monotonic()
                try:
                    self._start(started)
                except SandboxSetupError:
                    self.failed_starts += 1
                    self._end_process()
                    if self.failed_starts >= MAX_RESTARTS:
                        raise
                    continue
                except BaseException:
                    self._end_process()
                    raise
                self.failed_starts = 0
            raise SandboxSetupError(f"the grading sandbox's parent failed: {why}")

    def _fork_locked(self, fds: tuple[int, int, int]) -> Child:
        self._sequence += 1
        try:
            socket.send_fds(self._socket, [struct.pack(">Q", self._sequence)], list(fds))
        except OSError as error:
            raise _Broken(f"it took no hand-in ({error})") from None
        reply = self._receive(time.monotonic() + FORK_TIMEOUT_S)
        if reply.get("sequence") != self._sequence:  # never another request's answer
            raise _Broken(f"no answer to this hand-in ({reply.get('why') or reply})")
        if reply.get("kind") != "forked" or not isinstance(reply.get("pid"), int):
            raise SandboxSetupError(f"the sandbox's parent could not fork: {reply.get('why')}")
        child = Child(reply["pid"])
        child.generation, child.sequence, child.alone = (
            self.generation,
            self._sequence,
            not self._live,
        )
        self._live[child.pid] = child
        return child

    def forget(self, child: Child) -> None:
        with self._lock:
            self._live.pop(child.pid, None)
        child.release()

    def strays(self, before: set[int]) -> set[int]:
        """Children of the grader that are neither ``before``, nor runners, nor the parent:
        where no PID namespace ends a hand-in's daemons, they re-parent here."""
        with self._lock:
            known = set(self._live) | ({self.process.pid} if self.process else set())
            return children() - before - known

    def stop(self) -> None:
        """Refuse new runners and kill those still running (a batch that is stopped)."""
        with self._lock:
            self.stopped.set()
            live = list(self._live.values())
        for child in live:
            child.kill()

    def close(self) -> None:
        """End the parent (it has nothing to clean but its folder of caches) and its pipes."""
        self._end_process()
        if self._log is not None:
            self._log.close()
            self._log = None

    def _end_process(self) -> None:
        ready, self._ready = self._ready, False
        if self._socket is not None:
            with contextlib.suppress(OSError):
                self._socket.close()
            self._socket = None
        if self.process is not None:
            try:  # a parent still importing has nothing to finish: it is ended at once
                self.process.wait(timeout=10 if ready else 0)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
            folder = Path(tempfile.gettempdir()) / f"{SCRATCH_PREFIX}{self.process.pid}"
            if folder.is_dir() and not folder.is_symlink():
                shutil.rmtree(folder, ignore_errors=True)
            self.process = None


# ------------------------------------------------------------------- the parent's own side


def serve(control_fd: int) -> None:
    """The warm parent: import once, then fork a runner for each set of pipes received."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # if the grader dies, so does this
    grader = os.getppid()
    if grader == 1:  # the grader died before the line above
        os._exit(1)
    control = socket.socket(fileno=control_fd)
    caches = os.path.join(tempfile.gettempdir(), f"{SCRATCH_PREFIX}{os.getpid()}")
    try:
        os.mkdir(caches, 0o700)
        os.environ["MPLCONFIGDIR"] = caches  # matplotlib's font cache, built once here
        from coursekit.grading.sandbox import runner

        gc.disable()  # no collection while everything is imported and recorded
        runner.preload()
        _preload_course()
        runner.prepare_instruments()  # after every import: their code is the libraries' own
        # What is imported now lives as long as grading: out of the collector's sight, so no
        # hand-in's process spends its time traversing torch, nor copies its pages doing so
        # (as CPython's docs advise before forking workers).
        gc.freeze()
        gc.enable()
    except BaseException as error:  # noqa: BLE001 - said to the grader, then this ends
        channel.send(control_fd, {"kind": "failed", "why": f"{type(error).__name__}: {error}"})
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


def _preload_course() -> None:
    """What the course's notebooks import, loaded once (a hand-in imports it again for free).

    Nothing here runs notebook code, and torch's random state is left as a fresh process has it.
    """
    import importlib

    import torch

    state = torch.random.get_rng_state()
    import matplotlib.pyplot  # noqa: F401

    for name in (
        "coursekit",
        "coursekit.plots",
        "coursekit.widgets",
        "coursekit.quizzes",
        "coursekit.batch_norm",
        "coursekit.contrastive",
        "coursekit.distributed",
        "coursekit.pipeline",
        "coursekit.zero",
        "coursekit.text",
        "coursekit.gpu",
    ):
        importlib.import_module(name)
    torch.random.set_rng_state(state)


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
        from coursekit.grading.sandbox import runner

        runner.run_sandbox(runner_in, runner_out)
    except BaseException:  # noqa: BLE001 - its output reaches the grader's tail
        import traceback

        traceback.print_exc()
        os._exit(SETUP_FAILED)
    os._exit(0)
