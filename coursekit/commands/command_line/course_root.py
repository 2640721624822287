"""Where the course is: the folder the commands that need its files work in."""

from __future__ import annotations

from pathlib import Path


def find_course_root(start: Path | None = None, marker: str = "notebooks") -> Path:
    """The nearest folder, from ``start`` upwards, that holds ``marker/``.

    Instructors' commands need ``notebooks/`` (the sources and reference solutions);
    ``start`` needs only ``exercises/``, so it also works in a student copy published
    without the sources.
    """
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / marker).is_dir():
            return folder
    raise SystemExit(
        f"coursekit: no course found at or above {here} (looked for a {marker}/ folder). "
        "Run this inside the course repository, or pass --root."
    )


def course_root(root: str | None, marker: str = "notebooks") -> Path:
    """``--root`` when given, else the course found from the current folder."""
    return Path(root).resolve() if root else find_course_root(marker=marker)
