"""Which files to grade, and whose each one is: found before any work starts.

The student comes from where the instructor put the file, never from what is inside it:
for a folder passed to ``grade``, it is the top-level entry under that folder, so both
``hand-ins/ada/01_accumulation.ipynb`` and ``hand-ins/ada/any/depth/work.ipynb`` are ada's,
and ``hand-ins/ada.ipynb`` or ``hand-ins/ada-01_accumulation.coursekit.zip`` too. Two files
in one batch that would be the same student's (or would export to the same file) are a clash:
both are named and neither is graded, so nothing is merged or overwritten silently. A path
that does not exist stops the run before anything is done.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from coursekit.course import MODULES
from coursekit.grading.packed import PACKED_SUFFIX
from coursekit.grading.records.exports import file_stem
from coursekit.grading.text import for_terminal, lossless


@dataclass(frozen=True)
class HandInFile:
    path: str  # as the file system knows it (may hold surrogates: not for printing)
    student: str  # lossless text


@dataclass
class Collected:
    hand_ins: list[HandInFile] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # paths given that do not exist
    problems: list[str] = field(default_factory=list)  # files found but not graded, and why


def student_from_file_name(name: str, assignment: str) -> str:
    """``ada.ipynb`` -> ada; ``ada-01_accumulation.coursekit.zip`` -> ada (the ``-MODULE``
    ending of any module is dropped, so a packed file of another module is still ada's and
    refused as the wrong assignment)."""
    stem = name
    if name.endswith(PACKED_SUFFIX):
        stem = name[: -len(PACKED_SUFFIX)]
    elif "." in name:
        stem = name.rsplit(".", 1)[0]
    if name.lower().endswith(".zip"):
        for module in (assignment, *(m.name for m in MODULES)):
            if stem.endswith(f"-{module}") and len(stem) > len(module) + 1:
                return stem[: -len(module) - 1]
    return stem


def student_for_file(path: Path, assignment: str) -> str:
    """The student of a file given by itself: from its name, or its folder's when the file
    is named after the assignment (``ada/01_accumulation.ipynb``)."""
    student = student_from_file_name(path.name, assignment)
    if student == assignment:
        student = path.resolve().parent.name
    return student


def _wanted(path: Path, top: Path) -> bool:
    """Notebooks and packed hand-ins, not in hidden folders or macOS's ``__MACOSX``."""
    if not (path.name.endswith(".ipynb") or path.name.endswith(PACKED_SUFFIX)):
        return False
    parts = path.relative_to(top).parts
    return not any(p.startswith(".") or p == "__MACOSX" for p in parts)


def _files_under(folder: Path) -> list[Path]:
    found = []
    for directory, subfolders, files in os.walk(folder):  # never follows linked folders
        subfolders.sort()
        for name in sorted(files):
            path = Path(directory) / name
            if _wanted(path, folder):
                found.append(path)
    return found


def collect(items: list[str], assignment: str) -> Collected:
    """Every hand-in under ``items`` with its student; missing paths and problems apart."""
    result = Collected()
    owners: list[tuple[Path, str]] = []
    for item in items:
        path = Path(item)
        if not path.exists() and not path.is_symlink():
            result.missing.append(item)
        elif path.is_dir():
            for found in _files_under(path):
                parts = found.relative_to(path).parts
                if len(parts) > 1:
                    owners.append((found, parts[0]))
                else:
                    owners.append((found, student_from_file_name(found.name, assignment)))
        else:
            owners.append((path, student_for_file(path, assignment)))
    by_student: dict[str, list[Path]] = defaultdict(list)
    by_stem: dict[str, set[str]] = defaultdict(set)
    for path, student in owners:
        shown = for_terminal(path)
        if path.is_symlink():
            result.problems.append(f"{shown}: a symbolic link, not graded; hand in files only.")
        elif not path.is_file():  # a FIFO would block the grader's read forever
            result.problems.append(f"{shown}: not a regular file, not graded; hand in files only.")
        elif not student or student == assignment or student.startswith("."):
            result.problems.append(
                f"{shown}: cannot tell whose hand-in this is; put it in a folder named after "
                f"the student, or name it after the student (ada.ipynb)."
            )
        else:
            by_student[lossless(student)].append(path)
    for student in by_student:
        by_stem[file_stem(student).casefold()].add(student)
    for student, paths in by_student.items():
        sharing = sorted(by_stem[file_stem(student).casefold()])
        if len(paths) > 1:
            result.problems.append(
                f"clash: {len(paths)} hand-ins are all {for_terminal(student)}'s: "
                + ", ".join(for_terminal(p) for p in paths)
                + ". None of them was graded; keep one and grade again."
            )
        elif len(sharing) > 1:
            result.problems.append(
                f"clash: {for_terminal(paths[0])} ({for_terminal(student)}) would export to "
                f"the same file as {', '.join(for_terminal(s) for s in sharing if s != student)}; "
                "not graded; rename one and grade again."
            )
        else:
            result.hand_ins.append(HandInFile(str(paths[0]), student))
    return result
