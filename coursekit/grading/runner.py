"""The hand-in's side of grading: runs inside the sandbox, never in the grader.

Each hand-in's process is forked from a warm parent (:mod:`coursekit.grading.warm_parent`,
``python -m coursekit.grading.runner --warm FD``) that imported what grading needs once,
while still trusted (:func:`preload`), and is handed two pipes to the grader. It reads the
job (limits and options, no cells and no specs yet). Then it enters new namespaces and
forks: the child is process 1 of a new PID namespace ("init"), builds the hand-in's own root
file system (:mod:`coursekit.grading.namespaces`) and forks the hand-in's process, which
confines itself (rlimits, capabilities, Landlock, seccomp) and then does what the grader
asks, one command at a time: run this cell, run this test (a question's function on one
spec), end. Each answer echoes the command's nonce. Cells never see a spec: the grader sends
the first one after the last cell has answered, and one spec per test. The runner judges
nothing; scores are decided by the grader, in a process this code never ran in.
"""

from __future__ import annotations

import ctypes
import io
import os
import resource
import signal
import sys
import threading

from coursekit.grading import channel

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


def confine(job: dict, namespaces, channel_fds: tuple[int, ...] = ()) -> dict:
    """Apply every limit the job asks for to this process; return what was applied.
    ``channel_fds`` (the pipes to the grader) are pinned by the seccomp filter."""
    from coursekit.grading import landlock, privileges, seccomp

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
    if os.getuid() == 0 or namespaces.user:
        privileges.drop_all_capabilities()  # in a user namespace: the ones it gave
        applied["capabilities"] = "dropped"
    if job.get("landlock", True) and landlock.abi_version() >= 1:
        if namespaces.mount:
            readable, writable = ["/"], ["/scratch", "/tmp", "/dev/shm"]
        else:
            readable, writable = _host_readable_paths(), [os.getcwd()]
        writable += [f"/dev/{name}" for name in ("null", "zero", "full", "random", "urandom")]
        own_loopback = bool(namespaces.network and applied.get("loopback"))
        applied["landlock"] = landlock.restrict(readable, writable, block_tcp=not own_loopback)
    applied["seccomp"] = seccomp.install(protected=channel_fds)
    # RLIMIT_NPROC counts every process and thread of the user (in this user namespace), so
    # leave room for the ones it already runs; root ignores it (the pids cgroup caps root).
    nproc = limits["max_processes"] + _processes_of(os.getuid())
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    return applied


_ETC = ("ld.so.cache", "localtime", "passwd", "group", "nsswitch.conf", "fonts", "hosts")


def _host_readable_paths() -> list[str]:
    """Without a root of its own (no mount namespace), what a hand-in may read of the host."""
    from coursekit.grading.namespaces import python_paths

    paths = set(python_paths())
    paths |= {"/usr", "/lib", "/lib64", "/bin", "/proc", "/sys"}
    paths |= {f"/dev/{name}" for name in ("null", "zero", "full", "random", "urandom")}
    paths |= {f"/etc/{name}" for name in _ETC}
    return sorted(paths)


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


def serve(fd_in: int, fd_out: int, job: dict, namespaces, applied: dict, trusted) -> None:
    """The hand-in's process: confine, then answer the grader's commands until "end"."""
    fd_in, fd_out = _move_high(fd_in, fd_out)
    _close_all_but({fd_in, fd_out})
    from coursekit.grading import tampering as shared_tampering

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
        applied.update(confine(job, namespaces, channel_fds=(fd_in, fd_out)))
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

    tampering.install_audit_hook(report, trusted)
    arm_tripwires = tampering.install_tripwires(questions, report, trusted)
    before = tampering.snapshot()
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
            arm_tripwires()
            owner = tampering.coursekit_function(shell.user_ns.get(command["question"]), trusted)
            if owner is not None:
                report(f"its {command['question']} is coursekit's own answer ({owner})")
            reply = own.run_task(
                shell.user_ns, questions, command, limits["task_timeout_s"], limits["wall_factor"]
            )
        elif kind == "check":
            reply = {}
        else:
            sys.stdout.flush()
            os._exit(0)  # skip interpreter teardown: a hand-in's atexit hooks can't stall it
        if kind in ("task", "check"):
            for where in tampering.changes(before, trusted)[:10]:
                if where not in reported:
                    reported.add(where)
                    report(f"it changed {where}")
        reply.setdefault("question", command.get("question"))
        answer({"kind": kind, "index": command.get("index"), "nonce": nonce, **reply})


def init(fd_in, fd_out, job: dict, namespaces, root_plan, trusted, applied: dict) -> None:
    """Process 1 of the hand-in's PID namespace: build its root, start it, reap, end with it.

    When this process ends, the kernel kills every other process in the namespace.
    """
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    try:
        if namespaces.mount:
            from coursekit.grading.namespaces import make_root

            applied["root"] = make_root(root_plan)
        else:
            # no root of its own: a folder on the host, named after the runner's process,
            # which the grader removes after it (or the next grading run, if it was killed)
            scratch = os.path.join(job["host_scratch_parent"], f"{SCRATCH_PREFIX}{os.getppid()}")
            os.mkdir(scratch, 0o700)
            os.chdir(scratch)
        home = os.getcwd()
        temporary = "/tmp" if namespaces.mount else home
        os.environ.update(HOME=home, TMPDIR=temporary, MPLCONFIGDIR=f"{home}/.matplotlib")
    except Exception as error:
        failed = {"kind": "failed", "why": f"making the hand-in's root failed: {error}"}
        channel.write_frame(fd_out, channel.encode_plain(failed))
        os._exit(SETUP_FAILED)
    child = os.fork()
    if child == 0:
        serve(fd_in, fd_out, job, namespaces, applied, trusted)
        os._exit(0)
    os.close(fd_in)
    os.close(fd_out)
    _prctl(_PR_SET_DUMPABLE, 0)  # the hand-in cannot read or trace this process
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            os._exit(0)
        if pid == child:
            if os.WIFSIGNALED(status):
                os._exit(128 + os.WTERMSIG(status))
            os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def preload() -> None:
    """Import (and warm) once, while the process is still trusted, all that a hand-in's
    process needs: a warm parent does this before any hand-in arrives, and every hand-in's
    process is forked from it."""
    import torch  # noqa: F401
    from IPython.core.interactiveshell import InteractiveShell  # noqa: F401

    import coursekit.checks  # noqa: F401  (the questions' code)
    import coursekit.grading.landlock  # noqa: F401  (for confine, in the hand-in's process)
    import coursekit.grading.namespaces  # noqa: F401
    import coursekit.grading.privileges  # noqa: F401
    import coursekit.grading.seccomp  # noqa: F401
    from coursekit.grading import tampering

    tampering.warm_up()


def run_sandbox(fd_in: int, fd_out: int) -> None:
    """One hand-in's sandbox, in a process of its own (forked by the warm parent): read the
    job, join cgroups, enter namespaces, start process 1 and wait for it; end as it ended."""
    job = channel.receive(fd_in)
    from coursekit.grading import namespaces as ns
    from coursekit.grading import privileges

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
    python = ns.python_paths(job.get("hidden", []))
    trusted = tuple(path + "/" for path in python)  # code from elsewhere is the notebook's
    root_plan = ns.RootPlan(
        read_only=python,
        scratch_bytes=job["limits"]["scratch_bytes"],
        scratch_files=job["limits"]["scratch_files"],
    )
    child = os.fork()
    if child == 0:
        init(fd_in, fd_out, job, namespaces, root_plan, trusted, applied)
        os._exit(0)
    os.close(fd_in)
    os.close(fd_out)
    _, status = os.waitpid(child, 0)
    _exit_like(status)


if __name__ == "__main__":  # python -m coursekit.grading.runner --warm CONTROL_FD
    from coursekit.grading import warm_parent

    warm_parent.serve(int(sys.argv[-1]))
