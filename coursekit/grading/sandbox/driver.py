"""The grader's side of running one hand-in: a confined process, driven one command at a time.

A warm parent (:mod:`coursekit.grading.sandbox.warm_parent`) forks a runner
(:mod:`coursekit.grading.sandbox.process_tree`) holding two pipes; the grader sends it the job,
then each cell, then each test (one spec at a time, only after the last cell has answered;
the memory tests first), then the end (:mod:`coursekit.grading.sandbox.session`). After the
last test's answer the runner makes its last checks and says "finished"; in a batch, the next
hand-in starts meanwhile (:mod:`coursekit.grading.sandbox.lanes`). Every
answer must be the one asked for, echoing its nonce; anything else on the channel is the
hand-in's doing, which ends the attempt and is flagged. A time limit holds
for each command and for the whole notebook. The process is killed when it is done, out of
time or off protocol; its PID namespace takes everything it started along, and its root
file system lived in memory. A cell or test that kills the process is skipped on a second
try, so one such cell costs only itself.

Each grading thread owns what it starts: its runner, the helpers that end a hand-in's user's
processes, the ``rm`` that removes a scratch folder. A sweep for strays (processes a hand-in
left where no PID namespace ends them) signals and reaps only children nobody in the grader
started, and, graded as root, only those of its own hand-in's user. Where the grader's own
machinery fails on a hand-in (a runner never ready, a runner lost), that is raised
(:class:`RunnerSetupError`, :class:`GraderFault`) for the grader to try the hand-in again,
never a reason charged to the hand-in.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from coursekit.grading.sandbox import channel, privileges, scratch
from coursekit.grading.sandbox.errors import (  # noqa: F401 - SandboxSetupError: re-exported
    GraderFault,
    RunnerSetupError,
    SandboxSetupError,
)
from coursekit.grading.sandbox.exit_codes import SCRATCH_FULL
from coursekit.grading.sandbox.lanes import Lanes
from coursekit.grading.sandbox.limits import Limits, Options

# describe_confinement and mode_of: grade and the Gradescope bundle take them from here, with
# run_hand_in, Limits, Options and SandboxSetupError (what it takes, says and raises)
from coursekit.grading.sandbox.modes import (  # noqa: F401
    UnconfinedError,
    describe_confinement,
    mode_of,
    unconfined_refusal,
)
from coursekit.grading.sandbox.reaping import children
from coursekit.grading.sandbox.session import (
    MAX_FLAGS,
    Attempt,
    Ended,
    Session,
    Tail,
    cell_record,
    crashed_record,
    task_record,
)
from coursekit.grading.sandbox.warm_parent import WarmParent

GRACE_S = 5.0  # how long past its own limit a cell may go before it is killed from outside
# A backstop, in wall-clock seconds, for the sandbox to be built, before any hand-in code runs:
# that takes well under a second even on a loaded machine; a runner stuck there (a bug) stops
# the batch with that said, instead of holding it until the hand-in's own backstop (50 min).
READY_TIMEOUT_S = 120.0
PARENT_DIED_FLAG = "the grading sandbox's parent process died while it alone ran"


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


class _Runner:
    """The runner's process (forked by the warm parent), its pipes and its host folder;
    :meth:`close` ends it all."""

    def __init__(self, options: Options, limits: Limits, warm: WarmParent, spare: bool = False):
        self.fds: list[int] = []
        self.process = None
        self.scratch = None
        self.squatted: list[str] = []  # names like the grader's own its hand-in's user made
        self.warm = warm
        try:
            runner_in, self.to_runner = self._pipe()
            self.from_runner, runner_out = self._pipe()
            self.output, output_w = self._pipe()
            self.before = children()
            self.process = warm.fork((runner_in, runner_out, output_w), spare=spare)
            for fd in (runner_in, runner_out, output_w):  # the runner's ends
                os.close(fd)
                self.fds.remove(fd)
            # made here, by the grader, under a name no hand-in can guess; used by the runner
            # only where the hand-in has no root of its own (it gives it to the hand-in's user)
            self.scratch = scratch.make(os.getpid(), self.process.pid)
        except BaseException:
            self.close(wait_s=0, orphans_possible=False)
            raise
        self.job = {
            "kind": "job",
            "limits": asdict(limits),
            "landlock": options.landlock,
            "isolation": options.isolation,
            "hidden": list(options.hidden),
            "host_scratch": str(self.scratch),
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
            # ended, not reaped until the sweep is done: its pid, which names its cgroups, its
            # user and its session, stays its own meanwhile
            self.process.ended(timeout=wait_s)  # how it ended, if it did
            self.process.kill()
            self.process.ended()
            for group in privileges.cgroup_paths(self.process.pid):
                privileges.empty_and_remove_cgroup(group)
            uid = None
            if os.geteuid() == 0:  # every process of the hand-in's own user, wherever it is
                uid, _ = privileges.hand_in_ids(self.process.pid)
                privileges.end_processes_of(uid)
                self.squatted = [  # its own scratch folder, its user's, is no squat
                    path
                    for path in privileges.remove_files_of(uid)
                    if os.path.basename(path).startswith(scratch.PREFIX)
                    and path != str(self.scratch)
                ]
            if orphans_possible:
                with _SWEEPING:  # one thread at a time: none reaps what another one scanned
                    # graded as root, only this hand-in's user's: another hand-in's are its own
                    # thread's to end
                    pid = self.process.pid
                    kill_new_children(lambda: self.warm.strays(self.before, uid, session=pid))
            returncode = self.process.wait()
            self.warm.forget(self.process)
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        if self.scratch is not None and os.path.lexists(self.scratch):
            scratch.remove(self.scratch)
        return returncode


_SWEEPING = threading.Lock()

# A grading thread that grades hand-in after hand-in keeps one spare runner: forked, sent its
# job and building its sandbox (on another core) while the thread's hand-in runs, ends and is
# judged. No hand-in code runs in a spare before it is taken for the next hand-in
# (:func:`_spare_for`), so it is that hand-in's runner as if forked then; until then it is
# not in use (:meth:`WarmParent.died_during` does not count it).
_SPARES = threading.local()


def keep_spares(on: bool | Callable[[], bool], lanes: Lanes | None = None) -> None:
    """Whether the calling thread, after each hand-in that ran to its end, starts the runner
    of its next one at once (a batch's grading thread; a callable says whether a next one is
    to come); off, it closes any spare it holds. With ``lanes`` (a batch's, shared by its
    grading threads: :mod:`coursekit.grading.sandbox.lanes`), spares go to the batch's pool,
    and a hand-in holds one of the batch's places until its last test has answered."""
    _SPARES.on, _SPARES.lanes = on, (lanes if on else None)
    if not on:
        spare, _SPARES.runner = getattr(_SPARES, "runner", None), None
        if spare is not None:
            spare[0].close(wait_s=0, orphans_possible=True)


def close_spares(lanes: Lanes) -> None:
    """Close the spares left in a batch's pool (once its grading threads have ended): no
    hand-in code ran in them, so no sweep for strays."""
    for runner, _ in lanes.take_all_spares():
        runner.close(wait_s=0, orphans_possible=False)


def _start_spare(options: Options, limits: Limits, warm: WarmParent) -> None:
    on, lanes = getattr(_SPARES, "on", False), getattr(_SPARES, "lanes", None)
    if not (on() if callable(on) else on):
        return
    if lanes is not None and not lanes.reserve_spare():  # (one place in the pool per fork)
        return
    if lanes is None and getattr(_SPARES, "runner", None) is not None:
        return
    try:
        runner = _Runner(options, limits, warm, spare=True)
    except (Exception, SystemExit):  # noqa: BLE001 - no spare: the next hand-in forks its own
        if lanes is not None:
            lanes.cancel_spare()
        return
    try:
        channel.send_by(runner.to_runner, runner.job, time.monotonic() + 5)
    except BaseException as error:
        if lanes is not None:
            lanes.cancel_spare()
        runner.close(wait_s=0, orphans_possible=True)
        if isinstance(error, (channel.TimedOut, OSError)):
            return
        raise
    if lanes is None:
        _SPARES.runner = (runner, (options, limits))
    else:
        lanes.put_spare((runner, (options, limits)))


def _spare_for(options: Options, limits: Limits, warm: WarmParent) -> _Runner | None:
    """A spare runner (the calling thread's, or its batch's), taken into use (its job
    already sent), or None (none, another job's, or its warm parent died since: then it is
    closed)."""
    lanes = getattr(_SPARES, "lanes", None)
    if lanes is not None:
        spare = lanes.take_spare()
    else:
        spare, _SPARES.runner = getattr(_SPARES, "runner", None), None
    if spare is None:
        return None
    runner, job = spare
    if job != (options, limits) or warm.stopped.is_set() or not warm.adopt(runner.process):
        # (its sandbox may be built: without a PID namespace, its processes are swept)
        runner.close(wait_s=0, orphans_possible=True)
        return None
    runner.before = children()  # what is the grader's now: as if it were forked now
    return runner


def _one_attempt(cells, skip, crashed, tasks, limits: Limits, options: Options, budget_s, warm):
    if warm.stopped.is_set():
        raise SystemExit("grading was stopped")
    # a place first (lanes.py): the wait for one is no part of the hand-in's time
    lanes = getattr(_SPARES, "lanes", None)
    slot = lanes.enter(warm.stopped.is_set) if lanes is not None else None
    started = time.monotonic()
    notebook_deadline = started + budget_s
    attempt = Attempt()
    stop = {signal.SIGTERM, signal.SIGINT}  # a worker stops only after cleaning up
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)
    runner = tail = None
    death_judged = spare_started = False

    def start_spare_once() -> None:
        """Fork the next hand-in's runner once this one works on a command that takes a
        while (:data:`coursekit.grading.sandbox.session.PATIENCE_S`; the check after the
        cells always does): the spare's sandbox builds on another core meanwhile."""
        nonlocal spare_started
        if not spare_started:
            spare_started = True
            signal.pthread_sigmask(signal.SIG_BLOCK, stop)
            try:
                _start_spare(options, limits, warm)
            finally:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, stop)

    try:
        runner = _spare_for(options, limits, warm)
        job_sent = runner is not None
        runner = runner or _Runner(options, limits, warm)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stop)
        tail = Tail(runner.output)
        reader = channel.FrameReader(runner.from_runner)
        session = Session(runner.process, runner.to_runner, reader, tail, attempt)
        if not job_sent:
            session.send(runner.job, notebook_deadline)
        ready_by = min(notebook_deadline, started + READY_TIMEOUT_S)
        try:
            attempt.applied = session.expect("ready", ready_by).get("applied") or {}
        except Ended as ended:
            if ended.why == "timeout":
                raise RunnerSetupError(
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
            reply = session.command(
                "cell", deadline, index, while_waiting=start_spare_once, source=source
            )
            attempt.cells[index] = {"index": index, **cell_record(reply)}
        # The memory tests first: the runner reads torch's dispatcher before the first test,
        # and, when that is a memory test, while its fork measures (on another core).
        order = execution_order(tasks)
        running = [i for i in order if i not in crashed]
        attempt.position = ("check",)
        session.command(
            "check",
            min(notebook_deadline, time.monotonic() + 30),
            while_waiting=start_spare_once,
            memory_first=bool(running) and measures_memory(tasks[running[0]]),
        )
        # the dispatcher is read again after the last test that runs: once it has answered,
        # then "finished" (runner.py)
        final = running[-1] if running else -1
        last_answer = None  # the last test's (its index and nonce)
        for place, index in enumerate(order):
            task = tasks[index]
            if index in crashed:
                attempt.tasks[index] = crashed_record(task, crashed[index])
                continue
            attempt.position = ("task", index)
            # A test that ran out of time gets one more try before it counts, unless its
            # function already ran out of time twice on an earlier test.
            tries = 1 if task["question"] in attempt.slow_questions else 2
            for try_number in range(tries):
                deadline = min(notebook_deadline, _backstop(limits.task_timeout_s, limits))
                # the harness is compared with its seal after each question's last test
                after = order[place + 1] if place + 1 < len(order) else None
                last = after is None or tasks[after]["question"] != task["question"]
                reply = session.command(
                    "task",
                    deadline,
                    index,
                    while_waiting=start_spare_once,
                    question=task["question"],
                    spec=task["spec"],
                    last=last,
                    final=index == final,
                )
                raise_a_grader_fault(reply)
                if index == final:
                    last_answer = reply
                    if reply.get("status") == "timeout" and try_number + 1 < tries:  # tried again:
                        _finished(session, reply)  # its checks first
                        last_answer = None
                if reply.get("status") != "timeout":
                    break
            else:  # (a memory test's problem is its own: it runs first, and says nothing)
                if not measures_memory(task):
                    attempt.slow_questions.add(task["question"])
            attempt.tasks[index] = task_record(reply)
        if last_answer is not None:
            # The next hand-in may start while this one finishes, where what this one leaves
            # running is told apart from the next one's (its own user, or a PID namespace):
            # else the sweep that ends this one could end the next one's processes.
            namespaces = attempt.applied.get("namespaces") or []
            if slot is not None and (attempt.applied.get("hand_in_user") or "pid" in namespaces):
                slot.leave()
            # Part of the last test: a process that ends, stops answering or writes out of
            # turn here did so in that test (so it is tried again without it, as a test that
            # crashed), and keeps nothing of it (run_hand_in reads "finish" as "task").
            attempt.position = ("finish", final)
            _finished(session, last_answer)
        attempt.position = ("end",)
        with contextlib.suppress(Ended):
            session.send({"kind": "end"}, time.monotonic() + 5)
        attempt.parent_died, death_judged = warm.died_during(runner.process), True
        if not attempt.parent_died:  # the spare, if none could be forked while it ran
            signal.pthread_sigmask(signal.SIG_BLOCK, stop)
            _start_spare(options, limits, warm)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, stop)
    except Ended as ended:
        attempt.ended = ended
        finishing = attempt.position[0] == "finish"  # (on a deadline of its own)
        if ended.why == "timeout" and time.monotonic() >= notebook_deadline and not finishing:
            ended.why = "notebook"
    finally:
        signal.pthread_sigmask(signal.SIG_BLOCK, stop)
        if runner is not None:
            if runner.process is not None and not death_judged:
                attempt.parent_died = warm.died_during(runner.process)
            exited = attempt.ended is not None and attempt.ended.why == "exit"
            namespaces = attempt.applied.get("namespaces") or []
            attempt.returncode = runner.close(
                wait_s=2 if exited else 0,
                orphans_possible=bool(attempt.applied) and "pid" not in namespaces,
            )
            attempt.lost = runner.process is not None and runner.process.lost
            if runner.squatted:
                shown = ", ".join(os.path.basename(p) for p in runner.squatted[:3])
                attempt.flags.append(
                    f"it made files named like the grader's own scratch folders ({shown}"
                    f"{', ...' if len(runner.squatted) > 3 else ''}), which the grader never "
                    "uses: its names are random"
                )
        if slot is not None:  # (after the close: see the last answer above)
            slot.leave()
        if tail is not None:
            tail.drain()
            attempt.output = tail.text()
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stop)
    attempt.seconds = time.monotonic() - started
    return attempt


# Wall-clock seconds for the last test's own checks (some 0.1 s of CPU, 50 times over), with
# no place held: the most a hand-in's process runs beside the next hand-in, in each try.
FINISH_S = 5.0


def _finished(session: Session, last_answer: dict) -> None:
    """Wait for the runner's "finished" after the last test's answer, taking the flags its
    last checks (torch's dispatcher read again, the seal compared) send meanwhile. Its own
    deadline, not the notebook's: a hand-in whose last answer came just in time is not
    charged with the grader's checks."""
    deadline = time.monotonic() + FINISH_S
    session.expect("finished", deadline, last_answer.get("index"), last_answer.get("nonce"))


def execution_order(tasks: list[dict]) -> list[int]:
    """The order the tests run in: the memory tests first (each question's own order kept),
    then the others, as listed. Their records keep their places in ``tasks``."""
    measuring = [i for i, task in enumerate(tasks) if measures_memory(task)]
    return measuring + sorted(set(range(len(tasks))) - set(measuring))


def measures_memory(task: dict) -> bool:
    """Whether a test is a memory test (as the runner tells: its spec says so)."""
    spec = task.get("spec")
    return isinstance(spec, dict) and spec.get("memory") is True


def _backstop(limit_s: float, limits: Limits) -> float:
    """The wall-clock deadline past which a cell or test is ended from outside: its CPU
    limit times ``wall_factor`` (it should have stopped itself long before), plus a grace."""
    return time.monotonic() + limit_s * limits.wall_factor + GRACE_S


def sweep_leftovers() -> list[str]:
    """Remove what a grading run that was killed outright left behind: host scratch folders
    (:func:`coursekit.grading.sandbox.scratch.sweep`) and empty cgroups named after processes
    that no longer exist. What a live process (another grading run's) still uses is left
    alone. Returns what was removed."""
    return scratch.sweep() + privileges.remove_stale_cgroups()


def _why(attempt: Attempt, limits: Limits) -> str:
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
    # A test that ends the process is skipped from the next try on, with the tests of its
    # question listed after it. A memory test is listed last but runs first: one that ends
    # the process skips only itself, as when it ran last, and may so cost a try of its own.
    for _ in range(retries + 1 + sum(map(measures_memory, tasks))):
        wall_s = limits.hand_in_timeout_s * limits.wall_factor
        budget_s = wall_s - run.seconds  # one wall-clock backstop for all the tries
        if budget_s <= 1:
            break
        attempt = _one_attempt(cells, skip, crashed, tasks, limits, options, budget_s, warm)
        run.seconds += attempt.seconds
        if attempt.lost and attempt.position != ("start",):
            raise GraderFault(
                "the grader lost track of the hand-in's process (it was reaped elsewhere in "
                "the grader): the grader's fault, not the hand-in's"
            )
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
        if where[0] == "finish":  # the last test's own checks: a part of that test
            where = ("task", where[1])
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
        raise RunnerSetupError(
            f"the sandbox's process ended before it was ready ({_why(attempt, limits)})"
            + (": " + " / ".join(tail) if tail else "")
        )
    run.failure = "The notebook's process ended before grading finished: " + (
        _why(attempt, limits)
        if attempt
        else f"it took too long: past {limits.hand_in_timeout_s * limits.wall_factor:.0f} s"
    )
    return run


def raise_a_grader_fault(reply: dict) -> None:
    """A test's reply that says the grader's own machinery failed in the hand-in's process
    (a memory test that could not fork, :class:`coursekit.checks.memory_peak.MeasurementFailed`):
    a :class:`GraderFault`, so the hand-in is graded again, never scored by it."""
    if reply.get("status") == "grader_fault":
        raise GraderFault(f"{reply.get('why')!s:.300}: the grader's fault, not the hand-in's")
