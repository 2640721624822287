"""What the grading commands run: grade, export, gradescope and report (as in
:mod:`.course_runs`: options in, exit status out, command modules imported when run)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from coursekit.commands.command_line.course_root import course_root
from coursekit.commands.command_line.course_runs import shown


def limits(args: argparse.Namespace):
    """The sandbox limits ``grade`` and ``gradescope`` take from the same options."""
    from coursekit.grading.sandbox.driver import Limits

    return Limits(
        cell_timeout_s=args.cell_timeout,
        task_timeout_s=args.test_timeout,
        hand_in_timeout_s=args.timeout,
        wall_factor=args.wall_factor,
        memory_bytes=args.memory_mb * 2**20,
    )


def grade(args: argparse.Namespace) -> int:
    from coursekit.grading.sandbox.warm_parent import WarmParent

    root = course_root(args.root)
    # A mistyped path is found before anything is imported or started: in well under a
    # second, not after torch has loaded (run_grade checks again, for callers of its own).
    missing = [item for item in args.hand_ins if not os.path.lexists(item)]
    if missing:
        for item in missing:
            print(f"coursekit grade: {shown(item)} does not exist.", file=sys.stderr)
        print(
            "coursekit grade: nothing was graded or written; check the paths and run it again.",
            file=sys.stderr,
        )
        return 2
    if args.workers < 1:
        print("coursekit grade: --workers must be at least 1.", file=sys.stderr)
        return 2
    if not (args.wall_factor >= 1 and min(args.cell_timeout, args.test_timeout, args.timeout) > 0):
        print(
            "coursekit grade: time limits must be above 0 and --wall-factor at least 1.",
            file=sys.stderr,
        )
        return 2
    if args.seed is not None and not 0 <= args.seed < 2**63:
        print(
            "coursekit grade: --seed must be a whole number from 0 to 2**63 - 1.", file=sys.stderr
        )
        return 2
    grading_limits = limits(args)
    # The sandboxes' warm parent imports torch in its own process while this one imports the
    # grader: the first result comes seconds sooner. It is ended however grading ends.
    warm = WarmParent()
    warm.launch()
    try:
        return _run_grade(root, args, grading_limits, warm)
    finally:
        warm.close()


def _run_grade(root: Path, args: argparse.Namespace, grading_limits, warm) -> int:
    from coursekit.commands.grade import run_grade
    from coursekit.grading.sandbox.driver import Options

    return run_grade(
        root,
        args.hand_ins,
        args.assignment,
        Path(args.gradebook),
        args.workers,
        args.json,
        grading_limits,
        regrade=args.regrade,
        options=Options(unconfined=args.unconfined),
        seed=args.seed,
        warm=warm,
    )


def export(args: argparse.Namespace) -> int:
    from coursekit.commands.instructor import run_export

    return run_export(Path(args.gradebook), args.format, Path(args.out), args.assignment)


def gradescope(args: argparse.Namespace) -> int:
    from coursekit.commands.gradescope import build_bundle

    root = course_root(args.root)
    bundle_limits = limits(args)
    try:
        settings = build_bundle(
            root, args.assignment, Path(args.out), bundle_limits, args.seed, args.torch
        )
    except ValueError as error:
        print(f"coursekit gradescope: {shown(error)}", file=sys.stderr)
        return 2
    print(
        f"wrote {shown(Path(args.out).resolve())}: {args.assignment}, "
        f"torch {settings['torch']} (CPU), "
        "hidden tests drawn anew for every submission (its seed is in the autograder's "
        "output, which students do not see). A hand-in is stopped after "
        f"{args.timeout:g} s of CPU time ({args.timeout * args.wall_factor:g} s of wall-clock "
        "time at most), plus the reference solution's run on each submission: set Gradescope's "
        "autograder timeout above that (docs/instructor-guide.md, Gradescope)."
    )
    return 0


def report(args: argparse.Namespace) -> int:
    from coursekit.commands.class_report import students_of, write_report
    from coursekit.grading.records.exports import name_warnings
    from coursekit.grading.records.gradebook import GradebookError

    try:
        written = write_report(Path(args.gradebook), Path(args.out), args.assignment)
        students = students_of(Path(args.gradebook), args.assignment)
    except (ValueError, GradebookError) as error:
        print(f"coursekit report: {shown(error)}", file=sys.stderr)
        return 2
    lines, _ = name_warnings(students, "the report counts them apart, under the same name.")
    for line in lines:
        print(f"coursekit report: warning: {line}", file=sys.stderr)
    print(f"wrote {shown(written)}: open it in a browser.")
    return 0
