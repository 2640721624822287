"""Reading a hand-in: is it a notebook, for which assignment, by whom, and its code cells.

A hand-in is a notebook file or a packed one (``coursekit submit``: a zip holding the notebook
and a manifest, see :mod:`coursekit.grading.packed`); either way its code cells are graded.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from coursekit.authoring.markup import question_name
from coursekit.checks import QUESTIONS
from coursekit.course import MODULES
from coursekit.grading.packed import (
    MAX_HAND_IN_BYTES,
    PACKED_SUFFIX,
    PASSED,
    PackedFileError,
    disagreements,
    is_packed,
    unpack,
)


class HandInError(ValueError):
    """A hand-in that cannot be graded; the message is written for the student."""


@dataclass(frozen=True)
class HandIn:
    path: str
    sha256: str
    student: str
    cells: list[str]  # code cell sources, in order
    flags: tuple[str, ...] = ()  # why an instructor should read it (a packed file's manifest)
    claimed_passed: tuple[str, ...] = ()  # questions its manifest says passed when packed


def student_name(path: Path, assignment: str) -> str:
    """The student, from where the instructor put the file: its folder or its name.

    ``hand-ins/alice/01_accumulation.ipynb`` and ``hand-ins/alice.ipynb`` are both alice's.
    Never from the notebook's contents: a hand-in must not be able to claim another name.
    A packed file is named ``ada-01_accumulation.coursekit.zip`` (any ``.zip`` ending), so the
    ``-ASSIGNMENT`` ending, of any module, is dropped: ``ada-00_welcome.coursekit.zip`` is
    ada's, and refused when it is not the assignment being graded.
    """
    name, stem = path.name, path.stem
    if name.lower().endswith(".zip"):
        stem = name[: -len(PACKED_SUFFIX)] if name.endswith(PACKED_SUFFIX) else stem
        for module in (assignment, *(m.name for m in MODULES)):
            if stem.endswith(f"-{module}") and len(stem) > len(module) + 1:
                stem = stem[: -len(module) - 1]
                break
    if stem == assignment and path.parent.name:
        return path.parent.name
    return stem


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
    notebook_bytes, manifest, flags = data, None, []
    if is_packed(path, data):
        try:
            unpacked = unpack(data)
        except PackedFileError as error:
            raise HandInError(str(error)) from None
        notebook_bytes, manifest = unpacked.notebook, unpacked.manifest
        flags = list(unpacked.problems)
    try:  # without validation: any JSON with a list of cells is worth grading
        notebook = json.loads(notebook_bytes.decode("utf-8"))
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
    student = student_name(path, assignment)
    claimed: tuple[str, ...] = ()
    if manifest is not None:
        flags += disagreements(manifest, notebook_bytes, student, assignment)
        checks = manifest.get("checks")
        this_notebook = (
            manifest.get("notebook_sha256") == hashlib.sha256(notebook_bytes).hexdigest()
        )
        if this_notebook and isinstance(checks, dict):  # the claims are about this notebook
            claimed = tuple(str(q) for q, status in checks.items() if status == PASSED)
    return HandIn(
        path=str(path),
        sha256=hashlib.sha256(data).hexdigest(),
        student=student,
        cells=sources,
        flags=tuple(flags),
        claimed_passed=claimed,
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
