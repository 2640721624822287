"""The demonstrations' outputs (plots, tables, printed figures), from running the exercise
notebooks, kept in a cache so that a rebuild runs nothing.

Each code cell's outputs are stored under a key: the SHA-256 of the module's name and the
source of every code cell up to and including it, since those are what the cell's outputs
can depend on within the notebook. An edit to one cell leaves the outputs of the cells
before it in the cache and sends every later one back to be run. What the key cannot see
(a change in coursekit's own code, or in torch) leaves old outputs in place:
``coursekit site --refresh`` runs every notebook again.

The cache lives outside the repository (``$XDG_CACHE_HOME/coursekit/site-outputs``, or
``--cache DIR``): outputs hold timings and machine-dependent figures that have no place in
a diff. A cell with no outputs in the cache is shown with a note, so a site built from an
empty cache (``--no-execute``, as the tests do) is complete in every other way.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

import nbformat

#: Bump when what is stored changes shape: old entries are then simply not found.
CACHE_FORMAT = "1"
#: One notebook's run may take this long before it is stopped (the longest takes minutes).
CELL_TIMEOUT_S = 900


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "coursekit" / "site-outputs"


def cell_keys(name: str, notebook: nbformat.NotebookNode) -> dict[int, str]:
    """The cache key of each code cell, by its index in the notebook."""
    digest = hashlib.sha256(f"coursekit-site/{CACHE_FORMAT}/{name}".encode())
    keys = {}
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code":
            continue
        source = cell.source.encode("utf-8")
        digest.update(len(source).to_bytes(8, "big") + source)
        keys[index] = digest.copy().hexdigest()
    return keys


class OutputCache:
    """Outputs of code cells by key, one small JSON file each, in ``folder``."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)

    def _path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.json"

    def get(self, key: str) -> list | None:
        """The outputs stored under ``key``, or None (absent, or a damaged file)."""
        try:
            data = json.loads(self._path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        outputs = data.get("outputs") if isinstance(data, dict) else None
        return outputs if isinstance(outputs, list) else None

    def put(self, key: str, outputs: list) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(path.name + ".tmp")
        temporary.write_text(json.dumps({"outputs": outputs}), encoding="utf-8")
        temporary.replace(path)  # a reader never sees half a file

    def missing(self, keys: Iterable[str]) -> list[str]:
        """Keys with no readable outputs: absent or damaged, both run again."""
        return [key for key in keys if self.get(key) is None]


def execute(name: str, notebook: nbformat.NotebookNode, cache: OutputCache) -> int:
    """Run the exercise notebook as a student would (top to bottom, stubs unfinished, errors
    allowed) in a scratch folder, and store the outputs of every code cell that ran.
    Returns the number of cells stored.

    A run that stops part-way (a cell past its time, a kernel that dies) still stores the
    cells before it, then raises: the cells after it have not run, and stay out of the cache.
    """
    from nbclient import NotebookClient

    notebook = nbformat.from_dict(json.loads(json.dumps(notebook)))  # a copy to fill
    keys = cell_keys(name, notebook)
    try:
        with tempfile.TemporaryDirectory(prefix=f"coursekit-site-{name}-") as scratch:
            client = NotebookClient(
                notebook,
                timeout=CELL_TIMEOUT_S,
                kernel_name="python3",
                allow_errors=True,
                resources={"metadata": {"path": scratch}},
            )
            client.execute()
    finally:
        ran = [i for i in keys if notebook.cells[i].get("execution_count") is not None]
        for index in ran:
            outputs = [dict(output) for output in notebook.cells[index].get("outputs", [])]
            cache.put(keys[index], outputs)
    return len(ran)
