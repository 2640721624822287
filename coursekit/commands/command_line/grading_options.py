"""Options and help of the commands that grade and report: grade, export, gradescope and
report. One function per command, as in :mod:`.course_options`."""

from __future__ import annotations

import argparse

from coursekit.commands.command_line.course_options import ROOT_HELP

#: Shown under ``coursekit grade --help``, one command a line; a test parses each one.
GRADE_EXAMPLES = (
    "coursekit grade hand-ins/01 --assignment 01_accumulation --gradebook grades.sqlite",
    "coursekit grade hand-ins/01 --assignment 01_accumulation --workers 2 --regrade",
    "coursekit export --format html --out feedback/ --gradebook grades.sqlite",
    "coursekit export --format lms --assignment 01_accumulation --out lms-01.csv "
    "--gradebook grades.sqlite",
)


def grade(commands: argparse._SubParsersAction) -> None:
    grade = commands.add_parser(
        "grade",
        help="grade a folder of hand-ins into the gradebook",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n" + "\n".join(f"  {line}" for line in GRADE_EXAMPLES),
    )
    grade.add_argument(
        "hand_ins", nargs="+", metavar="HAND_IN", help="notebooks, packed hand-ins or folders"
    )
    grade.add_argument("--assignment", required=True, help="module notebook, e.g. 01_accumulation")
    grade.add_argument("--workers", type=int, default=1, help="hand-ins graded at once")
    grade.add_argument("--gradebook", default="gradebook.sqlite", help="SQLite gradebook file")
    grade.add_argument("--json", action="store_true", help="one JSON object per hand-in")
    grade.add_argument("--regrade", action="store_true", help="grade unchanged hand-ins again")
    grade.add_argument(
        "--seed",
        type=int,
        help="draw the hidden tests from this seed (a run prints its seed; each grade records it)",
    )
    grade.add_argument("--cell-timeout", type=float, default=60.0, help="CPU seconds per cell")
    grade.add_argument("--test-timeout", type=float, default=30.0, help="CPU seconds per test")
    grade.add_argument("--timeout", type=float, default=300.0, help="CPU seconds per hand-in")
    grade.add_argument(
        "--wall-factor",
        type=float,
        default=10.0,
        help="code that waits without computing is ended after this many times its CPU limit "
        "in wall-clock time (default 10)",
    )
    grade.add_argument("--memory-mb", type=int, default=3072, help="memory per hand-in")
    grade.add_argument("--root", help=ROOT_HELP)
    grade.add_argument(
        "--unconfined",
        action="store_true",
        help="run hand-ins even where their reads cannot be confined: as your own user with "
        "no namespaces (not root, and no user namespaces), or on this machine's files with no "
        "Landlock while grade finds the course or other hand-ins readable to them (it names "
        "each): only for hand-ins you trust",
    )


def export(commands: argparse._SubParsersAction) -> None:
    export = commands.add_parser(
        "export", help="grades as CSV, a CSV for Canvas or Moodle, Gradescope JSON or HTML pages"
    )
    export.add_argument(
        "--format",
        choices=["csv", "lms", "gradescope", "html"],
        default="csv",
        help="csv: every grade; lms: student, score, out of (one assignment, or the course "
        "total without --assignment); gradescope; html: feedback pages",
    )
    export.add_argument("--out", default="grades", help="file (.csv) or folder to write")
    export.add_argument("--assignment", help="only this assignment")
    export.add_argument("--gradebook", default="gradebook.sqlite")


def gradescope(commands: argparse._SubParsersAction) -> None:
    gradescope = commands.add_parser(
        "gradescope", help="write a Gradescope autograder zip that grades one assignment"
    )
    gradescope.add_argument("--assignment", required=True, help="module notebook, e.g. 00_welcome")
    gradescope.add_argument("--out", default="autograder.zip", help="zip file to write")
    gradescope.add_argument(
        "--seed",
        type=int,
        help="refused: every submission draws its hidden tests from a seed of its own (the "
        "guide says how to grade one again with the same draw)",
    )
    gradescope.add_argument("--torch", help="torch version to install (default: scripts/setup's)")
    gradescope.add_argument("--cell-timeout", type=float, default=60.0, help="CPU s per cell")
    gradescope.add_argument("--test-timeout", type=float, default=30.0, help="CPU s per test")
    gradescope.add_argument("--timeout", type=float, default=300.0, help="CPU s per hand-in")
    gradescope.add_argument(
        "--wall-factor", type=float, default=3.0, help="wall-clock limit, times the CPU limit"
    )
    gradescope.add_argument("--memory-mb", type=int, default=3072, help="memory per hand-in")
    gradescope.add_argument("--root", help=ROOT_HELP)


def report(commands: argparse._SubParsersAction) -> None:
    report = commands.add_parser(
        "report",
        help="one HTML page of how the class did: scores, common mistakes, hand-ins to read",
    )
    report.add_argument("--assignment", help="only this assignment (default: every graded one)")
    report.add_argument("--out", default="report.html", help="HTML file to write")
    report.add_argument("--gradebook", default="gradebook.sqlite")
