"""The runner's process tree: the sandbox built around one hand-in, before any of its code runs.

Each runner is forked from the warm parent (:mod:`coursekit.grading.sandbox.fork_server`) and
handed two pipes to the grader. :func:`run_sandbox` reads the job (limits and options, no cells
and no specs yet), joins cgroups, enters new namespaces and forks :func:`init`: process 1 of a
new PID namespace, which builds the hand-in's own root file system
(:mod:`coursekit.grading.sandbox.namespaces`), or makes its scratch folder on the host where
there is none, and forks the hand-in's process (:func:`coursekit.grading.sandbox.runner.serve`),
which confines itself and then does what the grader asks. Process 1 reaps, watches the scratch
folder's size where no tmpfs caps it, and ends with the hand-in; the runner ends as it ended.
Where no PID namespace can be made (Docker, Gradescope), the runner does process 1's work
itself: a fork of the warm parent less per hand-in.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal

from coursekit.grading.sandbox import channel, privileges
from coursekit.grading.sandbox import namespaces as ns
from coursekit.grading.sandbox import scratch as host_scratch
from coursekit.grading.sandbox.exit_codes import SCRATCH_FULL, SETUP_FAILED
from coursekit.grading.sandbox.runner import serve

_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE = 1, 4


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


def run_sandbox(fd_in: int, fd_out: int) -> None:
    """One hand-in's sandbox, in a process of its own (forked by the warm parent): read the
    job, join cgroups, enter namespaces, start process 1 and wait for it; end as it ended.
    Without a PID namespace, this process does process 1's work itself (:func:`init`)."""
    job = channel.receive(fd_in)
    runner_pid = os.getpid()  # its host pid, before any PID namespace: names its user
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
    if not namespaces.pid:
        # No PID namespace (Docker, Gradescope): there is no process 1 to be, and a process
        # forked to do init's work would cost each hand-in a fork of the warm parent's whole
        # memory for nothing this one cannot do: this process does it, and ends as the
        # hand-in's process ended (init's way of saying a signal is not needed).
        init(fd_in, fd_out, job, namespaces, root_plan, trusted, applied, user)
        os._exit(0)
    child = os.fork()
    if child == 0:
        init(fd_in, fd_out, job, namespaces, root_plan, trusted, applied, user)
        os._exit(0)
    os.close(fd_in)
    os.close(fd_out)
    _, status = os.waitpid(child, 0)
    _exit_like(status)


def init(
    fd_in, fd_out, job: dict, namespaces, root_plan, trusted, applied: dict, user=None
) -> None:
    """Process 1 of the hand-in's PID namespace: build its root, start it, reap, end with it.

    When this process ends, the kernel kills every other process in the namespace. Without
    a root of its own, this process also keeps the hand-in's disk use under its scratch cap
    (:func:`_scratch_over`), which no tmpfs holds there. Without a PID namespace it is the
    runner itself, which ends as the hand-in's process did (the grader reads how).
    """
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    scratch = None
    try:
        if namespaces.mount:
            applied["root"] = ns.make_root(root_plan)
        else:
            # no root of its own: the folder on the host the grader made for this runner,
            # under a name no hand-in can guess (coursekit.grading.sandbox.scratch); the
            # grader removes it after the runner (or the next grading run, if it was killed)
            scratch = job["host_scratch"]
            if not host_scratch.is_ours(scratch, os.geteuid()):
                raise OSError(f"{scratch} is not the folder the grader made")
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
            if os.getpid() != 1:  # the runner, with no PID namespace: as its hand-in ended
                _exit_like(status)
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


def _wait_for_child(seconds: float) -> None:
    """Sleep up to ``seconds``, waking early when a child ends (SIGCHLD)."""
    with contextlib.suppress(InterruptedError):
        signal.sigtimedwait([signal.SIGCHLD], seconds)


def _scratch_over(scratch: str, uid: int, most_bytes: int, most_files: int) -> bool:
    """Whether the hand-in's user has more than ``most_bytes`` on disk, or more than
    ``most_files`` files, in its scratch folder and the world-writable folders (a look
    every 50 ms, so a burst between two looks can pass the cap by what it writes meanwhile;
    each file is capped at ``file_bytes`` by RLIMIT_FSIZE)."""
    roots = [scratch]
    for folder in privileges.SHARED_WRITABLE:
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
