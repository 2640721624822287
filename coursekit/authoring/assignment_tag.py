"""Generated notebooks say which assignment they are, so the grader can tell a mix-up."""

from __future__ import annotations

from pathlib import Path


def tag_assignment(notebook, name: str):
    """Set ``metadata.coursekit.assignment`` to the source notebook's name (its file stem)."""
    notebook["metadata"].setdefault("coursekit", {})["assignment"] = Path(name).stem
    return notebook
