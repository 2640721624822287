"""A grading run killed part-way resumes without losing or duplicating results."""

import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from tests.helpers.hand_ins import ASSIGNMENT, IMPORTS, REPO, answers, notebook

pytestmark = pytest.mark.grading


def _gradings(path) -> list[tuple]:
    if not path.exists():
        return []
    with sqlite3.connect(path) as db:
        try:
            return db.execute(
                "SELECT s.student, COUNT(g.id) FROM submissions s JOIN gradings g "
                "ON g.submission_id = s.id GROUP BY s.student"
            ).fetchall()
        except sqlite3.OperationalError:  # tables not made yet
            return []


def test_a_killed_run_resumes_and_grades_each_hand_in_exactly_once(tmp_path):
    folder = tmp_path / "hand-ins"
    folder.mkdir()
    for name in ("ann", "ben", "cat", "dan"):
        (folder / f"{name}.ipynb").write_text(notebook([IMPORTS, *answers()]))
    gradebook = tmp_path / "gradebook.sqlite"
    command = [
        sys.executable,
        "-m",
        "coursekit.commands.cli",
        "grade",
        str(folder),
        "--assignment",
        ASSIGNMENT,
        "--workers",
        "1",
        "--gradebook",
        str(gradebook),
        "--root",
        str(REPO),
    ]
    first = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    deadline = time.monotonic() + 240
    while not _gradings(gradebook) and time.monotonic() < deadline:
        time.sleep(0.2)
    import os

    os.killpg(first.pid, signal.SIGKILL)  # the grader and everything it started
    first.wait()
    graded_before = dict(_gradings(gradebook))
    assert 1 <= len(graded_before) < 4

    second = subprocess.run(command, capture_output=True, text=True, timeout=400)
    assert second.returncode == 0, second.stderr
    assert "already graded" in second.stderr
    counts = dict(_gradings(gradebook))
    assert counts == {"ann": 1, "ben": 1, "cat": 1, "dan": 1}
    with sqlite3.connect(gradebook) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
