"""The grading benchmark's nbgrader course: the module-1 source notebook converted to
nbgrader's format keeps every cell and marks each question and its test as nbgrader expects;
with nbgrader installed (the optional extra), real ``nbgrader autograde`` grades a right and a
wrong hand-in as coursekit does."""

import os
import sys
from pathlib import Path

import nbformat
import pytest

from coursekit.authoring.markup import BEGIN_HIDDEN, BEGIN_SOLUTION
from coursekit.checks import questions_of
from tests.corpora import student_code

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import nbgrader_course  # noqa: E402

ASSIGNMENT = "01_accumulation"
SOURCE = REPO / "notebooks" / f"{ASSIGNMENT}.ipynb"


def test_conversion_marks_each_question_and_its_test_and_changes_nothing_else():
    original = nbformat.read(SOURCE, as_version=4)
    converted = nbgrader_course.nbgrader_source(SOURCE, ASSIGNMENT)
    assert [c.source for c in converted.cells] == [c.source for c in original.cells]
    marked = [c for c in converted.cells if "nbgrader" in c.metadata]
    solutions = {c.metadata.nbgrader.grade_id: c for c in marked if c.metadata.nbgrader.solution}
    tests = {c.metadata.nbgrader.grade_id: c for c in marked if c.metadata.nbgrader.grade}
    points = {q.name: q.points for q in questions_of(ASSIGNMENT)}
    assert set(solutions) == set(points)
    assert set(tests) == {f"test_{name}" for name in points}
    assert len(marked) == 2 * len(points)
    for cell in solutions.values():
        assert BEGIN_SOLUTION in cell.source
        assert cell.metadata.nbgrader.locked is False
    for name, want in points.items():
        cell = tests[f"test_{name}"]
        assert cell.metadata.nbgrader.points == want
        assert cell.metadata.nbgrader.locked is True
        assert cell.source.startswith(f'check("{name}"')
        assert BEGIN_HIDDEN in cell.source  # nbgrader strips it on release, restores it to grade


def test_a_source_without_a_test_cell_for_a_question_is_refused(tmp_path):
    notebook = nbformat.read(SOURCE, as_version=4)
    notebook.cells = [c for c in notebook.cells if not c.source.startswith('check("plan_micro')]
    nbformat.write(notebook, tmp_path / SOURCE.name)
    with pytest.raises(SystemExit, match="plan_micro_batch"):
        nbgrader_course.nbgrader_source(tmp_path / SOURCE.name, ASSIGNMENT)


@pytest.mark.slow
@pytest.mark.skipif(not nbgrader_course.available(), reason="the optional nbgrader extra")
def test_real_nbgrader_grades_a_right_and_a_wrong_hand_in(tmp_path):
    root = tmp_path / "course"
    nbgrader_course.make_course(root, SOURCE, ASSIGNMENT)
    names = {q.name for q in questions_of(ASSIGNMENT)}
    right = {n: v["correct"] for n, v in student_code.BY_QUESTION.items() if n in names}
    wrong = {**right, "accumulate_window": student_code.BY_QUESTION["accumulate_window"][
        "loss_not_divided"
    ]}  # fmt: skip
    nbgrader_course.hand_in(root, ASSIGNMENT, "right", right)
    nbgrader_course.hand_in(root, ASSIGNMENT, "wrong", wrong)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COURSEKIT_STRICT_CHECKS": "1"}
    _, scores = nbgrader_course.autograde(root, ASSIGNMENT, env)
    total = sum(q.points for q in questions_of(ASSIGNMENT))
    window = next(q.points for q in questions_of(ASSIGNMENT) if q.name == "accumulate_window")
    assert scores == {"right": total, "wrong": total - window}
