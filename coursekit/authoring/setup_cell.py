"""The first cell of every generated notebook: install coursekit where it is missing.

On Colab the package is not there, so the cell installs it from the repository with pip;
torch is not reinstalled because Colab's own torch satisfies coursekit's range. Where
coursekit is installed (a laptop after ``scripts/start``, CI) the cell does nothing.
"""

from __future__ import annotations

import nbformat

from coursekit.course import install_spec

SETUP_CELL_ID = "coursekit-setup"


def setup_source() -> str:
    return "\n".join(
        [
            "# Set-up: installs coursekit where it is missing (e.g. on Colab, keeping Colab's",
            "# own torch); does nothing where it is already installed.",
            "import importlib.util",
            "import subprocess",
            "import sys",
            "",
            f'COURSEKIT = "{install_spec()}"',
            'if importlib.util.find_spec("coursekit") is None:',
            "    subprocess.run("
            '[sys.executable, "-m", "pip", "install", "-q", COURSEKIT], check=True)',
            "    importlib.invalidate_caches()  # lets the next cell import the new package",
        ]
    )


def add_setup_cell(notebook, name: str):
    """Put the set-up cell first (replacing one that is already there)."""
    cells = [c for c in notebook["cells"] if c.get("id") != SETUP_CELL_ID]
    cell = nbformat.v4.new_code_cell(setup_source())
    cell["id"] = SETUP_CELL_ID
    notebook["cells"] = [cell, *cells]
    return notebook
