"""The grader's side of running one hand-in: a confined child process, watched from outside.

Each run gets a fresh scratch folder, a time limit for the whole process (the runner adds
one per cell), and is killed with everything it started when it is done or out of time. A
cell that kills the process (``os._exit``, a crash, a signal) is skipped on a second try, so
one such cell costs only itself.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from coursekit.grading import privileges
from coursekit.progress import ENV as PROGRESS_ENV

RESULT_CAP_BYTES = 20 * 2**20
_PR_SET_CHILD_SUBREAPER = 36


@dataclass(frozen=True)
class Limits:
    """What one hand-in may use. Times are wall-clock seconds."""

    cell_timeout_s: float = 60.0
    task_timeout_s: float = 30.0
    hand_in_timeout_s: float = 300.0
    memory_bytes: int = 3 * 2**30
    max_processes: int = 64
    output_bytes: int = 2 * 2**20
    file_bytes: int = 64 * 2**20


@dataclass
class SandboxRun:
    """What came back from the hand-in's process (plain data, to be judged elsewhere)."""

    cells: list[dict] = field(default_factory=list)
    tasks: list[dict] = field(default_factory=list)
    killed_cells: dict[int, str] = field(default_factory=dict)  # index -> why it was skipped
    failure: str | None = None  # set when no result came back at all
    confinement: dict = field(default_factory=dict)
    output_tail: str = ""
    seconds: float = 0.0


def become_subreaper() -> None:
    """Orphans of our children re-parent to us, so daemons a hand-in starts can be found."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def start_worker() -> None:
    """A grading worker process: a subreaper that dies with the grader (however it ends)."""
    become_subreaper()
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


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


def kill_new_children(before: set[int]) -> None:
    """SIGKILL children that were not there ``before`` (with the subreaper: orphans too).

    Killing a child re-parents its own children to us, so repeat until none is left.
    """
    for _ in range(50):
        new = children() - before
        if not new:
            return
        for pid in new:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in new:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


def _clean_env(home: Path) -> dict[str, str]:
    keep = {"PATH", "LANG", "LC_ALL", "PYTHONPATH", "VIRTUAL_ENV"}
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(
        HOME=str(home),
        TMPDIR=str(home / "tmp"),
        MPLBACKEND="Agg",
        MPLCONFIGDIR=str(home / ".matplotlib"),
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


def _one_attempt(cells, skip, crashed, tasks, limits: Limits, landlock: bool, budget_s: float):
    scratch = Path(tempfile.mkdtemp(prefix="coursekit-hand-in-"))
    work, out = scratch / "work", scratch / "out"
    for folder in (work, work / "tmp", out):
        folder.mkdir()
    job = {
        "cells": cells,
        "skip": sorted(skip),
        "crashed": sorted(crashed),
        "tasks": tasks,
        "limits": asdict(limits),
        "scratch": str(scratch / "work"),
        "out": str(out),
        "landlock": landlock,
    }
    job_path = scratch / "job.json"
    job_path.write_text(json.dumps(job))
    os.chmod(job_path, 0o644)
    become_subreaper()
    before = children()
    started = time.monotonic()
    with open(scratch / "stdio.txt", "wb") as stdio:
        process = subprocess.Popen(
            [sys.executable, "-m", "coursekit.grading.runner", str(job_path)],
            cwd=work,
            env=_clean_env(work),
            stdin=subprocess.DEVNULL,
            stdout=stdio,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        timed_out = _watch(process, out / "progress.txt", limits, started + budget_s)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        kill_new_children(before)
        for group in privileges.cgroup_paths(process.pid):
            privileges.remove_cgroup(group)
    seconds = time.monotonic() - started
    result = _read_json(out / "result.json")
    progress = _read_text(out / "progress.txt", tail_bytes=4096).splitlines()
    output = _read_text(out / "output.txt", tail_bytes=4000)
    _remove(scratch)
    return result, progress, output, process.returncode, timed_out, seconds


GRACE_S = 5.0  # how long past its own limit a cell may go before it is killed from outside


def _watch(process, progress: Path, limits: Limits, deadline: float) -> str | None:
    """Wait for the process; stop it when the notebook's time runs out ("notebook") or when
    one cell or test outlives its limit, e.g. because it ignores the timer ("step")."""
    step, step_started = "", time.monotonic()
    while process.poll() is None:
        now = time.monotonic()
        if now >= deadline:
            return "notebook"
        text = _read_text(progress, tail_bytes=4096)
        current = text.splitlines()[-1] if text.endswith("\n") and text.strip() else ""
        if current != step:
            step, step_started = current, now
        limit = limits.task_timeout_s if step.startswith("task") else limits.cell_timeout_s
        if step and now - step_started > limit + GRACE_S:
            return "step"
        time.sleep(0.1)
    return None


def _read_text(path: Path, tail_bytes: int | None = None) -> str:
    """At most RESULT_CAP_BYTES (or the last ``tail_bytes``) of a file a hand-in could touch.

    No links are followed and nothing that is not a regular file is read (a FIFO would block,
    /dev/zero would never end), so a hand-in can neither stall nor flood the grader.
    """
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return ""
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            return ""
        if tail_bytes is not None and info.st_size > tail_bytes:
            os.lseek(descriptor, info.st_size - tail_bytes, os.SEEK_SET)
        chunks, left = [], tail_bytes or RESULT_CAP_BYTES
        while left > 0:
            chunk = os.read(descriptor, min(left, 2**20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks).decode("utf-8", "replace")
    except OSError:
        return ""
    finally:
        os.close(descriptor)


def _read_json(path: Path):
    try:
        data = json.loads(_read_text(path))
    except ValueError:
        return None
    ok = isinstance(data, dict) and isinstance(data.get("cells"), list)
    return data if ok and isinstance(data.get("tasks"), list) else None


def _remove(folder: Path) -> None:
    """Remove a scratch folder however deep a hand-in nested it (rmtree recurses)."""
    subprocess.run(["rm", "-rf", "--one-file-system", str(folder)], check=False)
    shutil.rmtree(folder, ignore_errors=True)


def _why(returncode: int, timed_out: str | None, limits: Limits) -> str:
    if timed_out == "step":
        return "it ran past its time limit and would not stop"
    if timed_out:
        return f"it ran past the {limits.hand_in_timeout_s:.0f} s limit for a whole notebook"
    if returncode == -signal.SIGKILL:
        return "the process was killed: it ran out of its memory limit, or killed itself"
    if returncode < 0:
        name = signal.Signals(-returncode).name
        return f"the process was killed by {name} (a crash, or the code killed itself)"
    return f"it ended the process (exit status {returncode}, e.g. os._exit)"


def run_hand_in(
    cells: list[str], tasks: list[dict], limits: Limits, landlock: bool = True, retries: int = 6
) -> SandboxRun:
    """Run a hand-in's cells and tasks in a confined process; skip cells that kill it."""
    run = SandboxRun()
    skip: set[int] = set()
    crashed: set[int] = set()
    for _attempt in range(retries + 1):
        budget_s = limits.hand_in_timeout_s - run.seconds  # one budget for all the tries
        if budget_s <= 1:
            timed_out, code = "notebook", -9
            break
        result, progress, output, code, timed_out, seconds = _one_attempt(
            cells, skip, crashed, tasks, limits, landlock, budget_s
        )
        run.seconds += seconds
        run.output_tail = output
        if result is not None:
            run.cells, run.tasks = result["cells"], result["tasks"]
            run.confinement = result.get("applied", {})
            if len(run.tasks) == len(tasks):
                return run
        last = progress[-1] if progress else None
        if last is not None and last.startswith("task "):
            task = int(last.split()[1])
            if task in crashed:
                break
            # The function under test ended the process: report that, for the rest of its
            # question's tests too (they would end it again), and try once more.
            question = tasks[task]["question"]
            crashed |= {i for i in range(task, len(tasks)) if tasks[i]["question"] == question}
            continue
        if last is None or not last.isdigit() or int(last) in skip:
            break  # nothing to blame and skip: give up
        culprit = int(last)
        run.killed_cells[culprit] = _why(code, timed_out, limits)
        skip.add(culprit)
    run.failure = "The notebook's process ended before grading finished: " + _why(
        code, timed_out, limits
    )
    return run
