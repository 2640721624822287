"""A hand-in flagged for review says why wherever it is listed: `grade`'s terminal output
names each flagged hand-in with its reasons, and ``grades.csv`` has a ``flag`` column (empty
when not flagged), added after the columns it had so an import mapped by position still
reads them where they were."""

from __future__ import annotations

import csv

import pytest

from coursekit.commands.cli import main
from coursekit.grading.grader import GradeResult
from coursekit.grading.records.exports import CSV_HEADER, FLAG_SEPARATOR, review_flags
from coursekit.grading.records.gradebook import Gradebook

pytestmark = pytest.mark.grading
#: grades.csv's columns before the flag column: kept, in this order
EARLIER_COLUMNS = ["student", "assignment", "score", "max_score", "percent", "graded_at", "error"]
MACHINERY = "the notebook uses the grader's own machinery (QUESTIONS); an instructor will read it."
WHILE_IT_RAN = "while it ran, it replaced torch.allclose; an instructor will read it."


def _result(student: str, notes: list[str], sha: str) -> GradeResult:
    graded = GradeResult(f"{student}.ipynb", student, "01_accumulation", sha, 8.0, 10.0)
    graded.notes = notes
    return graded


def test_review_flags_are_the_flag_notes_without_their_prefix():
    notes = [f"Flagged for review: {MACHINERY}", "Cell 3 raised NameError: x.", "Flagged for"]
    assert review_flags(notes) == [MACHINERY]
    assert review_flags([]) == review_flags(None) == []


def test_grades_csv_has_a_flag_column_last_with_every_reason(tmp_path):
    book_path = tmp_path / "g.sqlite"
    with Gradebook(book_path) as book:
        flags = [f"Flagged for review: {MACHINERY}", f"Flagged for review: {WHILE_IT_RAN}"]
        book.record(_result("ada", [*flags, "Cell 2 raised ValueError: no."], "a"), None)
        book.record(_result("ben", ["Cell 2 raised ValueError: no."], "b"), None)
    out = tmp_path / "grades.csv"
    assert (
        main(["export", "--gradebook", str(book_path), "--format", "csv", "--out", str(out)]) == 0
    )
    with open(out, encoding="utf-8", newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == [*EARLIER_COLUMNS, "flag"] == list(CSV_HEADER)
    by_student = {row[0]: dict(zip(rows[0], row, strict=True)) for row in rows[1:]}
    assert by_student["ada"]["flag"] == MACHINERY + FLAG_SEPARATOR + WHILE_IT_RAN
    assert by_student["ben"]["flag"] == ""  # not flagged: a failed cell is no flag
    assert by_student["ada"]["score"] == by_student["ben"]["score"] == "8"  # a flag costs nothing
