"""Packing a notebook into the one file a student hands in (``coursekit submit``).

The packed file (format: :mod:`coursekit.grading.packed`) holds the notebook's bytes exactly
as saved, and a manifest saying what was packed: the assignment, the student, the notebook's
SHA-256 and which checks its saved outputs show as passed (read, never run). The manifest is a
convenience and a tamper check, never a trust anchor: the grader takes the student from where
the instructor put the file, runs everything again, and flags a manifest that disagrees.
No torch here: packing is a quick command on a student's machine.
"""

from __future__ import annotations

import hashlib
import json
import re
import zipfile
from datetime import datetime, timezone
from pathlib import Path

from coursekit import __version__
from coursekit.authoring.markup import QUESTION_HEADER
from coursekit.grading.packed import (
    FORMAT,
    MANIFEST,
    MAX_HAND_IN_BYTES,
    PACKED_SUFFIX,
    PASSED,
    PackedFileError,
    unpack,
)

NOT_RUN = "not run"
_CHECK_CALL = re.compile(r"""\bcheck\(\s*["']([A-Za-z_]\w*)["']""")
_VERDICT = re.compile(r"^\[(passed|failed|error|not attempted)\] ([A-Za-z_]\w*):", re.M)
_ASSIGNMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
_STUB = "raise NotImplementedError"


class SubmissionError(ValueError):
    """A notebook that cannot be packed; the message says why and what to do."""


def packed_name(student: str, assignment: str) -> str:
    """``ada-01_accumulation.coursekit.zip``: the grader reads the student from this name."""
    return f"{student}-{assignment}{PACKED_SUFFIX}"


def check_student(student: str) -> str:
    """The student's name, if it can be part of a file name; else a SubmissionError."""
    name = student.strip() if isinstance(student, str) else ""
    if not name:
        raise SubmissionError(
            "Give your name as the student, as your instructor knows you: for example "
            "`coursekit submit my-work/01_accumulation.ipynb --student ada`."
        )
    if len(name) > 64 or not name[0].isalnum() or not all(c.isalnum() or c in "._-" for c in name):
        suggestion = re.sub(r"[^\w.-]+", "_", name).strip("._-")[:64] or "ada"
        raise SubmissionError(
            f"The student name {name!r} cannot be part of a file name. Use letters, digits, "
            f"'.', '_' or '-', starting with a letter or digit (at most 64), e.g. {suggestion!r}."
        )
    return name


def _code_cells(notebook: dict) -> list[dict]:
    cells = notebook.get("cells")
    cells = cells if isinstance(cells, list) else []
    return [c for c in cells if isinstance(c, dict) and c.get("cell_type") == "code"]


def _text(value) -> str:
    if isinstance(value, list):
        return "".join(str(part) for part in value)
    return value if isinstance(value, str) else ""


def _verdict(cell: dict, name: str) -> str | None:
    """What a check cell's saved outputs say about question ``name`` (None: nothing)."""
    outputs = cell.get("outputs")
    outputs = [o for o in outputs if isinstance(o, dict)] if isinstance(outputs, list) else []
    printed = ""
    for output in outputs:
        data = output.get("data")
        plain = data.get("text/plain") if isinstance(data, dict) else None
        printed += _text(output.get("text")) + _text(plain) + "\n"
    found = [status for status, question in _VERDICT.findall(printed) if question == name]
    if found:
        return found[-1]
    return "error" if any(o.get("output_type") == "error" for o in outputs) else None


def saved_checks(notebook: dict) -> dict[str, str]:
    """Each question's verdict as the notebook's saved outputs show it; nothing is run.

    Questions are the ``# Question: NAME`` cells, in order, and any a ``check("NAME", ...)``
    cell names. When several check cells show a verdict for one question, the one run last
    (highest execution count) counts; a question with no saved verdict is "not run".
    """
    checks: dict[str, str] = {}
    latest: dict[str, int] = {}
    for cell in _code_cells(notebook):
        source = _text(cell.get("source"))
        header = QUESTION_HEADER.match(source.split("\n", 1)[0].strip())
        if header:
            checks.setdefault(header["name"], NOT_RUN)
        for name in _CHECK_CALL.findall(source):
            checks.setdefault(name, NOT_RUN)
            verdict = _verdict(cell, name)
            count = cell.get("execution_count")
            order = count if isinstance(count, int) else -1
            if verdict is not None and order >= latest.get(name, -2):
                latest[name], checks[name] = order, verdict
    return checks


def _is_blank(notebook: dict) -> bool:
    """The exercise as handed out: no code cell ever ran, every question still a stub."""
    cells = _code_cells(notebook)
    ran = any(c.get("outputs") or isinstance(c.get("execution_count"), int) for c in cells)
    questions = [
        _text(c.get("source"))
        for c in cells
        if QUESTION_HEADER.match(_text(c.get("source")).split("\n", 1)[0].strip())
    ]
    return not ran and bool(questions) and all(_STUB in source for source in questions)


def _read_notebook(path: Path) -> tuple[bytes, dict, str]:
    """(bytes, parsed notebook, assignment) of a course notebook on disk, or why not."""
    if path.name.endswith(PACKED_SUFFIX):
        raise SubmissionError(f"{path} is already packed: hand in that file as it is.")
    if not path.exists():
        raise SubmissionError(
            f"There is no file {path}. Pass the path of the .ipynb file you worked in, "
            "e.g. my-work/01_accumulation.ipynb."
        )
    if path.is_dir():
        raise SubmissionError(f"{path} is a folder; pass the .ipynb notebook file inside it.")
    if path.suffix != ".ipynb":
        raise SubmissionError(
            f"{path.name} is not a notebook (a .ipynb file). Pass the notebook you worked in."
        )
    data = path.read_bytes()
    if len(data) > MAX_HAND_IN_BYTES:
        raise SubmissionError(
            f"{path.name} is {len(data) / 2**20:.0f} MiB; a hand-in may be at most "
            f"{MAX_HAND_IN_BYTES // 2**20} MiB. Clear the outputs of the cells that print or "
            "plot most, save, and pack it again."
        )
    if not data.strip():
        raise SubmissionError(
            f"{path.name} is empty on disk. Save your notebook (File > Save, or Ctrl+S) "
            "and pack it again."
        )
    try:
        notebook = json.loads(data.decode("utf-8"))
        if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
            raise ValueError("no list of cells")
    except ValueError:
        raise SubmissionError(
            f"{path.name} is not a Jupyter notebook that can be read (it may be damaged). "
            "Open it in Jupyter, save it, and pack it again."
        ) from None
    metadata = notebook.get("metadata")
    coursekit = metadata.get("coursekit") if isinstance(metadata, dict) else None
    assignment = coursekit.get("assignment") if isinstance(coursekit, dict) else None
    if not isinstance(assignment, str) or not _ASSIGNMENT.match(assignment):
        raise SubmissionError(
            f"{path.name} is not a course notebook: it has no coursekit assignment tag "
            "(metadata.coursekit.assignment), which every exercise notebook carries. Pack the "
            "notebook you worked in, the copy of the one from exercises/."
        )
    if _is_blank(notebook):
        raise SubmissionError(
            f"{path.name} is the {assignment} exercise as handed out: no answer is filled in "
            "and no cell has run. If you worked on it, your work is not saved: save it "
            "(File > Save, or Ctrl+S) and pack it again."
        )
    return data, notebook, assignment


def _member(name: str, when: datetime) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=when.timetuple()[:6])
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def pack(notebook_path: str | Path, student: str, out_dir: str | Path | None = None) -> Path:
    """Pack a saved course notebook into the one file a student hands in; return its path.

    Reads the notebook as it is on disk (it runs nothing) and writes
    ``<out_dir>/<student>-<assignment>.coursekit.zip`` (``out_dir``: the notebook's folder),
    replacing an earlier one. Raises :class:`SubmissionError`, with what to do, when the file
    is no course notebook, is empty or untouched, or the name cannot be a file name.

    Example:
        >>> pack("my-work/01_accumulation.ipynb", "ada")  # doctest: +SKIP
        PosixPath('my-work/ada-01_accumulation.coursekit.zip')
    """
    student = check_student(student)
    path = Path(notebook_path).expanduser()
    data, notebook, assignment = _read_notebook(path)
    checks = saved_checks(notebook)
    now = datetime.now(timezone.utc)
    manifest = {
        "format": FORMAT,
        "format_version": 1,
        "assignment": assignment,
        "student": student,
        "notebook": f"{assignment}.ipynb",
        "notebook_sha256": hashlib.sha256(data).hexdigest(),
        "notebook_bytes": len(data),
        "notebook_saved_at": datetime.fromtimestamp(path.stat().st_mtime, timezone.utc)
        .isoformat(timespec="seconds")
        .replace("+00:00", "Z"),
        "coursekit_version": __version__,
        "created_at": now.isoformat(timespec="seconds").replace("+00:00", "Z"),
        "checks": checks,
        "checks_passed": sum(status == PASSED for status in checks.values()),
        "checks_total": len(checks),
    }
    folder = Path(out_dir).expanduser() if out_dir is not None else path.parent
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / packed_name(student, assignment)
    partial = target.with_name(target.name + ".part")
    with zipfile.ZipFile(partial, "w") as archive:
        archive.writestr(_member(MANIFEST, now), json.dumps(manifest, indent=2) + "\n")
        archive.writestr(_member(manifest["notebook"], now), data)
    partial.replace(target)
    return target


def describe(packed: str | Path) -> str:
    """What was packed, what is not passed yet, and what to do next: for the student."""
    packed = Path(packed)
    data = packed.read_bytes()
    try:
        manifest = unpack(data).manifest or {}
    except PackedFileError as error:
        raise SubmissionError(str(error)) from None
    checks = manifest.get("checks", {})
    passed, total = manifest.get("checks_passed", 0), manifest.get("checks_total", 0)
    lines = [
        f"Packed {manifest.get('assignment')} for {manifest.get('student')}: "
        f"{passed} of {total} checks passed in the saved notebook.",
        f"  file:    {packed.resolve()}",
        f"  sha256:  {hashlib.sha256(data).hexdigest()} (this file)",
        f"  notebook sha256: {manifest.get('notebook_sha256')}, "
        f"saved {manifest.get('notebook_saved_at')}",
    ]
    pending = [f"{name} ({status})" for name, status in checks.items() if status != PASSED]
    if pending:
        lines.append(
            f"Warning: not passed in the saved notebook: {', '.join(pending)}. You can hand it "
            "in as it is; to do better, fix them, run their check cells, save, and pack again."
        )
    lines.append(
        f"Next: hand in this file, {packed.name}, as your instructor asked. It holds your "
        "notebook as saved; grading runs it again, with hidden tests."
    )
    return "\n".join(lines)
