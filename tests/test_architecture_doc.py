"""docs/architecture.md names real files and real functions, and every package is on its map.

Why: a map that names a file that has moved sends the next engineer the wrong way, silently.
"""

import ast
import re
import subprocess
from pathlib import Path

import pytest

from tests.helpers.hand_ins import REPO

DOC = REPO / "docs" / "architecture.md"
# `commands/grade.py:run_grade`, `grading/collect.py`, `coursekit/checks/`, `driver.py`
_PATH = re.compile(r"`((?:[\w.]+/)*[\w.]+(?:\.py|\.ipynb|/))(?::(\w+))?`")


def _tracked() -> list[str]:
    done = subprocess.run(["git", "-C", str(REPO), "ls-files"], capture_output=True, text=True)
    if done.returncode != 0:
        return sorted(str(p.relative_to(REPO)) for p in REPO.rglob("*") if p.is_file())
    return done.stdout.split()


def _defines(path: Path, name: str) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if node.name == name:
                return True
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return True
    return False


def references() -> list[tuple[str, str | None]]:
    """Every file the map names; ``moduleNN/...`` stands for each module's package."""
    found = set(_PATH.findall(DOC.read_text(encoding="utf-8")))
    return sorted((path.replace("moduleNN", "module01"), name) for path, name in found)


def test_the_map_names_many_files():
    assert len(references()) > 40, references()


@pytest.mark.parametrize("reference, name", references())
def test_each_file_the_map_names_exists_and_holds_what_it_says(reference, name):
    files = _tracked()
    if reference.endswith("/"):
        found = [f for f in files if f.startswith(reference) or f"/{reference}" in f"/{f}"]
    else:
        found = [f for f in files if f == reference or f.endswith(f"/{reference}")]
    assert found, f"docs/architecture.md names {reference}, which no tracked file matches"
    if name:
        assert any(_defines(REPO / f, name) for f in found if f.endswith(".py")), (
            f"docs/architecture.md says {reference} defines {name}"
        )


def test_every_package_of_coursekit_is_on_the_map():
    text = DOC.read_text(encoding="utf-8")
    packages = sorted(
        re.sub(r"module\d\d/", "moduleNN/", str(p.parent.relative_to(REPO)) + "/")
        for p in (REPO / "coursekit").rglob("__init__.py")
    )
    missing = [
        p for p in packages if p != "coursekit/" and p.removeprefix("coursekit/") not in text
    ]
    assert not missing, missing
