"""Reading a hand-in: is it a notebook, for which assignment, by whom, and its code cells."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from coursekit.authoring.markup import question_name
from coursekit.checks import QUESTIONS

MAX_HAND_IN_BYTES = 20 * 2**20


class HandInError(ValueError):
    """A hand-in that cannot be graded; the message is written for the student."""


@dataclass(frozen=True)
class HandIn:
    path: str
    sha256: str
    student: str
    cells: list[str]  # code cell sources, in order


def student_name(path: Path, assignment: str) -> str:
    """The student, from where the instructor put the file: its folder or its name.

    ``hand-ins/alice/01_accumulation.ipynb`` and ``hand-ins/alice.ipynb`` are both alice's.
    Never from the notebook's contents: a hand-in must not be able to claim another name.
    """
    if path.stem == assignment and path.parent.name:
        return path.parent.name
    return path.stem


def _coursekit_metadata(notebook) -> dict:
    metadata = notebook.get("metadata")
    value = metadata.get("coursekit") if isinstance(metadata, dict) else None
    return value if isinstance(value, dict) else {}


def read_hand_in(path: str | Path, assignment: str) -> HandIn:
    """Read and check one hand-in; raise :class:`HandInError` with a student-facing reason."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError:
        raise HandInError(f"The file {path} could not be read.") from None
    if size > MAX_HAND_IN_BYTES:
        raise HandInError(
            f"The file is {size / 2**20:.0f} MiB; a hand-in may be at most "
            f"{MAX_HAND_IN_BYTES // 2**20} MiB. Clear the outputs (Edit > Clear All Outputs), "
            "save, and hand it in again."
        )
    data = path.read_bytes()
    try:  # without validation: any JSON with a list of cells is worth grading
        notebook = json.loads(data.decode("utf-8"))
        cells = notebook["cells"]
        if not isinstance(cells, list):
            raise ValueError("no list of cells")
    except Exception:
        raise HandInError(
            "This file is not a Jupyter notebook that can be read (it may be damaged, or "
            "another kind of file). Hand in the .ipynb file itself, as saved by Jupyter or Colab."
        ) from None
    sources = []
    for cell in cells:
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            source = cell.get("source", "")
            if isinstance(source, list):
                source = "".join(str(part) for part in source)
            sources.append(source if isinstance(source, str) else "")
    declared = {question_name({"cell_type": "code", "source": s}) for s in sources if s}
    declared.discard(None)
    _check_assignment(_coursekit_metadata(notebook), declared, assignment)
    return HandIn(
        path=str(path),
        sha256=hashlib.sha256(data).hexdigest(),
        student=student_name(path, assignment),
        cells=sources,
    )


def _check_assignment(metadata: dict, declared: set, assignment: str) -> None:
    tagged = metadata.get("assignment")
    tagged = tagged if isinstance(tagged, str) else None
    modules = {QUESTIONS[q].module for q in declared if q in QUESTIONS}
    other = tagged if tagged and tagged != assignment else None
    if other is None and modules and assignment not in modules:
        other = sorted(modules)[0]
    if other is not None:
        raise HandInError(
            f"This notebook is the {other} assignment, but it was handed in for {assignment}. "
            f"Hand in your {assignment} notebook."
        )
