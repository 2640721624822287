"""The course's module-1 notebook as an nbgrader course, so that the grading benchmark can
run real ``nbgrader autograde`` on the same hand-ins as ``coursekit grade``.

The conversion keeps every cell of the source notebook, in order, so nbgrader runs the same
work (demonstrations included, since nbgrader runs every cell):

- each question cell (``# Question: NAME``) becomes a solution cell (``grade_id`` NAME);
  its ``### BEGIN/END SOLUTION`` markers are nbgrader's own;
- each cell that calls ``check("NAME", ...)`` becomes an autograded test cell worth the
  question's points, hidden tests included (nbgrader's ``### BEGIN/END HIDDEN TESTS``
  markers; it strips them on release and restores them when it grades). The kernel runs
  with ``COURSEKIT_STRICT_CHECKS=1`` so that a public check that does not pass fails the cell;
- every other cell is left as it is.

Hand-ins are nbgrader's released notebook with the solution cells answered by the same code
as the coursekit hand-ins (``student_code``). Needs the optional extra: ``pip install -e
.[nbgrader]``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat

from coursekit.authoring.markup import question_name
from coursekit.checks import questions_of

COURSE_ID = "coursekit-benchmark"
_CHECK_CALL = re.compile(r'^check\("(?P<name>\w+)"', re.MULTILINE)


def available() -> bool:
    """Whether nbgrader can be imported here (the optional ``nbgrader`` extra)."""
    try:
        import nbgrader  # noqa: F401
    except ImportError:
        return False
    return True


def nbgrader_source(source: Path, assignment: str) -> nbformat.NotebookNode:
    """The source notebook with nbgrader's cell metadata added; nothing else changes."""
    notebook = nbformat.read(source, as_version=4)
    points = {q.name: q.points for q in questions_of(assignment)}
    solutions, tests = set(), set()
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        name = question_name(cell)
        if name:
            cell.metadata["nbgrader"] = {
                "grade": False, "solution": True, "locked": False,
                "grade_id": name, "schema_version": 3,
            }  # fmt: skip
            solutions.add(name)
            continue
        match = _CHECK_CALL.search(cell.source)
        if match and match["name"] in points:
            name = match["name"]
            cell.metadata["nbgrader"] = {
                "grade": True, "solution": False, "locked": True, "points": points[name],
                "grade_id": f"test_{name}", "schema_version": 3,
            }  # fmt: skip
            tests.add(name)
    if solutions != set(points) or tests != set(points):
        raise SystemExit(
            f"{source.name}: questions {sorted(points)}, solution cells {sorted(solutions)}, "
            f"test cells {sorted(tests)}: the conversion for nbgrader needs one of each."
        )
    return notebook


def make_course(root: Path, source: Path, assignment: str) -> None:
    """An nbgrader course folder with ``assignment`` generated (released)."""
    (root / "source" / assignment).mkdir(parents=True)
    nbformat.write(nbgrader_source(source, assignment), root / "source" / assignment / source.name)
    (root / "nbgrader_config.py").write_text(
        "c = get_config()\n"
        f"c.CourseDirectory.course_id = {COURSE_ID!r}\n"
        f"c.CourseDirectory.root = {str(root)!r}\n"
        "c.Execute.timeout = 600\n"
    )
    _nbgrader(root, "generate_assignment", assignment, "--force")


def hand_in(root: Path, assignment: str, student: str, answers: dict[str, str]) -> None:
    """nbgrader's released notebook with each solution cell replaced by ``answers[grade_id]``."""
    (released,) = (root / "release" / assignment).glob("*.ipynb")
    notebook = nbformat.read(released, as_version=4)
    for cell in notebook.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if cell.metadata.get("nbgrader", {}).get("solution") and grade_id in answers:
            cell.source = f"# Question: {grade_id}\n" + answers[grade_id]
    folder = root / "submitted" / student / assignment
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, folder / released.name)


def autograde(root: Path, assignment: str, env: dict[str, str]) -> tuple[float, dict[str, float]]:
    """(seconds, score by student) of one ``nbgrader autograde`` of every hand-in, afresh."""
    for stale in ("autograded", "gradebook.db"):
        path = root / stale
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    _nbgrader(root, "generate_assignment", assignment, "--force")  # a fresh gradebook
    started = time.perf_counter()
    _nbgrader(root, "autograde", assignment, "--force", env=env)
    seconds = time.perf_counter() - started
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}", course_id=COURSE_ID) as gradebook:
        scores = {s.student.id: s.score for s in gradebook.assignment_submissions(assignment)}
    return seconds, scores


def _nbgrader(root: Path, *args: str, env: dict[str, str] | None = None) -> None:
    command = [sys.executable, "-m", "nbgrader", *args]
    env = dict(os.environ if env is None else env)
    # nbgrader runs ``alembic`` by name, so this environment's scripts must be on PATH.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        what = " ".join(command[2:])
        raise SystemExit(f"{what} exited {done.returncode}:\n{done.stderr[-3000:]}")
