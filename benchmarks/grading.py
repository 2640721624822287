"""Grading speed for module 1: overhead per hand-in, and hand-ins graded per minute.

Run: .venv/bin/python benchmarks/grading.py [--hand-ins 8]
Prints:
- the notebook's own execution time (nbclient, as a student's kernel runs it);
- the grader's time for one hand-in (sandboxed run of the same notebook plus its tests);
- their difference, the grader's overhead per hand-in (aim: under 1 s);
- hand-ins per minute with 1 and 2 workers on copies of the solution notebook.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from coursekit.grading.command import run_grade
from coursekit.grading.grader import grade_path, prepare, solution_cells
from coursekit.grading.sandbox import Limits, Options, become_subreaper, run_hand_in

REPO = Path(__file__).resolve().parents[1]
ASSIGNMENT = "01_accumulation"
SOLUTION = REPO / "solutions" / f"{ASSIGNMENT}.ipynb"


def notebook_seconds() -> float:
    notebook = nbformat.read(SOLUTION, as_version=4)
    start = time.perf_counter()
    NotebookClient(
        notebook,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(SOLUTION.parent)}},
    ).execute()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hand-ins", type=int, default=8)
    args = parser.parse_args()
    become_subreaper()
    limits = Limits()

    executed = [notebook_seconds() for _ in range(2)]
    start = time.perf_counter()
    plan = prepare(REPO, ASSIGNMENT, limits)
    reference_s = time.perf_counter() - start
    graded = [grade_path(str(SOLUTION), "student", plan).seconds for _ in range(3)]
    cells = solution_cells(REPO, ASSIGNMENT)
    bare_options = Options(landlock=False, isolation="none")
    bare = [run_hand_in(cells, [], limits, bare_options).seconds for _ in range(3)]
    print(f"notebook executed by a kernel (nbclient):  {min(executed):6.1f} s")
    print("notebook executed by the grader's runner,")
    print(f"  without namespaces, Landlock or tests:    {min(bare):6.1f} s")
    print(
        f"one hand-in through the grader:             {min(graded):6.1f} s "
        f"(median {statistics.median(graded):.1f} s)"
    )
    print(
        f"overhead per hand-in beyond the notebook:   {min(graded) - min(bare):6.1f} s "
        "(confinement, tests, judging)"
    )
    print(f"reference run, once per grading run:        {reference_s:6.1f} s")

    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "hand-ins"
        folder.mkdir()
        for i in range(args.hand_ins):
            shutil.copy(SOLUTION, folder / f"student{i:02d}.ipynb")
        for workers in (1, 2):
            start = time.perf_counter()
            run_grade(
                REPO,
                [str(folder)],
                ASSIGNMENT,
                Path(scratch) / f"g{workers}.sqlite",
                workers,
                as_json=False,
                limits=limits,
            )
            seconds = time.perf_counter() - start
            print(
                f"{workers} worker(s): {args.hand_ins} hand-ins in {seconds:.0f} s "
                f"(reference run included) = {60 * args.hand_ins / seconds:.1f} per minute"
            )


if __name__ == "__main__":
    main()
