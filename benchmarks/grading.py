"""Grading speed on module 1: hand-ins per minute, time to the first result, the cost of each
hand-in beyond the student's own graded code, and the same hand-ins through nbgrader.

Run: .venv/bin/python benchmarks/grading.py [--rounds 3] [--baseline auto|nbgrader|nbclient]
[--docker-like] (as a container's root grades: namespaces refused, tests/helpers/docker_like.py)
Hand-ins are the released exercise with its three answers filled in, as students hand it in:
half right, half with a named mistake. Every figure is the median of ``--rounds`` runs of the
real command (``coursekit grade``, a fresh process each time, gradebook and reference run
included), with one torch thread per process for every grader.

The comparison, in the same rounds (interleaved, so that drift hits both alike):

- ``nbgrader`` (the default when the optional extra is installed: ``pip install -e
  .[nbgrader]``): real ``nbgrader autograde`` over the same 8 hand-ins, in a course made from
  the same source notebook (``nbgrader_course``), timed from the command's start to its end.
  Its one-off ``generate_assignment`` is not counted; coursekit's reference run is.
- ``nbclient`` (without nbgrader): the same notebooks executed whole, one kernel each, which
  is what ``nbgrader autograde`` does for each submission before its own bookkeeping: a lower
  bound on nbgrader's time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # for tests.corpora.student_code: the mistakes students make
sys.path.insert(0, str(REPO / "benchmarks"))

import nbgrader_course  # noqa: E402

from coursekit.authoring.markup import question_name  # noqa: E402
from coursekit.checks import questions_of  # noqa: E402
from tests.corpora import student_code  # noqa: E402

ASSIGNMENT = "01_accumulation"
WRONG = [
    {"accumulate_window": "loss_not_divided"},
    {"train_accumulated": "step_every_micro_batch"},
    {"plan_micro_batch": "not_largest", "accumulate_window": "zero_grad_inside_loop"},
    {"train_accumulated": "last_window_dropped"},
]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def hand_in(variants: dict[str, str]) -> nbformat.NotebookNode:
    """The released exercise with each question cell answered (right, unless named)."""
    notebook = nbformat.read(REPO / "exercises" / f"{ASSIGNMENT}.ipynb", as_version=4)
    for cell in notebook.cells:
        name = question_name(cell) if cell.cell_type == "code" else None
        if name:
            variant = variants.get(name, "correct")
            cell.source = f"# Question: {name}\n" + student_code.BY_QUESTION[name][variant]
    return notebook


def variants_of(i: int) -> dict[str, str]:
    """Hand-in ``i``: right when even, else one of the named mistakes."""
    return {} if i % 2 == 0 else WRONG[(i // 2) % len(WRONG)]


def answers(variants: dict[str, str]) -> dict[str, str]:
    return {
        name: by_variant[variants.get(name, "correct")]
        for name, by_variant in student_code.BY_QUESTION.items()
        if name in {q.name for q in questions_of(ASSIGNMENT)}
    }


def write_hand_ins(folder: Path, count: int) -> None:
    folder.mkdir(parents=True)
    for i in range(count):
        nbformat.write(hand_in(variants_of(i)), folder / f"student{i:02d}.ipynb")


def make_nbgrader_course(root: Path, count: int) -> Path:
    """The same ``count`` hand-ins, made from nbgrader's release of the same notebook."""
    source = REPO / "notebooks" / f"{ASSIGNMENT}.ipynb"
    nbgrader_course.make_course(root, source, ASSIGNMENT)
    for i in range(count):
        nbgrader_course.hand_in(root, ASSIGNMENT, f"student{i:02d}", answers(variants_of(i)))
    return root


class CpuMeter:
    """CPU seconds (user and system) of one command and every process it starts, counted by
    the kernel in a cgroup made for it: the hand-ins' processes re-parent away from the
    command and are reaped where :data:`resource.RUSAGE_CHILDREN` never counts them. Needs a
    cgroup this user can make (cgroup v1's ``cpuacct``, or v2); ``None`` where there is none.
    On a machine others load, a steadier figure than the wall clock."""

    def __init__(self) -> None:
        self.group, self.usage = _cpu_cgroup(f"coursekit-bench-{os.getpid()}-{time.monotonic_ns()}")

    def join(self) -> None:
        """Run in the child before it execs (``preexec_fn``): it, and all it starts, are counted."""
        if self.group is not None:
            (self.group / "cgroup.procs").write_text(str(os.getpid()))

    def seconds(self) -> float | None:
        """The seconds counted, once every process has ended; the cgroup is removed."""
        if self.group is None:
            return None
        for _ in range(100):  # the last processes may still be leaving
            if not (self.group / "cgroup.procs").read_text().strip():
                break
            time.sleep(0.05)
        text = (self.group / self.usage).read_text()
        with contextlib.suppress(OSError):
            self.group.rmdir()
        if self.usage == "cpu.stat":  # v2: "usage_usec N"
            fields = dict(line.split() for line in text.splitlines())
            return int(fields["usage_usec"]) / 1e6
        return int(text) / 1e9  # v1 cpuacct.usage: nanoseconds


def _cpu_cgroup(name: str) -> tuple[Path | None, str]:
    """A new cgroup under this process's own that counts CPU time, and its counter's file."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        number, controllers, path = line.split(":", 2)
        if "cpuacct" in controllers.split(","):
            parent, usage = Path("/sys/fs/cgroup/cpuacct") / path.lstrip("/"), "cpuacct.usage"
        elif number == "0" and Path("/sys/fs/cgroup/cgroup.controllers").exists():
            parent, usage = Path("/sys/fs/cgroup") / path.lstrip("/"), "cpu.stat"
        else:
            continue
        try:
            (parent / name).mkdir()
            return parent / name, usage
        except OSError:
            continue
    return None, ""


def grade_once(
    folder: Path, workers: int, scratch: Path, docker_like: bool = False
) -> tuple[float, float, list[float], float | None]:
    """(seconds in all, seconds to the first result, scores, CPU seconds) of one `coursekit
    grade --json`, with ``docker_like`` as a container's root runs it
    (tests/helpers/docker_like.py: no namespaces). The CPU seconds are those of the command
    and every process it started (:class:`CpuMeter`; None where they cannot be counted)."""
    gradebook = scratch / f"gradebook-{time.monotonic_ns()}.sqlite"
    course = REPO
    if docker_like:  # grade takes others' permissions off the notebooks/ it grades from
        course = scratch / "course"
        if not course.exists():
            shutil.copytree(REPO / "notebooks", course / "notebooks")
    command = [
        sys.executable, "-m", "coursekit.commands.cli", "grade", str(folder), "--assignment",
        ASSIGNMENT, "--workers", str(workers), "--gradebook", str(gradebook), "--json",
        "--root", str(course),
    ]  # fmt: skip
    if docker_like:
        start = f"import sys; sys.path.insert(0, {str(REPO)!r}); "
        start += "from tests.helpers.docker_like import main"
        command = [sys.executable, "-c", f"{start}; main(sys.argv[1:])", "--", *command]
    meter = CpuMeter()
    started = time.perf_counter()
    first, scores = None, []
    with subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=ENV,
        preexec_fn=meter.join,  # noqa: PLW1509 - this process starts no threads
    ) as process:
        for line in process.stdout:
            if first is None:
                first = time.perf_counter() - started
            scores.append(json.loads(line)["score"])
    if process.returncode != 0:
        raise SystemExit(f"coursekit grade exited {process.returncode}")
    return time.perf_counter() - started, first or 0.0, scores, meter.seconds()


def nbclient_once(folder: Path) -> float:
    """Every notebook run whole, in a kernel of its own, one after another."""
    from nbclient import NotebookClient

    started = time.perf_counter()
    for path in sorted(folder.glob("*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        client = NotebookClient(
            notebook,
            timeout=600,
            kernel_name="python3",
            allow_errors=True,
            resources={"metadata": {"path": str(REPO / "solutions")}},
        )
        client.execute(env=ENV)
    return time.perf_counter() - started


def graded_code_seconds() -> float:
    """The student's own graded work for one hand-in: the three answers run on every public
    and hidden spec, in this (warm) process: what no grader can avoid."""
    import random

    questions = questions_of(ASSIGNMENT)
    namespace: dict = {}
    exec("import torch\nfrom torch import nn\nimport coursekit", namespace)  # noqa: S102
    for q in questions:
        exec(student_code.BY_QUESTION[q.name]["correct"], namespace)  # noqa: S102
    specs = {q.name: q.public_specs() + q.hidden_specs(random.Random(0)) for q in questions}
    for q in questions:  # once to warm up
        q.run(namespace[q.name], specs[q.name][0])
    started = time.perf_counter()
    for q in questions:
        for spec in specs[q.name]:
            q.run(namespace[q.name], spec)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--baseline",
        choices=("auto", "nbgrader", "nbclient", "none"),
        default="auto",
        help="what to compare with (auto: nbgrader when installed, else nbclient; none: "
        "coursekit's own figures only)",
    )
    parser.add_argument(
        "--docker-like",
        action="store_true",
        help="grade as root in a container does: namespaces refused (needs root)",
    )
    args = parser.parse_args()
    baseline_kind = args.baseline
    if baseline_kind == "auto":
        baseline_kind = "nbgrader" if nbgrader_course.available() else "nbclient"
    if baseline_kind == "nbgrader" and not nbgrader_course.available():
        raise SystemExit("nbgrader is not installed here: pip install -e '.[nbgrader]'")
    own_s = graded_code_seconds()
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        for count in (1, 8):
            write_hand_ins(scratch / f"h{count}", count)
        if baseline_kind == "nbgrader":
            course = make_nbgrader_course(scratch / "nbgrader-course", 8)
        figures: dict[tuple[int, int], list[tuple[float, float]]] = {}
        cpu: dict[tuple[int, int], list[float]] = {}
        baseline: list[float] = []
        ours_scores: list[float] = []
        theirs_scores: dict[str, float] = {}
        for round_ in range(args.rounds):  # interleaved, so that drift hits all alike
            for count in (1, 8):
                for workers in (1, 2):
                    total, first, scores, seconds = grade_once(
                        scratch / f"h{count}", workers, scratch, args.docker_like
                    )
                    assert len(scores) == count, scores
                    figures.setdefault((count, workers), []).append((total, first))
                    cpu.setdefault((count, workers), []).append(seconds)
                    if count == 8:
                        ours_scores = scores
            if baseline_kind == "none":
                seconds = 0.0
            elif baseline_kind == "nbgrader":
                seconds, theirs_scores = nbgrader_course.autograde(
                    course, ASSIGNMENT, {**ENV, "COURSEKIT_STRICT_CHECKS": "1"}
                )
                assert len(theirs_scores) == 8, theirs_scores
            else:
                seconds = nbclient_once(scratch / "h8")
            baseline.append(seconds)
            print(f"round {round_ + 1}/{args.rounds} done", file=sys.stderr)
    median = statistics.median
    mode = "no namespaces (Docker-like)" if args.docker_like else "namespaces where allowed"
    print(f"module 1, {os.cpu_count()} cores, median of {args.rounds} rounds, {mode}")
    print("hand-ins  workers   seconds  per minute  first result")
    for (count, workers), runs in sorted(figures.items()):
        total = median(t for t, _ in runs)
        first = median(f for _, f in runs)
        rate = 60 * count / total
        print(f"{count:8d}  {workers:7d}  {total:8.1f}  {rate:10.1f}  {first:10.1f} s")
    one = median(t for t, _ in figures[(1, 1)])
    eight = median(t for t, _ in figures[(8, 1)])
    extra = (eight - one) / 7
    print(f"cost of each hand-in beyond the first (1 worker):  {extra:.2f} s")
    print(f"  of which the student's own graded code:           {own_s:.2f} s")
    print(f"  beyond the student's own graded code:             {extra - own_s:.2f} s")
    if None in cpu[(1, 1)] + cpu[(8, 1)]:
        print("CPU time: not measured here (no cgroup this user can make)")
    else:
        one_cpu, eight_cpu = median(cpu[(1, 1)]), median(cpu[(8, 1)])
        print(
            f"CPU time, all processes (1 worker): {one_cpu:.1f} s for 1 hand-in, "
            f"{(eight_cpu - one_cpu) / 7:.2f} s for each beyond the first"
        )
    if baseline_kind == "none":
        return
    theirs = median(baseline)
    ours = median(t for t, _ in figures[(8, 2)])
    if baseline_kind == "nbgrader":
        import nbgrader

        label = f"nbgrader {nbgrader.__version__} autograde (one kernel per hand-in, in turn)"
        print(f"scores, coursekit: {sorted(ours_scores)}")
        print(f"scores, nbgrader:  {sorted(theirs_scores.values())}")
    else:
        label = "nbclient, whole notebooks (what nbgrader runs: a lower bound on nbgrader)"
    print(f"8 hand-ins through {label}: {theirs:.1f} s")
    print(f"coursekit grade, 8 hand-ins, 2 workers: {ours:.1f} s = {theirs / ours:.1f}x faster")


if __name__ == "__main__":
    main()
