"""The record of every demo cell source ever released: ``notebooks/released-demos.json``.

Why: grading skips a hand-in's demo cell only while it is as released. A release that edits
demo cells would otherwise make every hand-in made from an earlier release run all of its
demonstrations (training runs, sweeps), minutes against the per-cell and per-notebook limits,
for code the student never touched. So ``coursekit build`` adds the demo sources of the
exercises it renders to this record and never drops one; the grader reads it from the course
root (``notebooks/`` is the private source folder, never copied to students)::

    {"01_accumulation": {"<cell id>": ["<sha256 of the source>", ...]}}

A course whose releases predate the record (or that lost it) rebuilds it from its git history
with ``scripts/record-released-demos``, which calls :func:`rebuild_from_git`.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path

from coursekit.authoring.demo_cells import released_demos, source_sha256

RECORD = Path("notebooks") / "released-demos.json"
Record = dict[str, dict[str, list[str]]]  # assignment -> cell id -> sha256 of each source
_SHA256 = re.compile(r"[0-9a-f]{64}")
_REBUILD = "scripts/record-released-demos (released_demos.rebuild_from_git)"


class RecordError(ValueError):
    """The record is missing where it must exist, or is not a record."""


def read_record(root: Path) -> Record:
    """The record under ``root``; FileNotFoundError if there is none, RecordError if it is
    not one (the message says what to do)."""
    path = Path(root) / RECORD
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError) as error:
        raise RecordError(_unreadable(f"unreadable ({error})")) from None
    try:
        record = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise RecordError(_unreadable(f"not JSON ({error})")) from None
    if not isinstance(record, dict):
        raise RecordError(_unreadable("not an object of assignments"))
    for assignment, cells in record.items():
        if not isinstance(cells, dict):
            why = f"{assignment!r} maps no cell ids to hashes"
            raise RecordError(_unreadable(f"not a record: {why}"))
        for cell_id, hashes in cells.items():
            if not isinstance(hashes, list) or not all(
                isinstance(h, str) and _SHA256.fullmatch(h) for h in hashes
            ):
                why = f"{assignment}, cell {cell_id!r} holds no list of sha256 hashes"
                raise RecordError(_unreadable(f"not a record: {why}"))
    return record


def _unreadable(why: str) -> str:
    return (
        f"{RECORD} is {why}. Restore it from git (git checkout -- {RECORD}), or rebuild it "
        f"from the course's git history: {_REBUILD}."
    )


def with_demos(record: Mapping, assignment: str, demos: Mapping[str, str]) -> Record:
    """``record`` with the demo cells ``demos`` (cell id -> source) of ``assignment`` added;
    every entry it held stays."""
    merged = {name: {i: list(h) for i, h in cells.items()} for name, cells in record.items()}
    cells = merged.setdefault(assignment, {})
    for cell_id, source in demos.items():
        hashes = cells.setdefault(cell_id, [])
        digest = source_sha256(source)
        if digest not in hashes:
            hashes.append(digest)
    return merged


def dumps(record: Mapping) -> str:
    """The record's file text: sorted keys and hashes, two-space indents, a final newline."""
    ordered = {
        name: {cell_id: sorted(set(hashes)) for cell_id, hashes in cells.items()}
        for name, cells in record.items()
        if cells
    }
    return json.dumps(ordered, indent=2, sort_keys=True) + "\n"


def wanted_record(root: Path, current: Mapping[str, Mapping[str, str]]) -> str | None:
    """The record's text once ``current`` (assignment -> its exercise's demo cells, id ->
    source) is added to the one on disk; None where there is nothing to record.

    A missing record is an error once exercises/ holds released demo cells: a new record
    would forget the earlier releases, and hand-ins made from them would run every
    demonstration.
    """
    root = Path(root)
    try:
        record: Record = read_record(root)
    except FileNotFoundError:
        if not any(current.values()):
            return None
        if _released_demo_cells(root):
            raise RecordError(
                f"{RECORD} is missing, and exercises/ holds released demo cells: restore it "
                f"from git (git checkout -- {RECORD}), or rebuild it from the course's git "
                f"history: {_REBUILD}."
            ) from None
        record = {}
    for assignment, demos in sorted(current.items()):
        record = with_demos(record, assignment, demos)
    return dumps(record)


def _released_demo_cells(root: Path) -> bool:
    """Do the exercises on disk (the last release built) hold demo cells?"""
    for path in (root / "exercises").glob("*.ipynb"):
        try:
            notebook = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):  # not a notebook: build replaces it, it released nothing
            continue
        if isinstance(notebook, dict) and released_demos(notebook):
            return True
    return False


def record_from_git(root: Path) -> Record:
    """The demo cells of every exercises/*.ipynb at every commit that touched exercises/."""
    root = Path(root)
    commits = _git(root, "log", "--format=%H", "--", "exercises/").split()
    record: Record = {}
    for commit in commits:
        listing = _git(root, "ls-tree", "--name-only", commit, "exercises/").split("\n")
        for name in filter(None, listing):
            if not name.endswith(".ipynb"):
                continue
            try:
                notebook = json.loads(_git(root, "show", f"{commit}:{name}"))
            except ValueError:  # a broken commit of a notebook released nothing
                continue
            if isinstance(notebook, dict):
                record = with_demos(record, Path(name).stem, released_demos(notebook))
    return record


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RecordError(f"git {' '.join(args)} failed in {root}: {done.stderr.strip()}")
    return done.stdout


def rebuild_from_git(root: Path) -> Path:
    """Write the record: the one on disk (if readable) and every release in git history."""
    root = Path(root)
    try:
        record = read_record(root)
    except (FileNotFoundError, RecordError):
        record = {}
    for assignment, cells in record_from_git(root).items():
        for cell_id, hashes in cells.items():
            record.setdefault(assignment, {}).setdefault(cell_id, []).extend(hashes)
    path = root / RECORD
    path.write_text(dumps(record), encoding="utf-8")
    return path
