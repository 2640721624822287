"""Grading under load: correct hand-ins keep full marks while CPU hogs fill every core,
because time limits are CPU time (a busy machine slows grading down, never marks it down)."""

import os
import subprocess
import sys

import pytest

from coursekit.commands.cli import main
from coursekit.grading.records.gradebook import Gradebook
from tests.helpers.hand_ins import ASSIGNMENT, IMPORTS, REPO, answers, notebook

pytestmark = [pytest.mark.grading, pytest.mark.slow]

# Spins for at most five minutes even if the test is killed before it can stop it.
HOG = "import time\nend = time.monotonic() + 300\nwhile time.monotonic() < end:\n    pass"


def test_correct_hand_ins_keep_full_marks_beside_cpu_hogs(tmp_path):
    folder = tmp_path / "hand-ins"
    folder.mkdir()
    for student in ("ada", "bob", "cy"):
        (folder / f"{student}.ipynb").write_text(notebook([IMPORTS, *answers()]))
    hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(2 * os.cpu_count() + 1)]
    try:
        gradebook = tmp_path / "gradebook.sqlite"
        # Tight CPU limits: each test needs a fraction of a second of CPU, so on a machine
        # this busy a wall-clock limit of the same size would cut correct work short.
        status = main(
            [
                "grade", str(folder), "--assignment", ASSIGNMENT, "--root", str(REPO),
                "--gradebook", str(gradebook), "--workers", "2",
                "--cell-timeout", "5", "--test-timeout", "2", "--timeout", "60",
            ]
        )  # fmt: skip
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert status == 0
    with Gradebook(gradebook) as book:
        grades = book.current_grades(ASSIGNMENT)
    assert len(grades) == 3
    for grade in grades:
        assert grade.score == grade.max_score, (grade.student, grade.result)
