"""The course's earlier releases, read from its git history.

One place for ``git show`` and friends, so every test that looks back (hand-ins made from an
earlier release, names an old notebook imports) reads history the same way, and skips the same
way where a copy of the course has no history (an sdist, a zip download).
"""

from __future__ import annotations

import json
import shutil
import subprocess

from tests.helpers.hand_ins import REPO

PREVIOUS_RELEASE = "b0932e6"  # the release before the demo cells read papermill parameters
NOTEBOOK_FOLDERS = ("notebooks/", "exercises/", "solutions/")


def has_history() -> bool:
    """Is this copy of the course a git repository with its history, and git installed?"""
    if shutil.which("git") is None:
        return False
    done = subprocess.run(
        ["git", "-C", str(REPO), "cat-file", "-e", f"{PREVIOUS_RELEASE}^{{commit}}"],
        capture_output=True,
    )
    return done.returncode == 0


def at_commit(path: str, commit: str = PREVIOUS_RELEASE) -> str | None:
    """``path`` as ``commit`` held it; None without the course's git history (or the file)."""
    if shutil.which("git") is None:
        return None
    done = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{commit}:{path}"], capture_output=True, text=True
    )
    return done.stdout if done.returncode == 0 else None


def every_notebook_version() -> dict[str, dict]:
    """Every version of every notebook ever committed to notebooks/, exercises/ or solutions/,
    as {blob id: notebook}: what students and instructors of each release opened. Read with
    one ``git cat-file --batch`` rather than one ``git show`` per version. Empty without git
    history."""
    if not has_history():
        return {}
    log = subprocess.run(
        ["git", "-C", str(REPO), "log", "--all", "--format=", "--raw", "--no-abbrev", "--",
         *NOTEBOOK_FOLDERS],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    blobs = set()
    for line in log.splitlines():  # ":100644 100644 OLD NEW M\tpath"
        fields = line.split()
        if len(fields) >= 6 and fields[-1].endswith(".ipynb") and set(fields[3]) != {"0"}:
            blobs.add(fields[3])
    batch = subprocess.run(
        ["git", "-C", str(REPO), "cat-file", "--batch"],
        input="".join(f"{blob}\n" for blob in sorted(blobs)).encode(),
        capture_output=True, check=True,
    ).stdout  # fmt: skip
    notebooks, at = {}, 0
    while at < len(batch):
        header_end = batch.index(b"\n", at)
        blob, _, size = batch[at:header_end].split()
        body = batch[header_end + 1 : header_end + 1 + int(size)]
        at = header_end + 1 + int(size) + 1
        try:
            notebooks[blob.decode()] = json.loads(body)
        except ValueError:  # a version that was not JSON never opened as a notebook
            continue
    return notebooks
