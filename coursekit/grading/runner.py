"""The hand-in's side of grading: runs inside the sandboxed process, never in the grader.

``python -m coursekit.grading.runner JOB.json`` confines itself (resource limits, Landlock,
an unprivileged user when started as root), executes the hand-in's code cells one by one
with a time limit each, then calls the hand-in's functions on the specs it was given and
writes their plain-data outputs to the result file. It judges nothing: scores are decided
by the grader, in a process this code never ran in.
"""

from __future__ import annotations

import io
import json
import os
import resource
import signal
import sys
import sysconfig
from pathlib import Path


class CellTimeout(BaseException):
    """Raised by the timer; a BaseException so ``except Exception`` in a hand-in can't eat it."""


class CappedText(io.TextIOBase):
    """A text stream that keeps writing to a file until a byte cap, then drops the rest."""

    def __init__(self, stream, cap_bytes: int):
        self._stream, self._left = stream, cap_bytes

    def write(self, text: str) -> int:
        data = text.encode("utf-8", "replace")
        if self._left > 0:
            chunk = data[: self._left]
            self._left -= len(chunk)
            self._stream.write(chunk)
            self._stream.flush()
        return len(text)

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False


# What Python, torch and matplotlib read from /etc; the rest of it (shadow, keys) stays hidden.
_ETC = ("ld.so.cache", "localtime", "passwd", "group", "nsswitch.conf", "fonts", "hosts")


def _on_timer(signum, frame):
    raise CellTimeout("time limit reached")


def _readable_paths() -> list[str]:
    import coursekit

    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    paths |= {sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    paths.add(str(Path(coursekit.__file__).parent))
    paths |= {"/usr", "/lib", "/lib64", "/bin", "/proc", "/sys"}
    paths |= {f"/dev/{name}" for name in ("null", "zero", "full", "random", "urandom")}
    paths |= {f"/etc/{name}" for name in _ETC}
    return sorted(paths)


def confine(job: dict) -> dict:
    """Apply every limit the job asks for; return what was applied (for the report)."""
    limits, scratch = job["limits"], job["scratch"]
    applied = {"landlock": 0, "user": os.getuid()}
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_AS, (limits["memory_bytes"], limits["memory_bytes"]))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["file_bytes"], limits["file_bytes"]))
    cpu = int(limits["hand_in_timeout_s"]) + 5
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a too-large write fails instead of killing
    from coursekit.grading import privileges

    # Own network (no way out, not even UDP) and System V IPC (gone with the hand-in).
    applied["namespaces"] = privileges.isolate_network_and_ipc()
    if applied["namespaces"]:  # loopback only, inside the new namespace: for gloo
        applied["loopback"] = privileges.loopback_up()
    if os.getuid() == 0:  # root ignores RLIMIT_NPROC and could lift limits: give that up
        applied["cgroups"] = privileges.join_cgroups(
            limits["max_processes"], limits["memory_bytes"]
        )
        # uid 0 owns most files: Landlock stops reading and writing them, a read-only view of
        # the file systems stops chmod, utime and extended attributes too.
        applied["read_only"] = privileges.read_only_except([scratch, job["out"]])
        os.chdir(scratch)  # re-enter the folder through its new, writable mount
        privileges.drop_all_capabilities()
        applied["capabilities"] = "dropped"
    if job.get("landlock", True):
        from coursekit.grading import landlock

        if landlock.abi_version() >= 1:
            writable = [scratch, job["out"], "/dev/null"]
            own_loopback = bool(applied["namespaces"] and applied.get("loopback"))
            applied["landlock"] = landlock.restrict(
                _readable_paths(), writable, block_tcp=not own_loopback
            )
    # RLIMIT_NPROC counts every process and thread of the user, so leave room for the ones
    # that user already runs (the grader's own, when not run as root).
    applied["unix_sockets"] = "forbidden" if privileges.forbid_unix_sockets() else "allowed"
    nproc = limits["max_processes"] + _processes_of(os.getuid())
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    return applied


def _processes_of(uid: int) -> int:
    """Threads (which RLIMIT_NPROC counts as processes) that ``uid`` runs now."""
    total = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(
                line.split(":", 1) for line in status.read_text().splitlines() if ":" in line
            )
        except OSError:
            continue
        if int(fields.get("Uid", "-1").split()[0]) == uid:
            total += int(fields.get("Threads", "1").strip())
    return total


def _error_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__


def execute_cells(shell, cells: list[str], skip: set[int], timeout_s: float, progress) -> list:
    """Run each cell with a timer; record ok / error / timeout / skipped per cell."""
    report = []
    for index, source in enumerate(cells):
        if index in skip:
            report.append({"index": index, "status": "skipped"})
            continue
        progress.write(f"{index}\n")
        progress.flush()
        signal.signal(signal.SIGALRM, _on_timer)
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
        try:
            result = shell.run_cell(source, store_history=False, silent=False)
        except CellTimeout:  # raised outside IPython's own handler
            result = None
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        error = None if result is None else (result.error_before_exec or result.error_in_exec)
        if result is None or isinstance(error, CellTimeout):
            report.append({"index": index, "status": "timeout"})
        elif error is not None:
            report.append({"index": index, "status": "error", "error": _error_line(error)})
        else:
            report.append({"index": index, "status": "ok"})
    return report


def run_tasks(
    namespace: dict, tasks: list[dict], timeout_s: float, crashed: set[int], progress
) -> list[dict]:
    """Call the hand-in's functions on each spec; outputs are plain data, nothing is judged.

    ``crashed`` tasks ended the process on an earlier try: they are reported, not re-run.
    """
    from coursekit.checks import QUESTIONS
    from coursekit.checks.registry import error_message

    results = []
    timed_out: set[str] = set()  # one endless test is enough: the rest would be too
    for index, task in enumerate(tasks):
        name = task["question"]
        if index in crashed:
            results.append(
                {
                    "status": "error",
                    "message": f"{name} crashed, exited or would not stop: "
                    "grading had to end its process.",
                }
            )
            continue
        progress.write(f"task {index}\n")
        progress.flush()
        fn = namespace.get(name)
        if not callable(fn):
            results.append({"status": "missing"})
            continue
        if name in timed_out:
            results.append({"status": "timeout"})
            continue
        signal.signal(signal.SIGALRM, _on_timer)
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
        try:
            outputs = QUESTIONS[name].run(fn, task["spec"])
            json.dumps(outputs)  # plain data only
            results.append({"status": "ok", "outputs": outputs})
        except NotImplementedError:
            results.append({"status": "not_attempted"})
        except CellTimeout:
            results.append({"status": "timeout"})
            timed_out.add(name)
        except BaseException as exc:  # SystemExit, KeyboardInterrupt...: all the hand-in's
            results.append({"status": "error", "message": error_message(exc)})
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    return results


def _die_with_parent() -> None:
    """If the grader is killed, this process goes too (Linux), instead of running on."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() == 1:  # the parent died before the line above
            os._exit(1)


def main(job_path: str) -> None:
    _die_with_parent()
    job = json.loads(Path(job_path).read_text())
    out = Path(job["out"])
    import torch  # noqa: F401
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    import coursekit.checks  # noqa: F401  (before confinement: the questions' code)

    applied = confine(job)
    limits = job["limits"]
    raw = open(out / "output.txt", "ab", buffering=0)  # noqa: SIM115 (lives as long as we do)
    sys.stdout = sys.stderr = CappedText(raw, limits["output_bytes"])
    config = Config()
    config.HistoryManager.enabled = False  # no history database in the scratch folder
    shell = InteractiveShell.instance(config=config)
    with open(out / "progress.txt", "a") as progress:
        cells = execute_cells(
            shell, job["cells"], set(job["skip"]), limits["cell_timeout_s"], progress
        )
        tasks = run_tasks(
            shell.user_ns, job["tasks"], limits["task_timeout_s"], set(job["crashed"]), progress
        )
    result = {"cells": cells, "tasks": tasks, "applied": applied}
    (out / "result.json").write_text(json.dumps(result))
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown: a hand-in's atexit hooks or threads can't stall it


if __name__ == "__main__":
    main(sys.argv[1])
