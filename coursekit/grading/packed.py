"""A packed hand-in's format, and reading one that may be hostile.

A packed hand-in (``coursekit submit``, see :mod:`coursekit.grading.submission`) is a zip
named ``<student>-<assignment>.coursekit.zip`` that holds ``manifest.json`` and one notebook.
Packed files reach the grader from students, so reading one trusts nothing: members are read
in memory, never extracted by name; the member count and the unpacked size are capped before
anything is decompressed; and a manifest only ever adds flags for an instructor to read,
never a name, a score or a pass.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

PACKED_SUFFIX = ".coursekit.zip"
MANIFEST = "manifest.json"
FORMAT = "coursekit-hand-in"
MAX_HAND_IN_BYTES = 20 * 2**20  # a notebook, or a packed file, as handed in
MAX_MANIFEST_BYTES = 64 * 2**10
MAX_MEMBERS = 8  # a packed file holds 2
PASSED = "passed"
_AGAIN = "Pack your notebook again with `coursekit submit`, or hand in the .ipynb file itself."


class PackedFileError(ValueError):
    """A packed file that is refused; the message is written for the student."""


@dataclass(frozen=True)
class Unpacked:
    """What a packed file holds. ``problems``: things to flag, none worth refusing it for."""

    notebook: bytes
    manifest: dict | None
    problems: list[str]


def is_packed(path: Path, data: bytes) -> bool:
    """A zip by its name or its first bytes (a renamed packed file is still one)."""
    return path.suffix.lower() == ".zip" or data[:4] == b"PK\x03\x04"


def shown(value, limit: int = 60) -> str:
    """A value from an untrusted file, safe and short enough to quote in feedback."""
    text = repr(value) if isinstance(value, str) else f"a {type(value).__name__}"
    return text if len(text) <= limit else text[: limit - 4] + "...'"


def _unsafe(name: str) -> bool:
    return (
        name.startswith(("/", "\\"))
        or "\\" in name
        or re.match(r"^[A-Za-z]:", name) is not None
        or ".." in name.split("/")
    )


def _read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int) -> bytes:
    if info.file_size > limit:
        raise PackedFileError(
            f"The file {shown(info.filename)} in this packed hand-in unpacks to "
            f"{info.file_size / 2**20:.1f} MiB, more than a hand-in may be. {_AGAIN}"
        )
    try:
        with archive.open(info) as member:
            content = member.read(limit + 1)
    except Exception:  # CRC, deflate or header errors: whatever it is, the file is damaged
        raise PackedFileError(f"This packed hand-in is damaged. {_AGAIN}") from None
    if len(content) > limit:
        raise PackedFileError(f"This packed hand-in unpacks to more than it says. {_AGAIN}")
    return content


def unpack(data: bytes) -> Unpacked:
    """Read a packed file's notebook and manifest in memory, refusing unsafe or odd zips.

    Refused (:class:`PackedFileError`): not a readable zip, more than :data:`MAX_MEMBERS`
    members, names that are absolute or climb out (``..``), duplicate names, encryption,
    compression other than stored or deflated, more than :data:`MAX_HAND_IN_BYTES` unpacked,
    or not exactly one notebook at the top. Flagged (``problems``): no or unreadable manifest,
    other members (never read).
    """
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except Exception:
        raise PackedFileError(
            "This packed hand-in is not a zip file that can be read (it may be damaged or "
            f"cut short). {_AGAIN}"
        ) from None
    with archive:
        infos = archive.infolist()
        if len(infos) > MAX_MEMBERS:
            raise PackedFileError(
                f"This packed hand-in holds {len(infos)} files; one made by `coursekit submit` "
                f"holds 2. {_AGAIN}"
            )
        names = [info.filename for info in infos]
        for info in infos:
            name = info.filename
            if _unsafe(name):
                raise PackedFileError(
                    f"This packed hand-in holds a file named {shown(name)}, a path that points "
                    f"out of its folder; it is not opened. {_AGAIN}"
                )
            if names.count(name) > 1:
                raise PackedFileError(f"This packed hand-in holds {shown(name)} twice. {_AGAIN}")
            if info.flag_bits & 0x1:
                raise PackedFileError(f"This packed hand-in is encrypted. {_AGAIN}")
            if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                raise PackedFileError(
                    f"This packed hand-in uses a compression that coursekit does not read. {_AGAIN}"
                )
        unpacked_bytes = sum(info.file_size for info in infos)
        if unpacked_bytes > MAX_HAND_IN_BYTES + MAX_MANIFEST_BYTES:
            raise PackedFileError(
                f"This packed hand-in unpacks to {unpacked_bytes / 2**20:.0f} MiB; a hand-in "
                f"may be at most {MAX_HAND_IN_BYTES // 2**20} MiB. Clear the outputs of the "
                "cells that print or plot most, save, and pack it again."
            )
        notebooks = [i for i in infos if i.filename.endswith(".ipynb") and "/" not in i.filename]
        if len(notebooks) != 1:
            raise PackedFileError(
                f"This packed hand-in holds {len(notebooks)} notebooks; it must hold exactly "
                f"one. {_AGAIN}"
            )
        notebook = _read_member(archive, notebooks[0], MAX_HAND_IN_BYTES)
        manifest, problems = None, []
        if MANIFEST not in names:
            problems.append(
                "the packed hand-in has no manifest.json, so `coursekit submit` did not pack it"
            )
        else:
            raw = _read_member(archive, infos[names.index(MANIFEST)], MAX_MANIFEST_BYTES)
            try:
                manifest = json.loads(raw.decode("utf-8"))
            except ValueError:
                manifest = None
            if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
                manifest = None
                problems.append("the packed hand-in's manifest.json cannot be read")
        others = [n for n in names if n not in (MANIFEST, notebooks[0].filename)]
        if others:
            problems.append(
                "the packed hand-in also holds files that grading does not read: "
                + ", ".join(shown(n) for n in others)
            )
    return Unpacked(notebook, manifest, problems)


def disagreements(manifest: dict, notebook: bytes, student: str, assignment: str) -> list[str]:
    """Where a manifest disagrees with the hand-in as the grader sees it (to be flagged)."""
    found = []
    if manifest.get("notebook_sha256") != hashlib.sha256(notebook).hexdigest():
        found.append(
            "the notebook does not match the SHA-256 in its manifest: it was changed after "
            "`coursekit submit` packed it. The notebook as handed in was graded"
        )
    claimed = manifest.get("student")
    if not isinstance(claimed, str) or claimed.casefold() != student.casefold():
        found.append(
            f"the hand-in's manifest names the student {shown(claimed)}, but the file was "
            f"handed in as {student}'s (by its name or folder); it was graded as {student}'s"
        )
    if manifest.get("assignment") != assignment:
        found.append(
            "the hand-in's manifest names the assignment "
            f"{shown(manifest.get('assignment'))}, but it was handed in and graded as {assignment}"
        )
    return found
