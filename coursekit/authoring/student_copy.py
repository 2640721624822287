"""A copy of the course for students of a graded course: without solutions or sources.

``solutions/`` holds the worked answers and ``notebooks/`` the sources with their hidden-test
cells; a graded course publishes neither. The copy holds what a student needs to take the
course: the exercises, the library, the two set-up scripts and the README. (The library
itself carries coursekit's reference code, which the in-notebook checks compare against; a
student who calls it is flagged by the grader, see the README's "What grading trusts".)
"""

from __future__ import annotations

import shutil
from pathlib import Path

# What a student's copy holds, relative to the course folder.
STUDENT_FILES = (
    "README.md",
    "pyproject.toml",
    ".gitignore",
    "coursekit",
    "exercises",
    "scripts/setup",
    "scripts/start",
    "docs/colab.md",
)
_NOT_COPIED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", ".ipynb_checkpoints")
_GIVEAWAYS = ("### BEGIN SOLUTION", "### BEGIN HIDDEN TESTS")


class StudentCopyError(ValueError):
    """The copy cannot be made; the message says why."""


def make_student_copy(root: Path, destination: Path) -> list[Path]:
    """Copy the course at ``root`` for students into ``destination`` (new or empty).

    Refuses to write into a folder with files in it, and checks that no notebook of the
    copy holds a solution or hidden-test marker. Returns the top-level entries written.
    """
    root, destination = Path(root).resolve(), Path(destination).resolve()
    if destination == root or root in destination.parents:
        raise StudentCopyError(f"{destination} is inside the course folder; copy it elsewhere.")
    if destination.exists() and any(destination.iterdir()):
        raise StudentCopyError(f"{destination} is not empty; give a new or empty folder.")
    missing = [name for name in STUDENT_FILES if not (root / name).exists()]
    if missing:
        raise StudentCopyError(f"the course at {root} has no {', '.join(missing)}.")
    written = []
    for name in STUDENT_FILES:
        source, target = root / name, destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=_NOT_COPIED)
        else:
            shutil.copy2(source, target)
        written.append(target)
    for notebook in destination.rglob("*.ipynb"):
        text = notebook.read_text(encoding="utf-8")
        if any(marker in text for marker in _GIVEAWAYS):
            shutil.rmtree(destination)
            raise StudentCopyError(
                f"{notebook.relative_to(destination)} holds a solution or hidden tests; run "
                "`coursekit build` and copy again."
            )
    return written
