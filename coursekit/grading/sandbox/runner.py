"""The hand-in's process: runs inside the sandbox, never in the grader, and does what the
grader asks, one command at a time.

The process tree that leads here (:mod:`coursekit.grading.sandbox.process_tree`) is forked from a
warm parent (:mod:`coursekit.grading.sandbox.fork_server`) that imported what grading needs once,
while still trusted. :func:`serve` confines this process
(:func:`coursekit.grading.sandbox.confinement.confine`) and then answers the grader's commands:
run this cell, run this test (a question's function on one spec), end. Each answer echoes the
command's nonce. Cells never see a spec: the grader sends the first one after the last cell has
answered, and one spec per test. The runner judges nothing; scores are decided by the grader,
in a process this code never ran in.

The functions that run cells and tests (:func:`run_cell`, :func:`run_task`,
:func:`handled_signals`) are called through a private copy of this module's globals, so they
are kept here, in the module :func:`serve` copies.
"""

from __future__ import annotations

import gc
import io
import os
import resource
import signal
import sys
import threading

from coursekit.grading.sandbox import channel
from coursekit.grading.sandbox.confinement import confine
from coursekit.grading.sandbox.exit_codes import SETUP_FAILED
from coursekit.grading.sandbox.tampering import READ_OUT


class CellTimeout(BaseException):
    """Raised by the timer; a BaseException so ``except Exception`` in a hand-in can't eat it."""


class CappedText(io.TextIOBase):
    """A text stream that writes to a file descriptor until a byte cap, then drops the rest."""

    def __init__(self, fd: int, cap_bytes: int):
        self._fd, self._left = fd, cap_bytes

    def write(self, text: str) -> int:
        data = str(text).encode("utf-8", "backslashreplace")
        if self._left > 0:
            chunk = data[: self._left]
            self._left -= len(chunk)
            try:
                channel.write_all(self._fd, chunk)
            except OSError:
                self._left = 0
        return len(text)

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False


_TIME_LIMIT_REACHED = CellTimeout("time limit reached")


def _on_timer(signum, frame, timeout=_TIME_LIMIT_REACHED, bare=BaseException.with_traceback):
    """Raise the time limit: an instance made once, so that no method of a class runs here
    (``CellTimeout.__init__`` can be replaced without an audited step, and would run
    wherever the timer struck). Defaults, not globals: see serve's on_timer_alone."""
    raise bare(timeout, None)


def handled_signals() -> list:
    """Signals with a handler of the notebook's: a handler is called with the frame that was
    running, the harness's too, and Python audits no part of that. Python's own Ctrl-C
    handler and the runner's timers are not the notebook's."""
    found = []
    for number in signal.valid_signals():
        try:
            handler = signal.getsignal(number)
        except (OSError, ValueError):
            continue
        if handler in (None, signal.SIG_DFL, signal.SIG_IGN, signal.default_int_handler):
            continue
        if getattr(handler, "__code__", None) is _on_timer.__code__:
            continue
        found.append(signal.Signals(number))
    return found


def freeze_handlers(on_timer) -> bool:
    """The runner's handlers set (its timers'; SIGCHLD by default, so that a memory test sees
    every child; SIGINT ignored), every other Python handler taken off, then all frozen for this
    process and its children (:func:`coursekit.grading.sandbox.seccomp.install_no_handlers`):
    a handler is handed the running frame, and through it the runner's own frames, by a
    signal a hand-in raises (``signal.raise_signal``, ``_thread.interrupt_main``) with no
    step Python audits. False where the filter cannot be installed (then the runner sets its
    timers' handler again before each cell and test, and looks for others, as before)."""
    from coursekit.grading.sandbox import seccomp

    for number in handled_signals():
        signal.signal(number, signal.SIG_DFL)
    for number in (signal.SIGALRM, signal.SIGPROF):
        signal.signal(number, on_timer)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    # Python's Ctrl-C handler off too (the grader stops its runners itself): asyncio.run sets
    # a handler of its own only over that one, and so runs here
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        return seccomp.supported() and seccomp.install_no_handlers()
    except OSError:
        return False


def _error_line(exc: BaseException) -> str:
    try:
        text = str(exc).strip()
    except Exception:  # a hand-in's exception whose __str__ raises
        text = ""
    text = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__


_HANDLERS_FROZEN = False  # set in serve's private copy once no handler can change


def _arm_timers(cpu_s: float, wall_factor: float) -> None:
    """CPU time is the limit (a busy machine must not cost points); the wall clock, at
    ``wall_factor`` times it, ends code that waits without computing. The timers' handler is
    set again unless handlers are frozen (:func:`freeze_handlers`): then it is still set."""
    if not _HANDLERS_FROZEN:
        signal.signal(signal.SIGPROF, _on_timer)
        signal.signal(signal.SIGALRM, _on_timer)
    signal.setitimer(signal.ITIMER_PROF, cpu_s)
    signal.setitimer(signal.ITIMER_REAL, cpu_s * wall_factor)


def _disarm_timers() -> None:
    signal.setitimer(signal.ITIMER_PROF, 0)
    signal.setitimer(signal.ITIMER_REAL, 0)


def run_cell(shell, source: str, timeout_s: float, wall_factor: float) -> dict:
    """Run one cell with its timers; its status: ok, error (with one line), or timeout."""
    _arm_timers(timeout_s, wall_factor)
    try:
        result = shell.run_cell(source, store_history=False, silent=False)
    except CellTimeout:  # raised outside IPython's own handler
        result = None
    finally:
        _disarm_timers()
    error = None if result is None else (result.error_before_exec or result.error_in_exec)
    if result is None or isinstance(error, CellTimeout):
        return {"status": "timeout"}
    if error is not None:
        return {"status": "error", "error": _error_line(error)}
    return {"status": "ok"}


def run_task(
    namespace: dict,
    questions: dict,
    task: dict,
    timeout_s: float,
    wall_factor: float,
    measure=None,
) -> dict:
    """Call the hand-in's function on one spec; outputs are plain data, nothing is judged.
    With ``measure``, the spec is a memory test's: see :func:`run_memory_task`."""
    from coursekit.checks.memory_peak import MeasurementFailed
    from coursekit.checks.registry import error_message

    name = task["question"]
    fn = namespace.get(name)
    if not callable(fn):
        return {"status": "missing"}
    _arm_timers(timeout_s, wall_factor)
    try:
        if measure is None:
            outputs = questions[name].run(fn, task["spec"])
        else:
            outputs = _primed_and_measured(questions[name], fn, task["spec"], measure)
        return {"status": "ok", "outputs": outputs}
    except NotImplementedError:
        return {"status": "not_attempted"}
    except MeasurementFailed as error:  # raised by the check's own code, in this process
        return {"status": "grader_fault", "why": str(error)[:300]}
    except CellTimeout:
        return {"status": "timeout"}
    except BaseException as exc:  # SystemExit, KeyboardInterrupt...: all the hand-in's
        return {"status": "error", "message": error_message(exc)}
    finally:
        _disarm_timers()


def run_memory_task(
    namespace: dict, questions: dict, task: dict, timeout_s: float, wall_factor: float, measure
) -> dict:
    """A memory test: the hand-in's function primed here, on a problem of the spec's kind
    but of a seed it is not told (:func:`coursekit.checks.window_memory.prime`), then
    ``measure(question, fn, spec)``: the runner's own path (:func:`serve`), where the measured
    problem is made. Nothing of the spec's seed reaches code the notebook could have
    changed before the measure has checked it. Outputs are plain data, nothing is judged."""
    return run_task(namespace, questions, task, timeout_s, wall_factor, measure)


def _primed_and_measured(question, fn, spec: dict, measure) -> dict:
    from coursekit.checks.window_memory import prime

    prime({k: v for k, v in spec.items() if k != "seed"}, question.memory_call(fn)[0])
    return measure(question, fn, spec)


_HANDLER_TEXT = (
    "Your notebook set a signal handler, which is handed the grader's running code, so the "
    "memory test did not run; your instructor is told."
)
_LIMITS_TEXT = (
    "Your notebook lowered the process's limit on {limits}, so the memory test could not run."
)


def lower_limit(now: tuple, then: tuple, infinite: int = resource.RLIM_INFINITY) -> bool:
    """Whether a (soft, hard) resource limit is below what it was."""

    def size(value: int) -> float:
        return float("inf") if value == infinite else value

    return any(size(a) < size(b) for a, b in zip(now, then, strict=True))


def torch_set_num_threads():
    """torch's ``set_num_threads``, taken before any hand-in code runs."""
    import torch

    return torch.set_num_threads


def _close_all_but(keep: set[int]) -> None:
    """Close every inherited descriptor but ``keep`` (and 0, 1, 2)."""
    last = 2
    for fd in sorted(keep | {2}):
        os.closerange(last + 1, fd)
        last = fd
    os.closerange(last + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0])


def _move_high(fd_in: int, fd_out: int) -> tuple[int, int]:
    """The channel, moved to the highest descriptor numbers, close-on-exec.

    The seccomp filter pins them by number, in children too: after an ``exec`` (which
    closes them) a program reuses free numbers from the lowest up, so it never meets these.
    """
    top = resource.getrlimit(resource.RLIMIT_NOFILE)[0] - 1
    spare = [os.dup(fd_in), os.dup(fd_out)]  # neither original may sit on a target number
    os.close(fd_in)
    os.close(fd_out)
    for fd, number in zip(spare, (top - 1, top), strict=True):
        os.dup2(fd, number, inheritable=False)
        os.close(fd)
    return top - 1, top


_TRIPWIRES_BROKEN = (
    "The memory test could not run: the notebook broke the grader's tripwires on "
    "coursekit's own answers, through which the test warms up."
)


def counted(answer_module: str | None, tested_module: str | None, where: str) -> bool:
    """Whether a call to coursekit's answer to a question of ``answer_module``, found at
    ``where``, counts while a question of ``tested_module`` is tested. An earlier module's
    library answer is library code to a later one (module 7's tuner may plan its window with
    module 5's planner); the checks' own code (a reference, a warm-up, their loops) is no
    one's library, and a later module's answer is not yet taught. Modules are ordered by
    their names (``01_accumulation`` < ``04_distributed``). An answer read out of its
    tripwire (:data:`READ_OUT`) counts whenever it happens, in a cell too."""
    if where == READ_OUT:  # the answer taken out of its tripwire: tested or not
        return True
    if type(answer_module) is not str or type(tested_module) is not str:
        return False
    if where.startswith(("coursekit.checks.", "the check's reference")):
        return True
    return answer_module >= tested_module


def _answer_calls(report, modules: dict[str, str], testing: list[str]):
    """The tripwires' record of calls to coursekit's answers, as a generator: each
    ``(question, where)`` sent is a call to coursekit's answer to ``question``, reported when
    :func:`counted` says so (while a question is tested; an answer read out of its tripwire,
    in a cell too). Anything else sent (``None``: whether
    it is still whole) is passed over. An exception met here (a timer's, one thrown in) is
    handed back, to be raised by the caller, and the record goes on. What it holds lives in
    its frame alone (see where ``serve`` makes it)."""
    raised = None
    while True:
        try:
            while True:  # within the try: a signal met at a jump back is caught too
                sent = yield raised
                raised = None
                # plain strings alone (no method of the notebook's runs in this frame)
                if type(sent) is not tuple or len(sent) != 2:
                    continue
                if not all(type(x) is str for x in sent):
                    continue
                question, where = sent
                if not counted(modules.get(question), modules.get(testing[0]), where):
                    continue
                if not testing[0]:
                    report(f"a cell took coursekit's own answer to {question} {where}")
                    continue
                if question == testing[0]:
                    report(f"its {question} called coursekit's own answer ({where})")
                else:
                    report(
                        f"its {testing[0]} called coursekit's own answer to {question} ({where})"
                    )
        except GeneratorExit:
            raise
        except BaseException as error:  # noqa: BLE001 - a timer's CellTimeout, a throw():
            # handed back without a way into this frame (BaseException's own method: no
            # __setattr__ of a notebook's class runs here), and the record goes on
            raised = BaseException.with_traceback(error, None)


def serve(
    fd_in: int, fd_out: int, job: dict, namespaces, applied: dict, trusted, user, python
) -> None:
    """The hand-in's process: confine, then answer the grader's commands until "end"."""
    fd_in, fd_out = _move_high(fd_in, fd_out)
    _close_all_but({fd_in, fd_out})
    from coursekit.grading.sandbox import gc_lock, harness_seal, instruments
    from coursekit.grading.sandbox import global_state as shared_global_state
    from coursekit.grading.sandbox import tampering as shared_tampering
    from coursekit.grading.sandbox import torch_registrations as shared_registrations

    # What speaks to the grader, and the instruments, run on objects taken now and on private
    # copies of their modules' globals: a notebook that rebinds names in those modules, in
    # os or in builtins, does not reach them.
    tampering = shared_tampering.private_copy(shared_tampering, modules_frozen=True)
    own, wire, state, registrations = (
        shared_tampering.private_copy(sys.modules[__name__]),
        shared_tampering.private_copy(channel),
        shared_tampering.private_copy(shared_global_state),
        shared_tampering.private_copy(shared_registrations),
    )
    # The timers' handler, which any code reads back with signal.getsignal: made over empty
    # globals (it reads none: the timeout's class is a default, which no change escapes the
    # audit hook). The private copy's own _on_timer would hand over, through its __globals__
    # (read without an audited step), the very names the runner calls (run_task...).
    on_timer_alone = type(own._on_timer)(
        own._on_timer.__code__,
        {"__name__": __name__, "__builtins__": {}},
        "_on_timer",
        own._on_timer.__defaults__,
    )
    own._arm_timers.__globals__["_on_timer"] = own._on_timer = on_timer_alone
    made_since_the_seal = [on_timer_alone]  # sealed too, once the records are taken
    encode, receive = wire.encode_plain, wire.receive
    lock = threading.RLock()
    send_payload = channel.payload_sender(fd_out, lock)

    def answer(message: dict) -> None:
        """Send a reply; a test's outputs travel as JSON text, checked and capped here."""
        if "outputs" in message:
            message = dict(message)
            try:
                text = encode(message.pop("outputs"), max_bytes=channel.MAX_OUTPUTS_BYTES)
                message["outputs_json"] = text.decode("ascii")
            except channel.NotPlainData as error:
                message["status"] = "error"
                message["message"] = (
                    f"{message.get('question', 'Your function')} returned something that is "
                    f"not plain data, or too much of it ({error})."
                )
        send_payload(encode(message))

    try:
        applied.update(confine(job, namespaces, (fd_in, fd_out), user, python))
    except Exception as error:
        answer({"kind": "failed", "why": f"confining the hand-in failed: {error}"})
        os._exit(SETUP_FAILED)
    # orphans of the hand-in's processes come back to this one, where a memory test finds
    # and ends them before it measures (no process may work beside a measured call)
    from coursekit.checks import memory_peak, window_memory

    applied["subreaper"] = memory_peak.set_subreaper()
    peak = shared_tampering.private_copy(memory_peak)
    end_children = peak.end_children
    limits = job["limits"]
    sys.stdout = sys.stderr = CappedText(1, limits["output_bytes"])
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    from coursekit.checks import QUESTIONS

    questions = dict(QUESTIONS)  # held here: replacing an entry of the registry changes nothing
    config = Config()
    config.HistoryManager.enabled = False  # no history database in the scratch folder
    config.InteractiveShell.colors = "NoColor"  # tracebacks as plain text in the output
    shell = InteractiveShell.instance(config=config)

    send_flag, reported_flags = channel.flag_sender(fd_out, lock), set()

    def report(what: str) -> None:  # each distinct finding once, and not without end
        if what not in reported_flags and len(reported_flags) < tampering.MAX_REPORTS:
            reported_flags.add(what)
            send_flag(what)

    # The instruments the warm parent made before any hand-in existed, taken out of their
    # module now, so that no hand-in code finds them by name.
    taken = instruments.take()
    provenance, tripwire_provenance, judge, sealed_record, dispatcher = taken
    # the seal's comparison, from a private copy too: a notebook that rebinds a name it
    # calls (in its module, in builtins) must not blind it (see harness_seal.py)
    seal_copy = shared_tampering.private_copy(harness_seal)
    changes, rebound_names = seal_copy.changes, seal_copy.rebound_names
    put_back_names, held_in_child = seal_copy.put_back_names, []
    for record in (provenance, tripwire_provenance):
        record.trust(trusted)  # the modules loaded by now are the libraries'
        record.forget_globals(shell.user_ns)  # but __main__ is now the notebook's own
        copies = (tampering.private_copy, own.run_task, wire.receive, state.restore, end_children)
        copies += (peak.measured_in_child, changes)
        copies += (registrations.dispatcher_changes, registrations.read_until)
        for copy in copies:
            record.trust_globals(copy.__globals__)  # the private copies run library code
            made_since_the_seal += [
                f for f in copy.__globals__.values() if type(f) is type(on_timer_alone)
            ]
        # a change of their code or defaults is flagged whoever makes it: the timers'
        # handler, read back by any code, rewritten through functools.update_wrapper (a
        # library helper) was once handed the running frame unflagged
        record.seal_also(made_since_the_seal)
    testing: list[str] = [""]  # the question whose test runs now
    # The tripwires' judge (tampering.install_tripwires) hands each call it finds to this
    # record, a generator whose frame keeps what the runner must not share (the flags sent
    # so far, the questions it runs, the question tested now): reaching those takes gi_frame
    # or gc.get_referents, which the audit hook reports. The judge takes the first record
    # it is handed, this one, before any hand-in code runs. A generator closed or broken
    # from outside is seen at the next task. (Made from the private copy: the builtins and
    # the rule it reads, ``counted``, are the copy's.)
    calls = own._answer_calls(report, {n: q.module for n, q in questions.items()}, testing)
    next(calls)
    ping = calls.send
    judge(("reporter", calls.send))

    def tripwires_intact() -> bool:
        try:
            whole = judge(("ping",))[1] is True  # the judge answers, with a record
            ping(None)  # and so does the record
        except StopIteration:
            return False
        except ValueError:  # already running (a thread of the notebook's is in it): whole
            return True
        return whole

    tampering.install_audit_hook(report, trusted, provenance, (tripwire_provenance,))
    # torch's and the interpreter's state as no hand-in code has left it, put back before
    # and after each test (modes, global hooks, settings, tracing: see global_state.py)
    state.silence()  # logging off, warnings ignored: see global_state.silence
    baseline, restore = state.take(), state.restore

    dispatcher_changes, dispatcher_reading = (
        registrations.dispatcher_changes,
        registrations.dispatcher_reading,
    )
    read_until = registrations.read_until
    gc_isenabled, gc_disable, gc_enable = gc.isenabled, gc.disable, gc.enable
    # the reading before the first test, when that is a memory test: begun as its fork
    # measures (read_while_measured), finished right after; due until then
    reading_due = [False]
    begun: list = []  # a reading begun while a fork measured: (digests so far, marks)

    def dispatcher_read(begun_reading: tuple | None = None) -> None:
        """Torch's dispatcher against its snapshot: a kernel registered by any way, the
        wrappers' included (before the first test, and after the last one's answer: 50 to
        90 ms). The wrappers (torch_registrations.watch) record what passes them, and
        put-back takes the notebook's back; this reading is for what they miss.
        ``begun_reading``: its first part, read while a memory test's fork measured,
        finished here. Due until it is done (a timer's exception in between leaves it due
        for the next test)."""
        try:
            reading = dispatcher_reading(dispatcher, *(begun_reading or ()))
            found = dispatcher_changes(dispatcher, reading)
        except Exception as error:  # noqa: BLE001 - a notebook's objects, raising when read
            found = [f"it left torch's dispatcher unreadable ({type(error).__name__})"]
        reading_due[0] = False
        for what in found:
            report(what)

    def read_while_measured(until: float) -> None:
        """The reading before the first test, where that test is a memory test: begun here,
        in the runner, once its fork is made (whose dispatcher is the one the measured call
        runs on), while the fork measures on another core. It runs with the GIL held
        (memory_peak.measured_in_child), so no code of the notebook's runs meanwhile: each
        step is one call of torch's from C, begun only before ``until``
        (torch_registrations.read_until); what is left is read once the fork has ended,
        before anything else runs."""
        begun[:] = [read_until(dispatcher, until)]

    def put_back() -> None:
        try:
            found = restore(baseline, provenance)
        except Exception as error:  # noqa: BLE001 - the notebook's objects, raising when read
            found = [f"it left state that could not be put back ({type(error).__name__})"]
        for what in found:
            report(what)

    import _signal  # its builtins: signal.py's wrappers read names a hand-in can rebind

    set_threads, set_handler = torch_set_num_threads(), signal.signal
    get_handler = _signal.getsignal
    sigchld, by_default = signal.SIGCHLD, signal.SIG_DFL
    mask, block, set_mask = signal.pthread_sigmask, signal.SIG_BLOCK, signal.SIG_SETMASK
    timers, on_timer = (signal.SIGALRM, signal.SIGPROF), own._on_timer
    blocked = frozenset(signal.valid_signals()) - {*timers}
    mask_before: list = []  # the signal mask a memory test replaced, until its answer is sent
    get_limit, lower = resource.getrlimit, own.lower_limit
    kept_limits = [
        (what, number, get_limit(number))
        for what, number in (
            ("address space", resource.RLIMIT_AS),
            ("data", resource.RLIMIT_DATA),
            ("stack", resource.RLIMIT_STACK),
            ("open files", resource.RLIMIT_NOFILE),
        )
    ]

    def timers_intact() -> None:
        """Where handlers are frozen, the timers' handler can still be lost: ``_signal`` run
        again (``_imp.exec_builtin``) reads every handler back as None, and a timer then
        ends nothing. It cannot be set again: the hand-in runs to the grader's own limit."""
        if frozen[0] and any(get_handler(number) is not on_timer for number in timers):
            report("it took the grader's time limits off (its signal handlers read again)")

    frozen = [False]
    reported: set[str] = set()  # the seal's findings reported so far
    measured_now = [False]  # whether this task's memory test compared the seal

    def measure(question, fn, spec: dict) -> dict:
        """A memory test's measured call, on the runner's own path: the harness compared with
        its seal just before the fork, torch's state put back in the child before anything
        else runs there, and the problem made in the child (memory_peak.measured_in_child).
        A change of the harness since the last comparison fails the test: made while the
        question's tests ran, it is there for this measure. One found before (a cell's) was
        flagged then; where it is a name rebound in a module, the fork puts the sealed one
        back before it measures. What the child put back of torch's state is flagged."""
        end_children()  # what the priming call left running
        if get_handler(sigchld) != by_default:  # ignored, a child is reaped unseen
            set_handler(sigchld, by_default)  # (never, where handlers are frozen)
        handlers = own.handled_signals()
        for number in handlers:
            report(f"it set a handler for {number.name}, which is given the running frame")
        if handlers:
            return {"error": _HANDLER_TEXT}
        lowered = [what for what, number, then in kept_limits if lower(get_limit(number), then)]
        if lowered:
            return {"error": _LIMITS_TEXT.format(limits=", ".join(lowered))}
        # no handler of the notebook's runs, with the frame it is given, until the answer is
        # sent (a signal from the measured child would otherwise run one in _wait); the
        # runner's timers alone, with the runner's handler
        for number in timers:
            if get_handler(number) is not on_timer:  # (never, where handlers are frozen)
                set_handler(number, on_timer)
        if not mask_before:
            mask_before.append(mask(block, blocked))

        earlier: list = []  # names rebound before, flagged then: put back in the fork

        def sealed() -> list[str]:
            measured_now[0] = True
            found = changes(sealed_record, provenance)
            new = [f"it changed {where}" for where in found if where not in reported]
            if found and not new:
                earlier[:] = [
                    n for n in rebound_names(sealed_record, provenance) if n[0] in reported
                ]
            return new

        def in_child() -> tuple[list[str], list[str]]:
            put_back_names(earlier, held_in_child)  # (a dict with odd keys made names only)
            set_threads(1)  # before any torch operation: the parent's pool is not here
            put_back = restore(baseline, provenance)
            # what was put back was the notebook's, and no longer held: a finalizer of its
            # may have run, and changed a name the warm-up is about to use
            return put_back, (sealed() if put_back or earlier else [])

        def make() -> tuple:
            call, warm_up_with = question.memory_call(fn)
            return window_memory.measurement(spec, call, warm_up_with)

        during = read_while_measured if reading_due[0] else None
        begun.clear()
        collecting = gc_isenabled()
        gc_disable()  # (and no finalizer of the notebook's until the reading is finished)
        try:
            outputs = peak.measured_in_child(
                make, sealed=sealed, in_child=in_child, alone=True, during=during
            )
            if reading_due[0]:  # the rest of the reading, before anything else runs, whole:
                held = mask(block, timers)  # the task's timers wait until it is done
                try:
                    dispatcher_read(begun.pop() if begun else None)
                finally:
                    mask(set_mask, held)
        finally:
            if collecting:
                gc_enable()
        for what in (*outputs.pop("put_back", ()), *outputs.get("tampered", ())):
            reported.add(what.removeprefix("it changed "))
            report(what)
        if outputs.get("beside"):
            report("a process it started ran beside its memory test")
        return outputs

    def looked_over(kind: str, last: bool, final: bool) -> None:
        """The harness against its seal: after the cells, and after each question's last
        test (a change that one test made and undid is seen only by the instruments above),
        but a memory test's, which compared it before its fork, unless it is the hand-in's
        last; and the signal handlers."""
        if kind == "check" or (kind == "task" and last):
            if not (measured_now[0] and kind == "task" and not final):
                found = changes(sealed_record, provenance)
                new = [where for where in found if where not in reported]
                for where in new[:10]:
                    report(f"it changed {where}")
                if len(new) > 10:
                    report(f"it changed {len(new) - 10} more names the grader runs")
                reported.update(found)  # all of them: a memory test fails only on a new one
            for number in own.handled_signals():
                report(f"it set a handler for {number.name}, which is given the running frame")

    # Compared once before any hand-in code runs (nothing can differ yet), and torch's state
    # put back once: the first comparison in a process forked from the warm parent copies
    # every page it touches (some 25 ms; the first put-back some 10), and a runner is built
    # ahead of its hand-in, on another core (driver.py).
    changes(sealed_record, provenance)
    put_back()  # (likewise: nothing to put back yet, and the pages it reads copied here)
    # the last steps before the first cell: from here no signal handler can be set or
    # changed, and no collection keeps what it finds (gc_lock.py): both hand over frames
    applied["gc_debug_locked"] = gc_lock.lock_debug()
    applied["handlers_frozen"] = frozen[0] = own.freeze_handlers(on_timer)
    own._arm_timers.__globals__["_HANDLERS_FROZEN"] = applied["handlers_frozen"]
    answer({"kind": "ready", "applied": applied})
    while True:
        try:
            command = receive(fd_in)
        except channel.Closed:
            os._exit(0)
        kind, nonce = command.get("kind"), command.get("nonce")
        if kind == "cell":
            reply = own.run_cell(
                shell, command["source"], limits["cell_timeout_s"], limits["wall_factor"]
            )
        elif kind == "task":
            testing[0], measured_now[0] = str(command.get("question", "")), False
            intact = tripwires_intact()
            if not intact:
                report("it changed the grader's tripwires on coursekit's own answers")
            # read once: the object checked is the one the test calls (put-back may run code
            # of the notebook's that rebinds the name: an object it lets go of, finalized)
            name = str(command.get("question", ""))
            graded = {name: shell.user_ns.get(name)}
            owner = tampering.coursekit_function(graded[name], provenance)
            if owner is not None:
                report(f"its {name} is coursekit's own answer ({owner})")
            put_back()
            spec = command.get("spec")
            timeouts = limits["task_timeout_s"], limits["wall_factor"]
            memory_test = isinstance(spec, dict) and spec.get("memory") is True
            if reading_due[0] and not memory_test:
                dispatcher_read()
            if memory_test:
                end_children()
                reply = own.run_memory_task(graded, questions, command, *timeouts, measure)
                if reply.get("status") == "grader_fault" and not (intact and tripwires_intact()):
                    # the warm-up, a right window the check keeps, is watched by the very
                    # tripwires the hand-in broke: its doing, not the grader's
                    reply = {"status": "error", "message": _TRIPWIRES_BROKEN}
            else:
                reply = own.run_task(graded, questions, command, *timeouts)
            put_back()  # what the test itself left on
            if not tripwires_intact():  # as the test left them
                report("it changed the grader's tripwires on coursekit's own answers")
        elif kind == "check":
            measured_now[0] = False
            put_back()  # what the cells left on (their torch.library registrations taken back)
            if command.get("memory_first") is True:  # read as its fork measures (above)
                reading_due[0] = True
            else:
                dispatcher_read()
            reply = {}
        else:
            sys.stdout.flush()
            os._exit(0)  # skip interpreter teardown: a hand-in's atexit hooks can't stall it
        # The last test's own checks (the dispatcher read again, the seal) come after its
        # answer, then "finished": the grader begins the next hand-in meanwhile, and takes
        # this one's findings before it ends the process (driver.py).
        final = kind == "task" and command.get("final") is True
        if not final:
            looked_over(kind, command.get("last", True), False)
        timers_intact()
        reply.setdefault("question", command.get("question"))
        answer({"kind": kind, "index": command.get("index"), "nonce": nonce, **reply})
        if final:  # (a memory test's mask still on: no handler of the notebook's runs here)
            dispatcher_read()  # (and the first reading, if it is still due)
            looked_over(kind, True, True)
            timers_intact()
            answer({"kind": "finished", "index": command.get("index"), "nonce": nonce})
        if mask_before:
            mask(set_mask, mask_before.pop())
