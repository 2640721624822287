"""The grader's handle on the warm parent: one process per grading run that imports torch and
coursekit once, then forks one sandboxed runner per hand-in.

Starting Python and importing torch, IPython and coursekit (and torch's lazy imports, which
the first optimizer triggers) costs seconds; the graded work of a hand-in costs a fraction of
one. So the grader starts the warm parent once, before the reference run, and asks it for a
fresh process per hand-in (and per retry). The parent is started from a clean environment as
``python -P -m coursekit.grading.sandbox.fork_server`` (its own side is
:mod:`coursekit.grading.sandbox.fork_server`) and is never told anything of the grader's: no
gradebook, no key, no specs. It receives only the three pipe ends of one hand-in's channel,
forks a process that takes them, and closes them. That process re-parents to the grader (a
subreaper, :mod:`coursekit.grading.sandbox.reaping`), which waits for it, kills it and reads how
it ended exactly as it would a process of its own.
"""

from __future__ import annotations

import contextlib
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

from coursekit.grading.sandbox import channel, scratch
from coursekit.grading.sandbox.errors import SandboxSetupError
from coursekit.grading.sandbox.reaping import (
    Child,
    become_subreaper,
    children,
    registry,
    session_of,
    uid_of,
)
from coursekit.progress import ENV as PROGRESS_ENV

ENTRY_MODULE = "coursekit.grading.sandbox.fork_server"  # what python -m runs: the warm parent
START_TIMEOUT_S = 300.0  # importing torch on a very busy machine
FORK_TIMEOUT_S = 60.0
MAX_RESTARTS = 3


class _Broken(Exception):
    """The warm parent answered wrongly or not at all: it is ended and started again."""


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
        self._in_use: set[int] = set()  # live runners that hand-in code may run in (no spares)
        self._uses = 0  # runners put in use so far (died_during)
        self._died_forking: set[int] = set()  # generations that died as a spare was forked
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
                # --temp: the grader's temporary folder (the clean environment drops TMPDIR),
                # where the grader and the next run's sweep look for the parent's caches
                [sys.executable, "-P", "-m", ENTRY_MODULE, "--temp", tempfile.gettempdir()]
                + ["--warm", str(theirs.fileno())],
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
        was the only runner in use: no other was in use when it was put in use, and none
        since. Such a death only that hand-in was there to cause. A spare (forked ahead,
        building its sandbox, no hand-in code in it) is not in use; a parent that died
        while it forked a spare died in the grader's work, and is charged to no one."""
        with self._lock:
            dead = self.process is None or self.process.poll() is not None
            replaced = dead or self.generation != child.generation
            return (
                replaced
                and child.alone
                and self._uses == child.use
                and child.generation not in self._died_forking
            )

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

    def fork(self, fds: tuple[int, int, int], spare: bool = False) -> Child:
        """A new runner process holding the runner's ends of one channel (in, out, output):
        in use at once, or with ``spare`` only once :meth:`adopt` takes it.

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
                        return self._fork_locked(fds, spare)
                    except _Broken as broken:  # no answer, or a wrong one: end it, start anew
                        why = str(broken)
                        if spare:
                            self._died_forking.add(self.generation)
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

    def _fork_locked(self, fds: tuple[int, int, int], spare: bool) -> Child:
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
        child.generation, child.sequence = self.generation, self._sequence
        self._live[child.pid] = child
        if not spare:
            self._put_in_use(child)
        return child

    def _put_in_use(self, child: Child) -> None:
        child.sharing = self._in_use - {child.pid}
        child.alone = not child.sharing
        self._in_use.add(child.pid)
        self._uses += 1
        child.use = self._uses

    def adopt(self, child: Child) -> bool:
        """Take a runner forked ahead of its hand-in (a spare) into use, as if forked now:
        whether it may be. Not when the parent that forked it has died or been replaced
        since (a death no hand-in of its own was there to cause). Its ``alone`` and ``use``
        are those of now, for :meth:`died_during`."""
        with self._lock:
            alive = self.process is not None and self.process.poll() is None
            if not alive or child.generation != self.generation or child.pid not in self._live:
                return False
            self._put_in_use(child)
            return True

    def forget(self, child: Child) -> None:
        """``child`` is closed (its processes ended): no longer in use. A runner that shared
        the parent only with it (the hand-in before, finishing its last checks while this
        one started: lanes.py) is alone from now on, if the parent is still alive now, as if
        put in use now (a death from here on only it was there to cause)."""
        with self._lock:
            self._live.pop(child.pid, None)
            self._in_use.discard(child.pid)
            alive = self.process is not None and self.process.poll() is None
            for other in self._live.values() if alive else ():
                if other.pid in self._in_use and child.pid in other.sharing:
                    other.sharing.discard(child.pid)
                    if not other.sharing and other.generation == self.generation:
                        other.alone, other.use = True, self._uses
        child.release()

    def strays(
        self, before: set[int], uid: int | None = None, session: int | None = None
    ) -> set[int]:
        """Children of the grader that nobody in it started: neither ``before``, nor runners,
        nor the parent, nor a helper a grading thread started and waits for
        (:func:`coursekit.grading.sandbox.reaping.registry`). With ``uid`` (graded as root:
        a hand-in's own user), only one hand-in's: that user's, or in ``session`` (its
        runner's, whose pid, not yet reaped, no other process can have). Where no PID
        namespace ends a hand-in's daemons, they re-parent here. Scanned while no runner and
        no helper can be started."""
        with self._lock, registry() as owned:
            known = set(self._live) | ({self.process.pid} if self.process else set())
            found = children() - before - known - owned
        if uid is not None:
            found = {p for p in found if uid_of(p) == uid or session_of(p) == session}
        return found

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
            # its caches: it removes them as it ends, unless it was killed (only a real
            # folder of this user's: never what a hand-in's user made under a name like it)
            for folder in scratch.folders_of(os.getpid(), self.process.pid):
                shutil.rmtree(folder, ignore_errors=True)
            self.process = None
