"""Grader failures on correct hand-ins: Docker-like, several workers, beside CPU hogs (issue 40).

Run (as root, Linux): .venv/bin/python benchmarks/grading_reliability.py [--hand-ins 200]
[--workers 2 4] [--hogs 2] [--old]

Every hand-in is the released module-1 exercise with its three answers right, so each must get
full marks; every other one also leaves a process running in the background, detached (as a
notebook that starts a server or a pool and never stops it does), so that ending a hand-in
takes the grader's helpers and its sweep for strays every time (``--no-background``: none).
Each batch is one real ``coursekit grade --json`` run, as a container's root runs it
(tests/helpers/docker_like.py: namespaces refused; ``--old``: Landlock refused too), while
``--hogs`` processes spin on the CPU (each ended when the batch ends, and bounded by
``timeout`` in any case). For each worker count it prints:

- grader failures: hand-ins stored *not graded* (the grader's machinery failed on every try),
  which must be 0;
- retried failures: tries the grader's machinery failed on and graded again (stderr's "the
  grader failed on"), which should be 0 too: each is a fault of the grader, hidden by a retry;
- hand-ins below full marks (must be 0: each is right), the exit status (must be 0);
- the batch's wall-clock time, and seconds per hand-in.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from grading import ASSIGNMENT, ENV, hand_in  # noqa: E402

# an honest habit: a helper process started and left running, in a session of its own
BACKGROUND = (
    'import subprocess\nhelper = subprocess.Popen(["sleep", "300"], start_new_session=True)'
)

HOG_BOUND_S = 3600  # a hog outlives no batch by more than this, whatever happens here


def start_hogs(count: int) -> list[subprocess.Popen]:
    """``count`` processes that spin on the CPU, each ended by ``timeout`` at the latest."""
    spin = [sys.executable, "-c", "while 1: pass"]
    return [
        subprocess.Popen(["timeout", str(HOG_BOUND_S), *spin], start_new_session=True)
        for _ in range(count)
    ]


def stop_hogs(hogs: list[subprocess.Popen]) -> None:
    for hog in hogs:
        try:
            os.killpg(hog.pid, signal.SIGKILL)  # its own session: timeout and its python
        except ProcessLookupError:
            pass
        hog.wait()


def grade_batch(folder: Path, course: Path, workers: int, scratch: Path, old: bool) -> dict:
    """One ``coursekit grade --json`` over ``folder``, Docker-like; its figures."""
    gradebook = scratch / f"gradebook-{workers}-{time.monotonic_ns()}.sqlite"
    command = [
        sys.executable, "-m", "coursekit.commands.cli", "grade", str(folder), "--assignment",
        ASSIGNMENT, "--workers", str(workers), "--gradebook", str(gradebook), "--json",
        "--root", str(course),
    ]  # fmt: skip
    start = f"import sys; sys.path.insert(0, {str(REPO)!r}); "
    start += "from tests.helpers.docker_like import main"
    wrapper = [sys.executable, "-c", f"{start}; main(sys.argv[1:])"]
    command = [*wrapper, *(["--old"] if old else []), "--", *command]
    env = {**ENV, "AS_USER_PATHS": str(scratch)}
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO)
    seconds = time.perf_counter() - started
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    not_graded = [r["student"] for r in results if r.get("not_graded")]
    below = [
        r["student"]
        for r in results
        if not r.get("not_graded") and (r["score"] is None or r["score"] < r["max_score"])
    ]
    return {
        "workers": workers,
        "hand_ins": len(results),
        "grader_failures": len(not_graded),
        "retried_failures": done.stderr.count("the grader failed on "),
        "below_full_marks": len(below),
        "exit_status": done.returncode,
        "seconds": round(seconds, 1),
        "examples": (not_graded + below)[:5],
        "stderr_tail": "" if done.returncode == 0 else done.stderr[-2000:],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hand-ins", type=int, default=200)
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--hogs", type=int, default=2)
    parser.add_argument("--old", action="store_true", help="Landlock refused too")
    parser.add_argument("--no-background", action="store_true", help="no process left running")
    args = parser.parse_args()
    if os.geteuid() != 0 or not sys.platform.startswith("linux"):
        raise SystemExit("the Docker-like mode needs root on Linux")
    scratch = Path(tempfile.mkdtemp(prefix="coursekit-reliability-"))
    os.chmod(scratch, 0o755)  # the hand-ins' user reads what it is given, as in a container
    try:
        course = scratch / "course"
        shutil.copytree(REPO / "notebooks", course / "notebooks")
        folder = scratch / "hand-ins"
        folder.mkdir()
        right = hand_in({})
        leaves_one = hand_in({})
        leaves_one.cells.append(nbformat.v4.new_code_cell(BACKGROUND))
        for i in range(args.hand_ins):
            notebook = right if args.no_background or i % 2 == 0 else leaves_one
            nbformat.write(notebook, folder / f"student{i:03d}.ipynb")
        mode = "Docker-like, no Landlock" if args.old else "Docker-like (namespaces refused)"
        background = "none" if args.no_background else "half"
        print(
            f"{args.hand_ins} correct hand-ins of {ASSIGNMENT} ({background} leaving a process "
            f"running), {mode}, {args.hogs} CPU hogs"
        )
        failures = 0
        for workers in args.workers:
            hogs = start_hogs(args.hogs)
            try:
                figures = grade_batch(folder, course, workers, scratch, args.old)
            finally:
                stop_hogs(hogs)
            per = figures["seconds"] / max(1, figures["hand_ins"])
            print(
                f"workers={workers}: {figures['hand_ins']} graded, grader failures (not graded) "
                f"{figures['grader_failures']}, retried failures {figures['retried_failures']}, "
                f"below full marks {figures['below_full_marks']}, exit {figures['exit_status']}, "
                f"{figures['seconds']} s ({per:.2f} s per hand-in)"
            )
            if figures["examples"]:
                print(f"  e.g. {', '.join(figures['examples'])}")
            if figures["stderr_tail"]:
                print("  stderr: " + figures["stderr_tail"].replace("\n", "\n  "))
            failures += (
                figures["grader_failures"]
                + figures["below_full_marks"]
                + (figures["exit_status"] != 0)
                + (figures["hand_ins"] != args.hand_ins)
            )
        return 1 if failures else 0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
