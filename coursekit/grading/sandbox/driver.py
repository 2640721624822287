"""The grader's side of running one hand-in: a confined process, driven one command at a time.

A warm parent (:mod:`coursekit.grading.sandbox.warm_parent`) forks a runner
(:mod:`coursekit.grading.sandbox.runner`) holding two pipes; the grader sends it the job, then each
cell, then each test (one spec at a time, only after the last cell has answered), then
the end. Every answer must be the one asked for, echoing its nonce; anything else on the
channel is the hand-in's doing, which ends the attempt and is flagged. A time limit holds
for each command and for the whole notebook. The process is killed when it is done, out of
time or off protocol; its PID namespace takes everything it started along, and its root
file system lived in memory. A cell or test that kills the process is skipped on a second
try, so one such cell costs only itself.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from coursekit.grading.sandbox import channel, privileges
from coursekit.grading.sandbox.runner import SCRATCH_FULL, SCRATCH_PREFIX
from coursekit.grading.sandbox.warm_parent import (  # noqa: F401  (SandboxSetupError: re-exported)
    SandboxSetupError,
    WarmParent,
    become_subreaper,
    children,
)

GRACE_S = 5.0  # how long past its own limit a cell may go before it is killed from outside
# A backstop, in wall-clock seconds, for the sandbox to be built, before any hand-in code runs:
# that takes well under a second even on a loaded machine; a runner stuck there (a bug) stops
# the batch with that said, instead of holding it until the hand-in's own backstop (50 min).
READY_TIMEOUT_S = 120.0
OUTPUT_TAIL_BYTES = 4000
MAX_FLAGS = 20
PARENT_DIED_FLAG = "the grading sandbox's parent process died while it alone ran"


@dataclass(frozen=True)
class Limits:
    """What one hand-in may use.

    Time limits are CPU seconds (user and system time of the notebook's process), so a busy
    machine slows a hand-in down without marking it down. Code that waits without computing
    (a sleep, a blocked read) is ended by a wall-clock backstop: ``wall_factor`` times the
    limit, for each cell, test and whole notebook."""

    cell_timeout_s: float = 60.0
    task_timeout_s: float = 30.0
    hand_in_timeout_s: float = 300.0
    wall_factor: float = 10.0
    memory_bytes: int = 3 * 2**30
    max_processes: int = 64
    output_bytes: int = 2 * 2**20
    file_bytes: int = 64 * 2**20
    scratch_bytes: int = 512 * 2**20  # its whole writable disk (a tmpfs): files, /tmp, /dev/shm
    scratch_files: int = 20_000


@dataclass(frozen=True)
class Options:
    """How to confine: ``isolation`` "auto" (namespaces where the kernel allows), "user"
    (through a user namespace even as root: the non-root path) or "none" (for tests)."""

    landlock: bool = True
    isolation: str = "auto"
    hidden: tuple[str, ...] = ()  # host folders never bound into the sandbox (the course's)
    # Run hand-ins even where they would run as the grader's own user with no namespace of
    # their own (not root, and no user namespaces): an instructor's explicit choice.
    unconfined: bool = False


class UnconfinedError(SandboxSetupError):
    """Hand-ins would run unconfined, and the instructor did not accept that."""


def unconfined_refusal(applied: dict) -> str | None:
    """Why grading must stop when hand-ins would run as the grader's own user with no
    namespaces (an instructor's account in a container); None when they would not."""
    if applied.get("root_user") or applied.get("user_namespace"):
        return None
    why = applied.get("why_no_namespaces") or "no namespaces were made"
    return (
        "hand-ins would run unconfined, as your own user: this account is not root and "
        f"cannot make user namespaces ({why}). A hand-in could then read and change your "
        "files, the gradebook and the course's hidden tests. Grade as root (in a container: "
        "as its root user), or where unprivileged user namespaces are allowed (on Ubuntu: "
        "sysctl kernel.apparmor_restrict_unprivileged_userns=0); or, for hand-ins you trust, "
        "pass --unconfined to run them anyway."
    )


def mode_of(applied: dict) -> str:
    """One line that says how hand-ins run, printed by ``grade`` and the Gradescope bundle."""
    names = set(applied.get("namespaces") or [])
    user = applied.get("hand_in_user")
    as_whom = f"as a user of their own (uid {user})" if user else "as your user"
    if applied.get("user_namespace") and "pid" in names:
        return "namespaces through a user namespace (an ordinary user): hand-ins run in their own"
    if "pid" in names and user:
        return f"namespaces as root: hand-ins run {as_whom}, in namespaces of their own"
    if user:
        return (
            f"no namespaces, as root (as in Docker or Gradescope): hand-ins run {as_whom}, "
            "confined by file permissions, rlimits"
            + (", Landlock" if applied.get("landlock") else "")
            + (" and seccomp" if applied.get("seccomp") else "")
        )
    if applied.get("user_namespace"):
        return "a user namespace without a PID namespace: hand-ins run as your user inside it"
    return "UNCONFINED (--unconfined): hand-ins run as your own user"


@dataclass
class SandboxRun:
    """What came back from the hand-in's process (plain data, to be judged elsewhere)."""

    cells: list[dict] = field(default_factory=list)
    tasks: list[dict] = field(default_factory=list)
    killed_cells: dict[int, str] = field(default_factory=dict)  # index -> why it was skipped
    failure: str | None = None  # set when no result came back at all
    confinement: dict = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)  # what the hand-in did to grading itself
    flags_over_cap: int = 0  # flags that came after the note's cap was full
    output_tail: str = ""
    seconds: float = 0.0


def kill_new_children(new: Callable[[], set[int]], seconds: float = 10.0) -> None:
    """SIGKILL the processes ``new()`` names (children that should not be there: with the
    subreaper, orphans too) until none is left; killing one re-parents its own to us."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = new()
        if not found:
            return
        for pid in found:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in found:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


class _Ended(Exception):
    """The attempt ended before its work was done; ``why`` says how."""

    def __init__(self, why: str, detail: str = ""):
        super().__init__(why)
        self.why, self.detail = why, detail


class _Tail:
    """The hand-in's output, read as it comes (or the pipe fills and it blocks); its end kept."""

    def __init__(self, fd: int):
        self.fd, self.data = fd, b""
        os.set_blocking(fd, False)

    def drain(self, fd: int | None = None, most_bytes: int = 2**20) -> None:
        """Read what is there, up to ``most_bytes`` (a hand-in that writes without end must
        not keep the grader from its clock)."""
        with contextlib.suppress(BlockingIOError, OSError):
            while most_bytes > 0 and (chunk := os.read(self.fd, 2**16)):
                self.data = (self.data + chunk)[-OUTPUT_TAIL_BYTES:]
                most_bytes -= len(chunk)

    def text(self) -> str:
        return self.data.decode("utf-8", "replace")


@dataclass
class _Attempt:
    cells: dict[int, dict] = field(default_factory=dict)
    tasks: dict[int, dict] = field(default_factory=dict)
    applied: dict = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    flags_over_cap: int = 0
    slow_questions: set = field(default_factory=set)  # ran out of time twice on a test
    position: tuple = ("start",)  # what was running when it ended
    parent_died: bool = False  # the warm parent died while this hand-in alone ran
    ended: _Ended | None = None
    returncode: int | None = None
    output: str = ""
    seconds: float = 0.0


class _Session:
    """One run of the runner: commands out, answers in, flags collected on the way."""

    def __init__(self, process, to_runner: int, reader, tail: _Tail, attempt: _Attempt):
        self.process, self.to_runner, self.reader, self.tail = process, to_runner, reader, tail
        self.attempt = attempt

    def send(self, message: dict, deadline: float) -> None:
        try:
            channel.send_by(self.to_runner, message, deadline)
        except channel.TimedOut:
            raise _Ended("timeout") from None
        except OSError:  # a broken pipe: the process ended
            raise _Ended("exit") from None

    def expect(self, kind: str, deadline: float, index=None, nonce=None) -> dict:
        while True:
            try:
                frame = self.reader.next_frame(deadline, self.tail.drain, (self.tail.fd,))
            except channel.Closed:
                raise _Ended("exit") from None
            except channel.TimedOut:
                raise _Ended("timeout") from None
            except channel.ChannelError as error:
                raise _Ended("violation", str(error)) from None
            if frame.get("kind") == "flag":
                what = frame.get("what")
                if isinstance(what, str) and len(self.attempt.flags) < MAX_FLAGS:
                    self.attempt.flags.append(what[:300])
                else:  # counted, so that a flood of flags cannot hide the real ones unseen
                    self.attempt.flags_over_cap += 1
                continue
            if frame.get("kind") == "failed" and kind == "ready":
                raise SandboxSetupError(str(frame.get("why"))[:1000])
            if (
                frame.get("kind") != kind
                or frame.get("index") != index
                or frame.get("nonce") != nonce
            ):
                raise _Ended("violation", f"an answer out of turn ({str(frame.get('kind'))[:40]})")
            return frame

    def command(self, kind: str, deadline: float, index=None, **fields) -> dict:
        nonce = secrets.token_hex(8)
        self.send({"kind": kind, "index": index, "nonce": nonce, **fields}, deadline)
        return self.expect(kind, deadline, index, nonce)


class _Runner:
    """The runner's process (forked by the warm parent), its pipes and its host folder;
    :meth:`close` ends it all."""

    def __init__(self, options: Options, limits: Limits, warm: WarmParent):
        self.fds: list[int] = []
        self.process = None
        self.warm = warm
        try:
            runner_in, self.to_runner = self._pipe()
            self.from_runner, runner_out = self._pipe()
            self.output, output_w = self._pipe()
            self.before = children()
            self.process = warm.fork((runner_in, runner_out, output_w))
            for fd in (runner_in, runner_out, output_w):  # the runner's ends
                os.close(fd)
                self.fds.remove(fd)
        except BaseException:
            self.close(wait_s=0, orphans_possible=False)
            raise
        self.job = {
            "kind": "job",
            "limits": asdict(limits),
            "landlock": options.landlock,
            "isolation": options.isolation,
            "hidden": list(options.hidden),
            "host_scratch_parent": tempfile.gettempdir(),
        }

    def _pipe(self) -> tuple[int, int]:
        read, write = os.pipe()
        self.fds += [read, write]
        return read, write

    def close(self, wait_s: float, orphans_possible: bool) -> int | None:
        """End the process (after ``wait_s`` for it to end by itself) and everything it
        started, close the pipes, remove its cgroups and its host folder; its exit status.

        ``orphans_possible``: the hand-in ran without a PID namespace, so processes it
        detached may have re-parented to the grader; they are found and killed."""
        returncode = None
        if self.process is not None:
            self.process.wait(timeout=wait_s)  # how it ended, if it did
            self.process.kill()
            returncode = self.process.wait()
            for group in privileges.cgroup_paths(self.process.pid):
                privileges.empty_and_remove_cgroup(group)
            if os.geteuid() == 0:  # every process of the hand-in's own user, wherever it is
                uid, _ = privileges.hand_in_ids(self.process.pid)
                privileges.end_processes_of(uid)
                privileges.remove_files_of(uid)
            if orphans_possible:
                with _SWEEPING:  # one thread at a time: none reaps what another one scanned
                    kill_new_children(lambda: self.warm.strays(self.before))
            self.warm.forget(self.process)
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        if self.process is not None:  # made only where there was no root of its own
            folder = Path(tempfile.gettempdir()) / f"{SCRATCH_PREFIX}{self.process.pid}"
            if os.path.lexists(folder):
                _remove(folder)
        return returncode


_SWEEPING = threading.Lock()


def _one_attempt(cells, skip, crashed, tasks, limits: Limits, options: Options, budget_s, warm):
    if warm.stopped.is_set():
        raise SystemExit("grading was stopped")
    started = time.monotonic()
    notebook_deadline = started + budget_s
    attempt = _Attempt()
    stop = {signal.SIGTERM, signal.SIGINT}  # a worker stops only after cleaning up
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)
    runner = tail = None
    try:
        runner = _Runner(options, limits, warm)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stop)
        tail = _Tail(runner.output)
        reader = channel.FrameReader(runner.from_runner)
        session = _Session(runner.process, runner.to_runner, reader, tail, attempt)
        session.send(runner.job, notebook_deadline)
        ready_by = min(notebook_deadline, started + READY_TIMEOUT_S)
        try:
            attempt.applied = session.expect("ready", ready_by).get("applied") or {}
        except _Ended as ended:
            if ended.why == "timeout":
                raise SandboxSetupError(
                    f"the sandbox was not ready within {READY_TIMEOUT_S:.0f} s of its fork "
                    "(building it takes well under a second); nothing of the hand-in had run"
                ) from None
            raise
        refusal = unconfined_refusal(attempt.applied)
        if refusal and not options.unconfined:
            raise UnconfinedError(refusal)
        for index, source in enumerate(cells):
            if source is None:  # a demonstration left as released: grading skips it
                attempt.cells[index] = {"index": index, "status": "demo"}
                continue
            if index in skip:
                attempt.cells[index] = {"index": index, "status": "skipped"}
                continue
            attempt.position = ("cell", index)
            deadline = min(notebook_deadline, _backstop(limits.cell_timeout_s, limits))
            reply = session.command("cell", deadline, index, source=source)
            attempt.cells[index] = {"index": index, **_cell_status(reply)}
        attempt.position = ("check",)
        session.command("check", min(notebook_deadline, time.monotonic() + 30))
        for index, task in enumerate(tasks):
            if index in crashed:
                attempt.tasks[index] = _crashed_record(task, crashed[index])
                continue
            attempt.position = ("task", index)
            # A test that ran out of time gets one more try before it counts, unless its
            # function already ran out of time twice on an earlier test.
            tries = 1 if task["question"] in attempt.slow_questions else 2
            for _ in range(tries):
                deadline = min(notebook_deadline, _backstop(limits.task_timeout_s, limits))
                # the harness is compared with its seal after each question's last test
                last = index + 1 == len(tasks) or tasks[index + 1]["question"] != task["question"]
                reply = session.command(
                    "task",
                    deadline,
                    index,
                    question=task["question"],
                    spec=task["spec"],
                    last=last,
                )
                if reply.get("status") != "timeout":
                    break
            else:
                attempt.slow_questions.add(task["question"])
            attempt.tasks[index] = _task_record(reply)
        attempt.position = ("end",)
        with contextlib.suppress(_Ended):
            session.send({"kind": "end"}, time.monotonic() + 5)
    except _Ended as ended:
        attempt.ended = ended
        if ended.why == "timeout" and time.monotonic() >= notebook_deadline:
            ended.why = "notebook"
    finally:
        signal.pthread_sigmask(signal.SIG_BLOCK, stop)
        if runner is not None:
            if runner.process is not None and warm.died_during(runner.process):
                attempt.parent_died = True
            exited = attempt.ended is not None and attempt.ended.why == "exit"
            namespaces = attempt.applied.get("namespaces") or []
            attempt.returncode = runner.close(
                wait_s=2 if exited else 0,
                orphans_possible=bool(attempt.applied) and "pid" not in namespaces,
            )
        if tail is not None:
            tail.drain()
            attempt.output = tail.text()
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stop)
    attempt.seconds = time.monotonic() - started
    return attempt


def _backstop(limit_s: float, limits: Limits) -> float:
    """The wall-clock deadline past which a cell or test is ended from outside: its CPU
    limit times ``wall_factor`` (it should have stopped itself long before), plus a grace."""
    return time.monotonic() + limit_s * limits.wall_factor + GRACE_S


def _crashed_record(task: dict, why: str) -> dict:
    """The record of a test not run again because it ended the process, or ran out of time
    twice, in an earlier try."""
    if why == "timeout":
        return {"status": "timeout"}
    return {
        "status": "error",
        "message": f"{task['question']} crashed or exited: grading had to end its process.",
    }


_CELL_STATUSES = {"ok", "error", "timeout"}
_TASK_STATUSES = {"ok", "error", "timeout", "missing", "not_attempted"}


def _cell_status(reply: dict) -> dict:
    status = reply.get("status") if reply.get("status") in _CELL_STATUSES else "error"
    record = {"status": status}
    if status == "error":
        record["error"] = str(reply.get("error", "an error"))[:400]
    return record


def _task_record(reply: dict) -> dict:
    status = reply.get("status") if reply.get("status") in _TASK_STATUSES else "error"
    record = {"status": status}
    if status == "ok":
        record["outputs_json"] = reply.get("outputs_json")
    elif status == "error":
        record["message"] = str(reply.get("message", "it raised an error"))[:1000]
    return record


def sweep_leftovers() -> list[str]:
    """Remove what a grading run that was killed outright left behind: host scratch folders
    and empty cgroups named after runner processes that no longer exist. What a live
    process (another grading run's) still uses is left alone. Returns what was removed."""
    removed = []
    for folder in Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*"):
        pid = folder.name[len(SCRATCH_PREFIX) :]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists() and not folder.is_symlink():
            _remove(folder)
            removed.append(str(folder))
    removed += privileges.remove_stale_cgroups()
    return removed


def _remove(folder: Path) -> None:
    """Remove a scratch folder however deep a hand-in nested it (rmtree recurses)."""
    subprocess.run(["rm", "-rf", "--one-file-system", str(folder)], check=False)
    shutil.rmtree(folder, ignore_errors=True)


def _why(attempt: _Attempt, limits: Limits) -> str:
    ended, returncode = attempt.ended, attempt.returncode
    why = ended.why if ended else "exit"
    if why == "violation":
        return "it wrote into the channel between grading and its process"
    if why == "timeout":
        return "it took too long and would not stop at its time limit"
    if why == "notebook":
        return (
            f"it took too long: past {limits.hand_in_timeout_s * limits.wall_factor:.0f} s "
            "(wall clock) for the whole notebook"
        )
    if returncode == SCRATCH_FULL:
        return (
            f"it wrote more than its {limits.scratch_bytes // 2**20} MiB (or "
            f"{limits.scratch_files} files) of scratch space"
        )
    if returncode == -signal.SIGXCPU:
        return f"it took too long: more than {limits.hand_in_timeout_s:.0f} s of CPU time"
    if returncode == -signal.SIGKILL:
        return "the process was killed: it ran out of its memory limit, or killed itself"
    if returncode == -signal.SIGSYS:
        return "the process was killed for a system call the sandbox forbids"
    if returncode is not None and returncode < 0:
        name = signal.Signals(-returncode).name
        return f"the process was killed by {name} (a crash, or the code killed itself)"
    return f"it ended the process (exit status {returncode}, e.g. os._exit)"


def run_hand_in(
    cells: list[str | None],
    tasks: list[dict],
    limits: Limits,
    options: Options | None = None,
    retries: int = 6,
    warm: WarmParent | None = None,
) -> SandboxRun:
    """Run a hand-in's cells and tasks in a confined process; skip cells that kill it.

    A cell given as None is not run (a demonstration grading does not need). Each try is a
    process forked by ``warm`` (a warm parent of its own is started when none is given).
    Raises :class:`SandboxSetupError` when the sandbox itself cannot be built.
    """
    if warm is None:
        with WarmParent() as own:
            return run_hand_in(cells, tasks, limits, options, retries, own)
    options = options or Options()
    run = SandboxRun()
    skip: set[int] = set()
    crashed: dict[int, str] = {}  # test index -> "crash" or "timeout"
    retried: set[int] = set()  # tests given a second try after their process was ended
    attempt = None
    for _ in range(retries + 1):
        wall_s = limits.hand_in_timeout_s * limits.wall_factor
        budget_s = wall_s - run.seconds  # one wall-clock backstop for all the tries
        if budget_s <= 1:
            break
        attempt = _one_attempt(cells, skip, crashed, tasks, limits, options, budget_s, warm)
        run.seconds += attempt.seconds
        if attempt.parent_died:  # charged to this hand-in: its points, not the batch
            run.cells = [attempt.cells[i] for i in sorted(attempt.cells)]
            run.failure = (
                "The notebook's process ended before grading finished: the grading "
                "sandbox's parent process died while this hand-in alone ran."
            )
            if PARENT_DIED_FLAG not in run.flags:
                run.flags.append(PARENT_DIED_FLAG)
            return run
        run.output_tail = attempt.output
        run.confinement = attempt.applied or run.confinement
        new_flags = [f for f in attempt.flags if f not in run.flags]
        room = MAX_FLAGS - len(run.flags)
        run.flags += new_flags[:room]
        run.flags_over_cap += attempt.flags_over_cap + max(0, len(new_flags) - room)
        if attempt.ended is not None and attempt.ended.why == "violation":
            flag = "it wrote into the channel between grading and its process"
            if flag not in run.flags:
                run.flags.append(flag)
        run.cells = [attempt.cells[i] for i in sorted(attempt.cells)]
        if attempt.ended is None:
            run.tasks = [attempt.tasks[i] for i in sorted(attempt.tasks)]
            return run
        where = attempt.position
        if where[0] == "task":
            if where[1] in crashed:
                break
            timed_out = attempt.ended.why == "timeout"
            if timed_out and where[1] not in retried:
                retried.add(where[1])  # a busy machine may have slowed it: once more
                continue
            # The function under test ended the process, or would not stop twice: report
            # that, for the rest of its question's tests too (they would do it again).
            question = tasks[where[1]]["question"]
            for i in range(where[1], len(tasks)):
                if tasks[i]["question"] == question:
                    crashed[i] = "timeout" if timed_out else "crash"
            continue
        if where[0] != "cell" or where[1] in skip:
            break  # nothing to blame and skip: give up
        run.killed_cells[where[1]] = _why(attempt, limits)
        skip.add(where[1])
    if warm.stopped.is_set():  # the batch was stopped: whatever ended the process, say that
        raise SystemExit("grading was stopped")
    if attempt is not None and attempt.position == ("start",):  # no hand-in code ran yet
        tail = attempt.output.strip().splitlines()[-3:]
        raise SandboxSetupError(
            f"the sandbox's process ended before it was ready ({_why(attempt, limits)})"
            + (": " + " / ".join(tail) if tail else "")
        )
    run.failure = "The notebook's process ended before grading finished: " + (
        _why(attempt, limits)
        if attempt
        else f"it took too long: past {limits.hand_in_timeout_s * limits.wall_factor:.0f} s"
    )
    return run


def describe_confinement(applied: dict) -> tuple[list[str], list[str]]:
    """(protections in place, protections missing with what that means), from what the
    runner reported it applied; printed by ``grade`` before the first hand-in."""
    names = set(applied.get("namespaces") or [])
    root = applied.get("root") or {}
    why = applied.get("why_no_namespaces") or ""
    because = f" ({why})" if why else ""
    present, missing = [], []

    def check(ok: bool, good: str, bad: str) -> None:
        (present if ok else missing).append(good if ok else bad)

    check(
        "pid" in names and root.get("proc") == "own",
        "its own processes",
        f"PID namespace{because}: the grader ends a hand-in's processes one by one, and a "
        "hand-in can read other processes' command lines in /proc",
    )
    check(
        root.get("root") == "own",
        f"its own read-only root with {int(root.get('scratch_bytes', 0)) // 2**20} MiB of scratch",
        f"root file system of its own{because}: a hand-in sees the host's files (Landlock, "
        "where there is one, limits what it may read and write) and its scratch folder, on "
        "the host's disk, has no size cap",
    )
    check(
        "network" in names,
        "no network",
        f"network namespace{because}: the seccomp filter allows TCP alone (gloo's need), "
        "and Landlock refuses every TCP connection where the kernel is 6.7 or newer; "
        "elsewhere a hand-in can open TCP connections",
    )
    check(bool(applied.get("landlock")), "Landlock", "Landlock (Linux 5.13 or newer)")
    check(
        bool(applied.get("seccomp")),
        "a seccomp filter",
        "seccomp filter (this processor is not one coursekit knows)",
    )
    if applied.get("root_user"):
        why_not = (
            "pids and memory cgroups (as root, with /sys/fs/cgroup writable): root ignores "
            "process limits, so a hand-in could start many processes"
        )
    else:
        why_not = (
            "memory cgroup (none is delegated to this user): each of a hand-in's processes is "
            "held to the memory limit, but not all of them together"
        )
    check(
        {"pids", "memory"} <= set(applied.get("cgroups") or []), "pids and memory cgroups", why_not
    )
    return present, missing
