"""The instructor's command after grading: export. (Certificates: ``commands/certificate.py``.)

Whatever they print that a hand-in or a page could shape (a student's name, a file name, a
certificate's fields) goes through :func:`~coursekit.grading.text.for_terminal`. An export
that had to escape a name (a control, bidirectional or invisible character) names it once on
the terminal, and says so when two students' names would read the same once escaped.
"""

from __future__ import annotations

import sys
from pathlib import Path

from coursekit.checks import questions_of
from coursekit.course import MODULES
from coursekit.grading.records import exports
from coursekit.grading.records.gradebook import Gradebook
from coursekit.grading.text import for_terminal

_HIDDEN = "control, bidirectional or invisible characters"


def warn_about_names(command: str, names, look_alike_consequence: str) -> list[list[str]]:
    """Print :func:`~coursekit.grading.records.exports.name_warnings` on stderr; return the
    groups of look-alike names (as stored)."""
    lines, groups = exports.name_warnings(names, look_alike_consequence)
    for line in lines:
        print(f"coursekit {command}: warning: {line}", file=sys.stderr)
    return groups


def _quoted(name: str) -> str:
    return f"'{for_terminal(name)}'"


def run_export(gradebook: Path, fmt: str, out: Path, assignment: str | None) -> int:
    if not gradebook.exists():
        shown = for_terminal(gradebook)
        print(f"coursekit export: no gradebook at {shown}; grade first.", file=sys.stderr)
        return 2
    with Gradebook(gradebook) as book:
        grades = book.current_grades(assignment)
    if not grades:
        print("coursekit export: the gradebook holds no grades for that.", file=sys.stderr)
        return 2
    names = sorted({g.student for g in grades})
    pending = exports.not_graded_names(grades)  # the grader failed on them: no score
    if pending:
        print(
            f"coursekit export: {len(pending)} hand-in(s) are not graded (the grader failed on "
            f"them; grade them again): {', '.join(_quoted(n) for n in pending)}. "
            + ("Their score is left empty." if fmt in ("csv", "feedback") else "Left out."),
            file=sys.stderr,
        )
    if fmt == "csv":
        target = out if out.suffix == ".csv" else out / "grades.csv"
        alike = warn_about_names(
            "export", names, "their rows are written, but cannot be told apart by name."
        )
        print(f"wrote {for_terminal(exports.write_csv(grades, target))}")
        return 1 if alike else 0
    if fmt == "lms":
        target = out if out.suffix == ".csv" else out / "grades-lms.csv"
        # a student with a hand-in not graded has no total yet: left out, never given a 0
        waiting = {g.student for g in grades if g.score is None}
        graded = [g for g in grades if g.student not in waiting]
        rows = (
            [(g.student, g.score, g.max_score) for g in graded]
            if assignment
            else course_totals(graded)
        )
        alike = warn_about_names(
            "export",
            names,
            "not written (a grade import would give both grades to one name): rename one "
            "hand-in and grade again.",
        )
        left_out = {name for group in alike for name in group}
        rows = [row for row in rows if row[0] not in left_out]
        written = exports.write_lms_csv(rows, target)
        print(f"wrote {for_terminal(written)}: {len(rows)} students")
        return 1 if alike else 0
    suffix = ".json" if fmt == "gradescope" else ".html"
    warn_about_names("export", names, "their files are apart, but show the same name.")
    clashes = exports.clashes(grades, suffix)
    for clash, _ in clashes:  # never one file for two students: both are left out, and named
        print(f"coursekit export: not written, {for_terminal(clash)}.", file=sys.stderr)
    clashing = {name for _, name in clashes}
    grades = [g for g in grades if exports.export_name(g, suffix).casefold() not in clashing]
    if fmt == "gradescope":
        count = len(exports.write_gradescope(grades, out))
        print(f"wrote {count} results files to {for_terminal(out)}/")
    else:
        count = len(exports.write_feedback(grades, out))
        print(f"wrote {count} feedback pages to {for_terminal(out)}/")
    return 1 if clashes else 0


def _graded_modules() -> tuple[list[str], float]:
    """(the course's graded modules, their points in all): what a course total counts."""
    graded = [m.name for m in MODULES if questions_of(m.name)]
    return graded, float(sum(sum(q.points for q in questions_of(a)) for a in graded))


def course_totals(grades: list) -> list[tuple[str, float, float]]:
    """(student, score, out of) for each student in ``grades``, over the whole course: every
    graded module counts, one not handed in as 0, and grades of other assignments not. (A
    certificate instead refuses a student who has not handed in a module it covers.)"""
    graded, maximum = _graded_modules()
    totals: dict[str, float] = {}
    for grade in grades:
        counted = grade.score if grade.assignment in graded else 0.0
        totals[grade.student] = totals.get(grade.student, 0.0) + counted
    return [(student, score, maximum) for student, score in totals.items()]
