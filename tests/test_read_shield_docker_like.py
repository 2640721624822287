"""Issue 40, item 3, end to end: graded Docker-like without Landlock (no mount namespace, no
Landlock: only file permissions keep a hand-in from the course), a hand-in that reads the
course's solutions/ and runs its definitions, reads another batch's hand-in and the gradebook,
gets nothing; the right answers in its batch keep full marks; the modes are given back.

One small batch of module 0 (one question), in a course copied to a temporary folder, all of
it readable by every user as a checkout leaves it. About 25 s on 2 busy cores (one grading
run: torch imported once, the reference and three hand-ins).
"""

import json
import os
import shutil
import stat
import sys

import pytest

from tests.corpora import student_code
from tests.helpers import docker_like
from tests.helpers.hand_ins import REPO, cells_of, notebook

pytestmark = [
    pytest.mark.grading,
    pytest.mark.skipif(docker_like.available() is not None, reason=str(docker_like.available())),
]
ASSIGNMENT = "00_welcome"
RIGHT = student_code.BY_QUESTION["effective_batch_size"]["correct"]

# Reads what it should not; with anything it read, it would define the right answer (full
# marks). Its own notebook has no answer at all.
THIEF = """
import os
import nbformat
leaked = []
for path in {targets!r}:
    try:
        if os.path.isdir(path):
            os.listdir(path)
        else:
            open(path, "rb").read(16)
        leaked.append(path)
    except OSError:
        pass
try:  # the attack the independent tester found: run the course's solution
    for cell in nbformat.read({solution!r}, as_version=4).cells:
        if cell.cell_type == "code" and "def " in cell.source:
            exec(cell.source, globals())
except Exception:
    pass
if leaked:
    exec({right!r}, globals())
"""


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_hand_in_reads_nothing_of_the_course_or_of_others_without_landlock(tmp_path):
    os.chmod(tmp_path, 0o755)
    course = tmp_path / "course"
    for folder in ("notebooks", "solutions"):
        (course / folder).mkdir(parents=True)
        shutil.copy(REPO / folder / f"{ASSIGNMENT}.ipynb", course / folder)
    batches = tmp_path / "hand-ins"
    other = batches / "week1" / "bob.ipynb"
    graded = batches / "week2"
    graded.mkdir(parents=True)
    other.parent.mkdir()
    other.write_text(notebook(cells_of(ASSIGNMENT, {}), ASSIGNMENT))
    gradebook = tmp_path / "books" / "gradebook.sqlite"
    gradebook.parent.mkdir()
    solution = course / "solutions" / f"{ASSIGNMENT}.ipynb"
    targets = [str(other), str(gradebook), str(solution), str(course / "notebooks"), str(course)]
    attack = THIEF.format(targets=targets, solution=str(solution), right=RIGHT)
    (graded / "thief.ipynb").write_text(notebook(["import coursekit", attack], ASSIGNMENT))
    for name in ("ada", "cy"):
        (graded / f"{name}.ipynb").write_text(notebook(cells_of(ASSIGNMENT, {}), ASSIGNMENT))
    # a grading run before this one left its gradebook here (the thief reads it)
    gradebook.write_text("")
    for path in [tmp_path, *tmp_path.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)

    command = [sys.executable, "-m", "coursekit.commands.cli", "grade", str(graded), "--json"]
    command += ["--assignment", ASSIGNMENT, "--root", str(course), "--gradebook", str(gradebook)]
    command += ["--cell-timeout", "20", "--test-timeout", "10", "--timeout", "150"]
    env = {**os.environ, "AS_USER_PATHS": str(tmp_path)}
    done = docker_like.run(command, old=True, capture_output=True, text=True, env=env)

    assert done.returncode == 0, done.stderr[-3000:]
    assert (
        "Mode: no namespaces, as root" in done.stderr
        and "Landlock" not in done.stderr.split("Mode:")[1].splitlines()[0]
    )
    results = {}
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            results[record["student"]] = record
    for name in ("ada", "cy"):
        assert results[name]["score"] == results[name]["max_score"] > 0, results[name]
    assert results["thief"]["score"] == 0, results["thief"]
    assert "Checked as a hand-in's user" in done.stderr, done.stderr[-3000:]
    # what the shield changed is given back (grade.py itself still takes others' permissions
    # off notebooks/ and the batch graded, for good: not checked here)
    for folder in (tmp_path, course, batches, gradebook.parent, other.parent):
        assert _mode(folder) == 0o755, folder
    assert _mode(solution) == 0o644
    assert not list(course.glob(".coursekit-read-shield-*"))
