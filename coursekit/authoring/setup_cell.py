"""The first cell of every generated notebook: install coursekit where it is missing.

On Colab the package is not there, so the cell installs it with pip; torch is not reinstalled
because Colab's own torch satisfies coursekit's range. Where coursekit is installed (a laptop
after ``scripts/start``, CI) the cell does nothing.

A public course installs from its GitHub repository. A private course, whose repository Colab
cannot read, sets ``INSTALL_FROM`` in course.py to a wheel students can download (an https URL
ending in ``.whl``) or to a path under ``/content/drive/``, which the cell mounts first. It is a
setting in course.py rather than an environment variable so that every build, CI's
``build --check`` included, writes the same cell.
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit

import nbformat

from coursekit import course
from coursekit.authoring.publication import Publication, from_course

SETUP_CELL_ID = "coursekit-setup"
DRIVE = "/content/drive/"


def install_from_setting() -> str | None:
    """``INSTALL_FROM`` in course.py: None (the GitHub repository) where it is not set."""
    return course.INSTALL_FROM


def _check_install_from(install_from: str) -> None:
    parts = urlsplit(install_from)
    wheel_url = parts.scheme in {"http", "https"} and parts.path.endswith(".whl")
    if not (wheel_url or install_from.startswith(DRIVE)):
        raise ValueError(
            f"INSTALL_FROM in coursekit/course.py is {install_from!r}, which the set-up cell "
            "cannot install from: use None (the GitHub repository), an https URL ending in "
            f".whl, or a path under {DRIVE} (a wheel in Google Drive)."
        )


def setup_source(publication: Publication | None = None, install_from: str | None = None) -> str:
    """The cell's code: pip-installs ``install_from`` (mounting Google Drive first for a path
    under /content/drive/), or the publication's repository when it is None.

    Args:
        publication: where the course is published; course.py's address when None.
        install_from: a wheel's https URL, a path under /content/drive/, or None for git.
    """
    publication = publication or from_course()
    if install_from is not None:
        _check_install_from(install_from)
    target = publication.git_requirement() if install_from is None else install_from
    mount = (
        [
            "    from google.colab import drive  # coursekit is in Google Drive: allow access",
            f'    drive.mount("{DRIVE.rstrip("/")}")',
        ]
        if install_from is not None and install_from.startswith(DRIVE)
        else []
    )
    return "\n".join(
        [
            "# Set-up: installs coursekit where it is missing (e.g. on Colab, keeping Colab's",
            "# own torch); does nothing where it is already installed.",
            "import importlib.util",
            "import subprocess",
            "import sys",
            "",
            f"COURSEKIT = {json.dumps(target)}",
            'if importlib.util.find_spec("coursekit") is None:',
            *mount,
            "    subprocess.run("
            '[sys.executable, "-m", "pip", "install", "-q", COURSEKIT], check=True)',
            "    importlib.invalidate_caches()  # lets the next cell import the new package",
        ]
    )


def add_setup_cell(notebook, name: str, source: str | None = None):
    """Put the set-up cell first (replacing one that is already there).

    ``source`` is the cell's code; the one course.py describes when None.
    """
    cells = [c for c in notebook["cells"] if c.get("id") != SETUP_CELL_ID]
    cell = nbformat.v4.new_code_cell(
        source if source is not None else setup_source(install_from=install_from_setting())
    )
    cell["id"] = SETUP_CELL_ID
    notebook["cells"] = [cell, *cells]
    return notebook
