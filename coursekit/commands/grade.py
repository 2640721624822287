"""The ``coursekit grade`` command: find the hand-ins, grade what is new, keep every result.

Paths are checked before any work: one that does not exist stops the run (exit 2, nothing
written). Hand-ins that clash (two files for one student) are named and left out; the rest
are graded, and the command exits 1 so the clash is not missed. Each result is written to
the gradebook as it arrives; if the gradebook cannot be written (a full disk), grading
stops with a clear message, keeping every result already recorded (exit 1). A hand-in the
grader failed on (its own machinery, every try) is stored as not graded, with the reason and
no score; the command names each one and exits 1: run it again, and it grades only those.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path

from coursekit.checks import questions_of
from coursekit.course import MODULES
from coursekit.grading.collect import collect
from coursekit.grading.grader import (
    GraderError,
    GradeResult,
    close_to_hand_ins,
    file_sha256,
    grade_all,
    prepare,
)
from coursekit.grading.records.exports import points, review_flags
from coursekit.grading.records.gradebook import Gradebook, GradebookError
from coursekit.grading.sandbox.driver import (
    Limits,
    Options,
    SandboxSetupError,
    WarmParent,
    describe_confinement,
    mode_of,
    sweep_leftovers,
)
from coursekit.grading.sandbox.read_shield import shielded_grade
from coursekit.grading.text import for_terminal, for_terminal_lines
from coursekit.progress import Progress


def _say(message: str) -> None:
    """Print ``message`` for the instructor, each of its lines escaped (:func:`for_terminal`:
    a file name or a hand-in's text in it cannot move the cursor or reorder the line)."""
    print(f"coursekit grade: {for_terminal_lines(message)}", file=sys.stderr)


@shielded_grade  # where hand-ins share this machine's files: the course closed to them first
def run_grade(
    root: Path,
    hand_ins: list[str],
    assignment: str,
    gradebook_path: Path,
    workers: int,
    as_json: bool,
    limits: Limits,
    regrade: bool = False,
    options: Options | None = None,
    seed: int | None = None,
    warm: WarmParent | None = None,
) -> int:
    known = [m.name for m in MODULES if questions_of(m.name)]
    if assignment not in known:
        _say(f"no graded assignment named {assignment!r}. Graded assignments: {', '.join(known)}.")
        return 2
    found = collect(hand_ins, assignment)
    if found.missing:
        for path in found.missing:
            _say(f"{for_terminal(path)} does not exist.")
        _say("nothing was graded or written; check the paths and run it again.")
        return 2
    for problem in found.problems:
        _say(problem)
    if not found.hand_ins:
        _say("no hand-ins to grade in the paths given (notebooks or *.coursekit.zip files).")
        return 2 if not found.problems else 1
    sweep_leftovers()  # of a grading run that was killed outright
    try:
        book = Gradebook(gradebook_path)
    except GradebookError as error:
        _say(str(error))
        return 2
    with book:
        status = _grade_new(
            root,
            found.hand_ins,
            assignment,
            book,
            workers,
            as_json,
            limits,
            regrade,
            options,
            seed,
            warm,
            hand_ins,
        )
        if status == 2:
            return 2
        if not as_json:
            _print_table(book, assignment)
    if not as_json:
        print(f"Gradebook: {for_terminal(gradebook_path.resolve())}", file=sys.stderr)
    return 1 if found.problems or status else 0


def _grade_new(
    root, hand_ins, assignment, book, workers, as_json, limits, regrade, options, seed, warm, given
) -> int:
    # what hand-ins running as another user must not read: each file graded, and the folders
    # given (a folder closed to others closes all it holds)
    hand_in_items = sorted({str(h.path) for h in hand_ins} | {g for g in given if os.path.isdir(g)})
    todo, done = [], []
    for hand_in in hand_ins:
        sha = file_sha256(hand_in.path)
        if not regrade and sha and book.is_graded(assignment, hand_in.student, sha):
            done.append((hand_in.student, sha))
        else:
            todo.append((hand_in.path, hand_in.student))
    if done:
        print(
            f"{len(done)} hand-in(s) already graded (unchanged files): kept as they are; "
            "use --regrade to grade them again.",
            file=sys.stderr,
        )
    status = 0
    if todo:
        print(f"Running the reference solution of {assignment}...", file=sys.stderr)
        try:
            # one warm parent for the whole run: the reference and every hand-in fork from it.
            # Launched, not waited for: prepare() waits once coursekit's answers are computed.
            warm = warm or WarmParent()
            warm.launch()
            with contextlib.closing(warm):
                plan = prepare(root, assignment, limits, seed=seed, options=options, warm=warm)
                plan.closed += close_to_hand_ins(hand_in_items, plan.confinement)
                _say_how_it_runs(plan)
                status = _grade_todo(todo, plan, book, workers, as_json, warm)
        except (GraderError, SandboxSetupError) as error:
            _say(str(error))
            return 2
    if as_json:
        wanted = set(done)
        for grade in book.current_grades(assignment):
            if (grade.student, grade.sha256) in wanted:
                print(json.dumps(grade.result), flush=True)
    return status


def _say_how_it_runs(plan) -> None:
    print(
        f"Hidden tests drawn with seed {plan.seed}: `grade --seed {plan.seed}` draws them "
        "again (with --regrade for hand-ins already graded).",
        file=sys.stderr,
    )
    print(f"Mode: {mode_of(plan.confinement)}.", file=sys.stderr)
    for folder in plan.closed:
        print(
            f"Made {for_terminal(folder)} unreadable to other users (chmod o-rwx): hand-ins run "
            "as another user on this machine's files.",
            file=sys.stderr,
        )
    in_place, missing = describe_confinement(plan.confinement)
    print(f"Sandbox: {'; '.join(in_place)}.", file=sys.stderr)
    for line in missing:
        print(f"Warning: the sandbox here has no {line}", file=sys.stderr)


def _grade_todo(todo, plan, book: Gradebook, workers: int, as_json: bool, warm) -> int:
    try:
        run_id = book.start_run(plan.assignment, plan.specs, plan.seed)
    except GradebookError as error:
        _say(f"{error} Nothing was graded.")
        return 1
    flagged, recorded, failed_on = [], [0], []

    def on_result(result: GradeResult) -> None:
        book.record(result, run_id)  # GradebookError stops the batch: see below
        recorded[0] += 1
        if result.not_graded:
            failed_on.append(f"{for_terminal(result.student)} ({for_terminal(result.path)})")
            progress.step(f"{for_terminal(result.student)}: not graded (the grader failed)")
            if as_json:
                print(json.dumps(result.public()), flush=True)
            return
        note = f"{for_terminal(result.student)}: {points(result.score)}/{points(result.max_score)}"
        reasons = review_flags(result.notes)
        if reasons:
            note += " (flagged for review)"
            flagged.extend(f"  {for_terminal(result.student)}: {for_terminal(r)}" for r in reasons)
        progress.step(note + (" (error)" if result.error else ""))
        if as_json:
            print(json.dumps(result.public()), flush=True)

    try:
        with Progress(len(todo), f"grading {plan.assignment}") as progress:
            grade_all(todo, plan, workers, on_result, warm)
    except GradebookError as error:
        _say(
            f"{error} Grading stopped: the {recorded[0]} result(s) recorded before are kept; "
            f"{len(todo) - recorded[0]} hand-in(s) were not recorded. Free space (or make the "
            "gradebook writable) and run the same command again: it grades only those."
        )
        return 1
    except SandboxSetupError as error:
        _say(
            f"the grading sandbox failed ({error}). Grading stopped: the "
            f"{recorded[0] - len(failed_on)} result(s) recorded before are kept; "
            f"{len(todo) - recorded[0] + len(failed_on)} "
            "hand-in(s) were not graded, and no one was marked down for it. Run the same "
            "command again: it grades only those (`coursekit doctor` reports what this "
            "machine offers)."
        )
        return 1
    book.finish_run(run_id)
    if flagged:  # the bar shows only the latest hand-in: name these once more, with why
        print(
            "Flagged for review (read these hand-ins; grades.csv's flag column says why too):",
            *flagged,
            sep="\n",
            file=sys.stderr,
        )
    if failed_on:
        _say(
            f"the grader failed on {len(failed_on)} hand-in(s), every try (not the students' "
            f"doing): {', '.join(failed_on)}. They are stored as not graded, with no score. "
            "Run the same command again: it grades only those."
        )
        return 1
    return 0


def _print_table(book: Gradebook, assignment: str) -> None:
    grades = book.current_grades(assignment)
    names = {g.student: for_terminal(g.student) for g in grades}
    width = max([len(n) for n in names.values()] + [7])
    print(f"{'student'.ljust(width)}  score")
    for grade in grades:
        suffix = f"  ({for_terminal(grade.error)})" if grade.error else ""
        if grade.not_graded:
            suffix = f"  (the grader failed on it: {for_terminal(grade.not_graded)})"
        score = (
            "not graded"
            if grade.score is None
            else f"{points(grade.score)}/{points(grade.max_score)}"
        )
        print(f"{names[grade.student].ljust(width)}  {score}{suffix}")
