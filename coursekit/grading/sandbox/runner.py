"""The hand-in's side of grading: runs inside the sandbox, never in the grader.

Each hand-in's process is forked from a warm parent (:mod:`coursekit.grading.sandbox.warm_parent`,
``python -m coursekit.grading.sandbox.runner --warm FD``) that imported what grading needs once,
while still trusted (:func:`preload`), and is handed two pipes to the grader. It reads the
job (limits and options, no cells and no specs yet). Then it enters new namespaces and
forks: the child is process 1 of a new PID namespace ("init"), builds the hand-in's own root
file system (:mod:`coursekit.grading.sandbox.namespaces`) and forks the hand-in's process, which
confines itself (rlimits, capabilities, Landlock, seccomp) and then does what the grader
asks, one command at a time: run this cell, run this test (a question's function on one
spec), end. Each answer echoes the command's nonce. Cells never see a spec: the grader sends
the first one after the last cell has answered, and one spec per test. The runner judges
nothing; scores are decided by the grader, in a process this code never ran in.
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import os
import resource
import signal
import sys
import threading

from coursekit.grading.sandbox import channel

_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE = 1, 4
SETUP_FAILED = 70  # exit status of a sandbox that could not be set up
SCRATCH_PREFIX = "coursekit-hand-in-"  # + the runner's process id: a host scratch folder


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


def _on_timer(signum, frame):
    raise CellTimeout("time limit reached")


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


def _prctl(option: int, value: int) -> None:
    ctypes.CDLL(None).prctl(option, value, 0, 0, 0)


def _exit_like(status: int) -> None:
    """End this process the way the child with wait ``status`` ended (signal or code)."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1
    if code > 128 and os.getpid() != 1:  # init reported a signal as 128 + its number
        signal.signal(code - 128, signal.SIG_DFL)
        os.kill(os.getpid(), code - 128)
    os._exit(code)


# ------------------------------------------------------------------------------ confinement


def confine(
    job: dict,
    namespaces,
    channel_fds: tuple[int, ...] = (),
    user: tuple[int, int] | None = None,
    python: list[str] | None = None,
) -> dict:
    """Apply every limit the job asks for to this process; return what was applied.
    ``channel_fds`` (the pipes to the grader) are pinned by the seccomp filter; ``user``
    (uid, gid) is the hand-in's own user, taken on when the grader is root; ``python``: the
    folders Python and coursekit live in (never ``/`` nor the course's folder)."""
    from coursekit.grading.sandbox import landlock, privileges, seccomp

    limits = job["limits"]
    applied: dict = {}
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_AS, (limits["memory_bytes"], limits["memory_bytes"]))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["file_bytes"], limits["file_bytes"]))
    cpu = int(limits["hand_in_timeout_s"]) + 5
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a too-large write fails instead of killing
    if namespaces.network:  # loopback only, inside the new namespace: for gloo
        applied["loopback"] = privileges.loopback_up()
    if user is not None:  # graded as root: the hand-in's own user, owning nothing else
        privileges.become_hand_in_user(*user)
        applied["capabilities"] = "dropped"
        applied["hand_in_user"] = user[0]
    elif os.getuid() == 0 or namespaces.user:
        privileges.drop_all_capabilities()  # in a user namespace: the ones it gave
        applied["capabilities"] = "dropped"
    # RLIMIT_NPROC counts every process and thread of the (real) user, so leave room for
    # the ones it already runs (none but this one for a hand-in's own user); counted before
    # Landlock hides the other processes' folders of /proc.
    nproc = limits["max_processes"] + _processes_of(os.getuid())
    own_loopback = bool(namespaces.network and applied.get("loopback"))
    landlock_abi = landlock.abi_version() if job.get("landlock", True) else 0
    if landlock_abi >= 1:
        readable = readable_paths(python or [], job.get("hidden", []))
        if namespaces.pid:  # its own /proc: its own processes alone
            readable.append("/proc")
        else:  # the host's: this process's own folder, and the machine's facts
            readable += [f"/proc/{os.getpid()}", *(f"/proc/{name}" for name in _PROC)]
        # without a root of its own: its scratch folder, and /dev/shm for multiprocessing's
        # semaphores (what it leaves there is its user's, counted and removed)
        writable = (
            ["/scratch", "/tmp", "/dev/shm"] if namespaces.mount else [os.getcwd(), "/dev/shm"]
        )
        writable += [f"/dev/{name}" for name in _DEVICES]
        applied["landlock"] = landlock.restrict(
            readable, writable, block_tcp=not own_loopback, ephemeral_bind=not own_loopback
        )
    # IPv4 and IPv6 for gloo's one-process groups (module 2's and 4's checks): inside a
    # network namespace of its own they reach only its loopback; without one, TCP alone
    # (gloo's only need), which Landlock 4+ (Linux 6.7) holds to binding a port the kernel
    # picks, with no connection at all. Without Landlock, grading's own need wins: TCP
    # stays open (the grader listens on none), and grade warns of it.
    inet = "all" if own_loopback else "stream"
    applied["inet"] = inet
    applied["seccomp"] = seccomp.install(protected=channel_fds, inet=inet)
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    return applied


_ETC = ("ld.so.cache", "localtime", "passwd", "group", "nsswitch.conf", "fonts", "hosts")
_DEVICES = ("null", "zero", "full", "random", "urandom")
_SYSTEM = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/sys")
# Of the host's /proc (no PID namespace), what a process reads about the machine; and its own
# folder, /proc/<pid> (what /proc/self names), not another process's command line.
_PROC = ("cpuinfo", "meminfo", "stat", "filesystems", "mounts", "sys", "version", "loadavg")


def readable_paths(python: list[str], hidden: list[str]) -> list[str]:
    """What Landlock lets a hand-in read: an allow list, never a whole disk.

    ``python`` (the interpreter, its standard library, site-packages, coursekit's package:
    :func:`coursekit.grading.sandbox.namespaces.python_paths`), the system's programs and libraries,
    a few files of ``/etc`` and the harmless devices. A path that is ``/``, or holds a
    ``hidden`` folder (the course's, the Gradescope bundle's source), is left out, so the
    list can never grant the course's ``notebooks/``.
    """
    from pathlib import Path

    secret = [Path(h).resolve() for h in hidden]
    wanted = {*python, *_SYSTEM, *(f"/etc/{n}" for n in _ETC), *(f"/dev/{n}" for n in _DEVICES)}
    allowed = []
    for path in sorted(wanted):
        here = Path(path)
        if here == Path("/") or any(h.is_relative_to(here) for h in secret):
            continue  # it would hold a hidden folder (a venv or package inside one is fine)
        allowed.append(path)
    return allowed


def _processes_of(uid: int) -> int:
    """Threads (which RLIMIT_NPROC counts as processes) that ``uid`` runs now."""
    total = 0
    for name in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as handle:
                fields = dict(line.split(":", 1) for line in handle if ":" in line)
        except OSError:
            continue
        if int(fields.get("Uid", "-1").split()[0]) == uid:
            total += int(fields.get("Threads", "1").strip())
    return total


# ------------------------------------------------------------------------- running the work


def _error_line(exc: BaseException) -> str:
    try:
        text = str(exc).strip()
    except Exception:  # a hand-in's exception whose __str__ raises
        text = ""
    text = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__


def _arm_timers(cpu_s: float, wall_factor: float) -> None:
    """CPU time is the limit (a busy machine must not cost points); the wall clock, at
    ``wall_factor`` times it, ends code that waits without computing."""
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
    namespace: dict, questions: dict, task: dict, timeout_s: float, wall_factor: float
) -> dict:
    """Call the hand-in's function on one spec; outputs are plain data, nothing is judged."""
    from coursekit.checks.registry import error_message

    name = task["question"]
    fn = namespace.get(name)
    if not callable(fn):
        return {"status": "missing"}
    _arm_timers(timeout_s, wall_factor)
    try:
        outputs = questions[name].run(fn, task["spec"])
        return {"status": "ok", "outputs": outputs}
    except NotImplementedError:
        return {"status": "not_attempted"}
    except CellTimeout:
        return {"status": "timeout"}
    except BaseException as exc:  # SystemExit, KeyboardInterrupt...: all the hand-in's
        return {"status": "error", "message": error_message(exc)}
    finally:
        _disarm_timers()


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


def serve(
    fd_in: int, fd_out: int, job: dict, namespaces, applied: dict, trusted, user, python
) -> None:
    """The hand-in's process: confine, then answer the grader's commands until "end"."""
    fd_in, fd_out = _move_high(fd_in, fd_out)
    _close_all_but({fd_in, fd_out})
    from coursekit.grading.sandbox import harness_seal
    from coursekit.grading.sandbox import tampering as shared_tampering

    # What speaks to the grader, and the instruments, run on objects taken now and on private
    # copies of their modules' globals: a notebook that rebinds names in those modules, in
    # os or in builtins, does not reach them.
    tampering = shared_tampering.private_copy(shared_tampering)
    own, wire = (
        shared_tampering.private_copy(sys.modules[__name__]),
        shared_tampering.private_copy(channel),
    )
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

    # The instruments the warm parent made before any hand-in existed (prepare_instruments),
    # taken out of the module now, so that no hand-in code finds them by name.
    provenance, tripwire_provenance, reporter, arm_tripwires, sealed = _INSTRUMENTS.pop()
    provenance.trust(trusted)
    tripwire_provenance.trust(trusted)
    reporter.append(report)
    tampering.install_audit_hook(report, trusted, provenance)
    changes = harness_seal.changes
    answer({"kind": "ready", "applied": applied})
    reported: set[str] = set()
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
            if not arm_tripwires() or reporter[0] is not report:
                report("it changed the grader's tripwires on coursekit's own answers")
            owner = tampering.coursekit_function(shell.user_ns.get(command["question"]), provenance)
            if owner is not None:
                report(f"its {command['question']} is coursekit's own answer ({owner})")
            reply = own.run_task(
                shell.user_ns, questions, command, limits["task_timeout_s"], limits["wall_factor"]
            )
            if not arm_tripwires() or reporter[0] is not report:  # as the test left them
                report("it changed the grader's tripwires on coursekit's own answers")
        elif kind == "check":
            reply = {}
        else:
            sys.stdout.flush()
            os._exit(0)  # skip interpreter teardown: a hand-in's atexit hooks can't stall it
        # the harness against its seal: after the cells, and after each question's last test
        # (a change that one test made and undid is seen only by the instruments above)
        if kind == "check" or (kind == "task" and command.get("last", True)):
            for where in changes(sealed, provenance)[:10]:
                if where not in reported:
                    reported.add(where)
                    report(f"it changed {where}")
            for number in own.handled_signals():
                report(f"it set a handler for {number.name}, which is given the running frame")
        reply.setdefault("question", command.get("question"))
        answer({"kind": kind, "index": command.get("index"), "nonce": nonce, **reply})


def init(
    fd_in, fd_out, job: dict, namespaces, root_plan, trusted, applied: dict, user=None
) -> None:
    """Process 1 of the hand-in's PID namespace: build its root, start it, reap, end with it.

    When this process ends, the kernel kills every other process in the namespace. Without
    a root of its own, this process also keeps the hand-in's disk use under its scratch cap
    (:func:`_watch_scratch`), which no tmpfs holds there.
    """
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    scratch = None
    try:
        if namespaces.mount:
            from coursekit.grading.sandbox.namespaces import make_root

            applied["root"] = make_root(root_plan)
        else:
            # no root of its own: a folder on the host, named after the runner's process,
            # which the grader removes after it (or the next grading run, if it was killed)
            scratch = os.path.join(job["host_scratch_parent"], f"{SCRATCH_PREFIX}{os.getppid()}")
            os.mkdir(scratch, 0o700)
            if user is not None:
                os.chown(scratch, *user)
            os.chdir(scratch)
        home = os.getcwd()
        temporary = "/tmp" if namespaces.mount else home
        os.environ.update(HOME=home, TMPDIR=temporary, MPLCONFIGDIR=f"{home}/.matplotlib")
        import tempfile

        tempfile.tempdir = temporary  # not the warm parent's cached /tmp: its scratch's
    except Exception as error:
        failed = {"kind": "failed", "why": f"making the hand-in's root failed: {error}"}
        channel.write_frame(fd_out, channel.encode_plain(failed))
        os._exit(SETUP_FAILED)
    python = list(root_plan.read_only)
    child = os.fork()
    if child == 0:
        serve(fd_in, fd_out, job, namespaces, applied, trusted, user, python)
        os._exit(0)
    os.close(fd_in)
    os.close(fd_out)
    _prctl(_PR_SET_DUMPABLE, 0)  # the hand-in cannot read or trace this process
    limits = job["limits"]
    watch = scratch is not None and user is not None
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG if watch else 0)
        except ChildProcessError:
            os._exit(0)
        if pid == 0:  # nothing ended yet: look at the disk, then wait a little
            if _scratch_over(scratch, user[0], limits["scratch_bytes"], limits["scratch_files"]):
                os.kill(child, signal.SIGKILL)
                os._exit(SCRATCH_FULL)
            _wait_for_child(0.05)
            continue
        if pid == child:
            if os.WIFSIGNALED(status):
                os._exit(128 + os.WTERMSIG(status))
            os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def _closed_to_others(paths: list[str]) -> str | None:
    """Why a user of no group could not read Python's folders (a folder on the way that
    others may not enter, as /root is), or None: without a root of its own, the hand-in's
    user reads them where they are."""
    import stat
    from pathlib import Path

    for path in paths:
        here = Path(path)
        for folder in [*reversed(here.parents), here]:
            try:
                mode = folder.stat().st_mode
            except OSError:
                break
            wanted = stat.S_IXOTH | (stat.S_IROTH if folder == here else 0)
            if mode & wanted != wanted:
                return (
                    f"hand-ins run as a user of their own, which cannot read {path}: "
                    f"{folder} is mode {stat.S_IMODE(mode):o} (others may not "
                    f"{'read' if folder == here else 'enter'} it). Install Python and its "
                    "packages where every user can read them (a virtual environment "
                    "outside /root, as Gradescope's setup.sh makes), or grade where "
                    "namespaces can be made."
                )
    return None


SCRATCH_FULL = 71  # exit status of a hand-in ended for writing past its scratch cap


def _wait_for_child(seconds: float) -> None:
    """Sleep up to ``seconds``, waking early when a child ends (SIGCHLD)."""
    with contextlib.suppress(InterruptedError):
        signal.sigtimedwait([signal.SIGCHLD], seconds)


def _scratch_over(scratch: str, uid: int, most_bytes: int, most_files: int) -> bool:
    """Whether the hand-in's user has more than ``most_bytes`` on disk, or more than
    ``most_files`` files, in its scratch folder and the world-writable folders (a look
    every 50 ms, so a burst between two looks can pass the cap by what it writes meanwhile;
    each file is capped at ``file_bytes`` by RLIMIT_FSIZE)."""
    from coursekit.grading.sandbox.privileges import SHARED_WRITABLE

    roots = [scratch]
    for folder in SHARED_WRITABLE:
        with contextlib.suppress(OSError):
            roots += [e.path for e in os.scandir(folder) if _owned_by(e, uid)]
    used = files = 0
    for top in roots:
        stack = [top]
        while stack:
            path = stack.pop()
            try:
                info = os.lstat(path)
            except OSError:
                continue
            used += info.st_blocks * 512
            files += 1
            if used > most_bytes or files > most_files:
                return True
            if os.path.isdir(path) and not os.path.islink(path):
                with contextlib.suppress(OSError):
                    stack += [e.path for e in os.scandir(path)]
    return False


def _owned_by(entry, uid: int) -> bool:
    try:
        return entry.stat(follow_symlinks=False).st_uid == uid
    except OSError:
        return False


_INSTRUMENTS: list = []  # made once in the warm parent; each hand-in's process pops its copy


def prepare_instruments() -> None:
    """In the warm parent, after every import and before any hand-in is forked: the record of
    library code (:mod:`coursekit.grading.sandbox.provenance`), coursekit's answers wrapped in
    tripwires (with a record of their own: the wrappers' closures can be read), and the seal
    of the harness (:mod:`coursekit.grading.sandbox.harness_seal`). Made once, they cost a hand-in
    nothing; each hand-in's process takes them out of this module before its code runs."""
    from coursekit.checks import QUESTIONS
    from coursekit.grading.sandbox import harness_seal, tampering
    from coursekit.grading.sandbox.provenance import Provenance

    reporter: list = []  # the hand-in's report function, added when it starts
    tripwire_provenance = Provenance()
    arm = tampering.install_tripwires(QUESTIONS, reporter, tripwire_provenance)
    provenance = Provenance()
    provenance.seal()  # after the tripwires: their code is coursekit's own
    tripwire_provenance.share_known(provenance)
    _INSTRUMENTS.append((provenance, tripwire_provenance, reporter, arm, harness_seal.seal()))


def preload() -> None:
    """Import (and warm) once, while the process is still trusted, all that a hand-in's
    process needs: a warm parent does this before any hand-in arrives, and every hand-in's
    process is forked from it."""
    import torch  # noqa: F401
    from IPython.core.interactiveshell import InteractiveShell  # noqa: F401

    import coursekit.checks  # noqa: F401  (the questions' code)
    import coursekit.grading.sandbox.landlock  # noqa: F401  (for confine, in the hand-in's process)
    import coursekit.grading.sandbox.namespaces  # noqa: F401
    import coursekit.grading.sandbox.privileges  # noqa: F401
    import coursekit.grading.sandbox.seccomp  # noqa: F401
    from coursekit.grading.sandbox import tampering

    tampering.warm_up()


def run_sandbox(fd_in: int, fd_out: int) -> None:
    """One hand-in's sandbox, in a process of its own (forked by the warm parent): read the
    job, join cgroups, enter namespaces, start process 1 and wait for it; end as it ended."""
    job = channel.receive(fd_in)
    runner_pid = os.getpid()  # its host pid, before any PID namespace: names its user
    from coursekit.grading.sandbox import namespaces as ns
    from coursekit.grading.sandbox import privileges

    isolation = job.get("isolation", "auto")
    cgroups = []
    if isolation == "auto":  # as root, or as a user a cgroup is delegated to
        limits = job["limits"]
        cgroups = privileges.join_cgroups(limits["max_processes"], limits["memory_bytes"])
    if isolation == "none":
        namespaces = ns.Namespaces(why_not="turned off")
    else:
        namespaces = ns.unshare(force_user=isolation == "user")
    applied = {
        "cgroups": cgroups,
        "namespaces": ns.describe(namespaces.flags),
        "user_namespace": namespaces.user,
        "why_no_namespaces": namespaces.why_not,
        "root_user": os.getuid() == 0 and not namespaces.user,
    }
    # graded as root (not in a user namespace): the hand-in runs as a user of its own
    user = privileges.hand_in_ids(runner_pid) if applied["root_user"] else None
    python = ns.python_paths(job.get("hidden", []))
    trusted = tuple(path + "/" for path in python)  # code from elsewhere is the notebook's
    root_plan = ns.RootPlan(
        read_only=python,
        scratch_bytes=job["limits"]["scratch_bytes"],
        scratch_files=job["limits"]["scratch_files"],
        owner=user,
    )
    closed = _closed_to_others(python) if user is not None and not namespaces.mount else None
    if closed is not None:  # the hand-in's user could not import what it needs
        channel.write_frame(fd_out, channel.encode_plain({"kind": "failed", "why": closed}))
        os._exit(SETUP_FAILED)
    child = os.fork()
    if child == 0:
        init(fd_in, fd_out, job, namespaces, root_plan, trusted, applied, user)
        os._exit(0)
    os.close(fd_in)
    os.close(fd_out)
    _, status = os.waitpid(child, 0)
    _exit_like(status)


if __name__ == "__main__":  # python -m coursekit.grading.sandbox.runner --warm CONTROL_FD
    from coursekit.grading.sandbox import warm_parent

    warm_parent.serve(int(sys.argv[-1]))
