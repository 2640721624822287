"""Reading a hand-in: is it a notebook, for which assignment, by whom, and its code cells.

A hand-in is a notebook file or a packed one (``coursekit submit``: a zip holding the notebook
and a manifest, see :mod:`coursekit.grading.packed`); either way its code cells are graded.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from coursekit.authoring.markup import question_name
from coursekit.checks import QUESTIONS
from coursekit.grading.collect import student_for_file
from coursekit.grading.packed import (
    MAX_HAND_IN_BYTES,
    PASSED,
    PackedFileError,
    disagreements,
    is_packed,
    unpack,
)
from coursekit.grading.text import lossless


class HandInError(ValueError):
    """A hand-in that cannot be graded; the message is written for the student."""


@dataclass(frozen=True)
class HandIn:
    path: str
    sha256: str
    student: str
    cells: list[str]  # code cell sources, in order
    cell_ids: tuple[str | None, ...] = ()  # their ids (nbformat 4.5), None where there is none
    # Where each code cell is among all the notebook's cells, text cells too, from 1: the
    # number a student counts to in JupyterLab (cells[i] is cell cell_positions[i]).
    cell_positions: tuple[int, ...] = ()
    flags: tuple[str, ...] = ()  # why an instructor should read it (a packed file's manifest)
    claimed_passed: tuple[str, ...] = ()  # questions its manifest says passed when packed


def _read_regular_file(path: Path) -> bytes:
    """The file's bytes, if it is a regular file (not a link, FIFO or device) of at most
    :data:`MAX_HAND_IN_BYTES`; a FIFO read would block the grader forever."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        raise HandInError(f"The file {lossless(path)} could not be read.") from None
    with os.fdopen(descriptor, "rb") as handle:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise HandInError("This is not a regular file. Hand in the notebook file itself.")
        if info.st_size > MAX_HAND_IN_BYTES:
            raise HandInError(
                f"The file is {info.st_size / 2**20:.0f} MiB; a hand-in may be at most "
                f"{MAX_HAND_IN_BYTES // 2**20} MiB. Clear the outputs (Edit > Clear All "
                "Outputs), save, and hand it in again."
            )
        data = handle.read(MAX_HAND_IN_BYTES + 1)
    if len(data) > MAX_HAND_IN_BYTES:
        raise HandInError(f"The file grew past {MAX_HAND_IN_BYTES // 2**20} MiB while read.")
    return data


def _coursekit_metadata(notebook) -> dict:
    metadata = notebook.get("metadata")
    value = metadata.get("coursekit") if isinstance(metadata, dict) else None
    return value if isinstance(value, dict) else {}


def read_hand_in(path: str | Path, assignment: str, student: str | None = None) -> HandIn:
    """Read and check one hand-in; raise :class:`HandInError` with a student-facing reason.

    ``student`` is whose it is, as :mod:`coursekit.grading.collect` found it from where the
    file lies; by default, from the file's own name or folder.
    """
    path = Path(path)
    if student is None:
        student = lossless(student_for_file(path, assignment))
    data = _read_regular_file(path)
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
    sources, ids, positions = [], [], []
    for position, cell in enumerate(cells, start=1):
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            positions.append(position)
            source = cell.get("source", "")
            if isinstance(source, list):
                source = "".join(str(part) for part in source)
            sources.append(source if isinstance(source, str) else "")
            ids.append(cell.get("id") if isinstance(cell.get("id"), str) else None)
    declared = {question_name({"cell_type": "code", "source": s}) for s in sources if s}
    declared.discard(None)
    _check_assignment(_coursekit_metadata(notebook), declared, assignment)
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
        cell_ids=tuple(ids),
        cell_positions=tuple(positions),
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
