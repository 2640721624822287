"""The ``coursekit grade`` command: gradebook, skipping what is graded, progress, output."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from coursekit.checks import questions_of
from coursekit.course import MODULES
from coursekit.grading.gradebook import Gradebook
from coursekit.grading.grader import GraderError, GradeResult, file_sha256, grade_all, prepare
from coursekit.grading.handin import read_hand_in, student_name
from coursekit.grading.packed import PACKED_SUFFIX
from coursekit.grading.sandbox import Limits
from coursekit.progress import Progress


def expand(hand_ins: list[str]) -> list[str]:
    """Files as given; folders searched for notebooks and packed hand-ins (no checkpoints)."""
    paths = []
    for item in hand_ins:
        path = Path(item)
        if path.is_dir():
            found = [*path.rglob("*.ipynb"), *path.rglob(f"*{PACKED_SUFFIX}")]
            paths += sorted(str(p) for p in found if ".ipynb_checkpoints" not in p.parts)
        else:
            paths.append(str(path))
    return paths


def _identity(path: str, assignment: str) -> tuple[str, str]:
    """(student, sha256) of a hand-in, also for files that are not notebooks."""
    try:
        hand_in = read_hand_in(path, assignment)
        return hand_in.student, hand_in.sha256
    except Exception:  # any hand-in, however broken, gets graded (and its error recorded)
        return student_name(Path(path), assignment), file_sha256(path)


def run_grade(
    root: Path,
    hand_ins: list[str],
    assignment: str,
    gradebook_path: Path,
    workers: int,
    as_json: bool,
    limits: Limits,
    regrade: bool = False,
) -> int:
    known = [m.name for m in MODULES if questions_of(m.name)]
    if assignment not in known:
        print(
            f"coursekit grade: no graded assignment named {assignment!r}. "
            f"Graded assignments: {', '.join(known)}.",
            file=sys.stderr,
        )
        return 2
    paths = expand(hand_ins)
    if not paths:
        print("coursekit grade: no hand-ins found in the paths given.", file=sys.stderr)
        return 2
    with Gradebook(gradebook_path) as book:
        todo, done = [], []
        for path in paths:
            student, sha = _identity(path, assignment)
            if not regrade and sha and book.is_graded(assignment, student, sha):
                done.append((student, sha))
            else:
                todo.append(path)
        if done:
            print(
                f"{len(done)} hand-in(s) already graded (unchanged files): kept as they are; "
                "use --regrade to grade them again.",
                file=sys.stderr,
            )
        if todo:
            from coursekit.grading import landlock

            if landlock.abi_version() < 1:
                print(
                    "Warning: Linux Landlock is not available here, so hand-ins run with this "
                    "user's file access (time, memory and process limits still apply). Grade "
                    "on Linux 5.13 or newer to keep hand-ins out of your files.",
                    file=sys.stderr,
                )
            from coursekit.grading import privileges

            if os.geteuid() == 0 and "pids" not in privileges._own_cgroups():
                print(
                    "Warning: grading as root without a pids cgroup: root ignores process "
                    "limits, so a hand-in could start many processes. Grade as an ordinary "
                    "user, or where /sys/fs/cgroup is writable.",
                    file=sys.stderr,
                )
            print(f"Running the reference solution of {assignment}...", file=sys.stderr)
            try:
                plan = prepare(root, assignment, limits)
            except GraderError as error:
                print(f"coursekit grade: {error}", file=sys.stderr)
                return 2
            run_id = book.start_run(assignment, plan.specs)
            flagged = []

            def on_result(result: GradeResult) -> None:
                try:
                    book.record(result, run_id)
                except Exception as error:  # one odd result must not end the batch
                    print(f"coursekit grade: storing {result.path}: {error}", file=sys.stderr)
                    result = GradeResult(
                        path=result.path,
                        student=result.student,
                        assignment=assignment,
                        sha256=result.sha256,
                        max_score=result.max_score,
                        error="The grader could not store this hand-in's result.",
                    )
                    book.record(result, run_id)
                note = f"{result.student}: {result.score:g}/{result.max_score:g}"
                if any(n.startswith("Flagged for review") for n in result.notes):
                    note += " (flagged for review)"
                    flagged.append(result.student)
                progress.step(note + (" (error)" if result.error else ""))
                if as_json:
                    print(json.dumps(result.public()), flush=True)

            with Progress(len(todo), f"grading {assignment}") as progress:
                grade_all(todo, plan, workers, on_result)
            book.finish_run(run_id)
            if flagged:  # the bar shows only the latest hand-in: name these once more
                print(f"Flagged for review: {', '.join(flagged)}", file=sys.stderr)
        if as_json:
            wanted = {(s, h) for s, h in done}
            for grade in book.current_grades(assignment):
                if (grade.student, grade.sha256) in wanted:
                    print(json.dumps({k: v for k, v in grade.result.items() if k != "notes"}))
        elif not as_json:
            _print_table(book, assignment)
    if not as_json:
        print(f"Gradebook: {gradebook_path.resolve()}", file=sys.stderr)
    return 0


def _print_table(book: Gradebook, assignment: str) -> None:
    grades = book.current_grades(assignment)
    width = max([len(g.student) for g in grades] + [7])
    print(f"{'student'.ljust(width)}  score")
    for grade in grades:
        suffix = f"  ({grade.error})" if grade.error else ""
        print(f"{grade.student.ljust(width)}  {grade.score:g}/{grade.max_score:g}{suffix}")
