"""Install coursekit the way a student's Colab runtime does: by running the set-up cell.

The cell is taken from a generated notebook as committed, and run on the environment's Python
with one change: its ``COURSEKIT = ...`` line names a wheel of this checkout instead of the
GitHub repository (which this check must not depend on, and which may not hold these changes
yet). pip reads the same metadata from either, so it makes the same decisions: with Colab's
packages in place it should install coursekit and keep every one of them. Whatever it
replaced or removed is a finding (docs/colab.md promises pip touches none of them); what it
added, Colab would add too, and is listed.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from coursekit.authoring.setup_cell import SETUP_CELL_ID
from coursekit.colab_check.environment import ColabEnvironment, clean_environment, freeze, pip

_TARGET = re.compile(r"^COURSEKIT = .*$", re.MULTILINE)


def setup_cell(notebook: Path) -> str:
    """The source of the notebook's set-up cell (the cell with id ``coursekit-setup``)."""
    cells = json.loads(notebook.read_text(encoding="utf-8")).get("cells", [])
    for cell in cells:
        if cell.get("id") == SETUP_CELL_ID:
            source = cell.get("source", "")
            return "".join(source) if isinstance(source, list) else source
    raise ValueError(
        f"{notebook} has no set-up cell (id {SETUP_CELL_ID!r}): run `coursekit build` first"
    )


def installing_from(source: str, target: str) -> str:
    """The cell's source with ``COURSEKIT = <target>`` in place of its own install target."""
    if len(_TARGET.findall(source)) != 1:
        raise ValueError(
            "the set-up cell does not assign COURSEKIT = ... exactly once: colab-check cannot "
            "point it at this checkout (has coursekit/authoring/setup_cell.py changed?)"
        )
    return _TARGET.sub(lambda _: f"COURSEKIT = {json.dumps(target)}", source)


def build_wheel(env: ColabEnvironment, repository: Path, into: Path) -> Path:
    """A wheel of the checkout's working tree (what a push would publish), built from a copy so
    that nothing is written into the repository."""
    source = into / "source"
    source.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(repository / name, source / name)
    shutil.copytree(
        repository / "coursekit",
        source / "coursekit",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    pip(
        env,
        "building a wheel of this checkout",
        "wheel",
        "-q",
        "--no-deps",
        "-w",
        str(into),
        ".",
        cwd=source,
    )
    wheels = sorted(into.glob("coursekit-*.whl"))
    if len(wheels) != 1:
        raise RuntimeError(f"expected one coursekit wheel in {into}, found {len(wheels)}")
    return wheels[0]


@dataclass
class Outcome:
    """What running the set-up cell did to the environment."""

    coursekit: str  # the version installed, "" when none
    changed: list[str] = field(default_factory=list)  # "numpy 2.1.3 -> 2.3.0" and "x removed"
    added: list[str] = field(default_factory=list)  # "name version"
    error: str = ""  # the cell failed: its last line

    @property
    def ok(self) -> bool:
        return bool(self.coursekit) and not self.changed and not self.error


def compare(before: dict[str, str], after: dict[str, str]) -> tuple[list[str], list[str]]:
    """(changed or removed, added) between two freezes; coursekit itself is neither."""
    changed = [
        f"{name} {version} -> {after[name]}" if name in after else f"{name} {version} removed"
        for name, version in sorted(before.items())
        if name != "coursekit" and after.get(name) != version
    ]
    added = [
        f"{name} {version}"
        for name, version in sorted(after.items())
        if name not in before and name != "coursekit"
    ]
    return changed, added


def run_setup_cell(env: ColabEnvironment, notebook: Path, repository: Path) -> Outcome:
    """Remove coursekit, then run ``notebook``'s set-up cell installing this checkout's wheel,
    from a folder outside the repository (so the checkout itself is not importable)."""
    pip(env, "removing the last run's coursekit", "uninstall", "-q", "-y", "coursekit")
    with tempfile.TemporaryDirectory(prefix="colab-check-") as scratch:
        wheel = build_wheel(env, repository, Path(scratch) / "wheel")
        cell = installing_from(setup_cell(notebook), str(wheel))
        done = subprocess.run(
            [str(env.python), "-c", cell],
            capture_output=True,
            text=True,
            cwd=scratch,
            env=clean_environment(),
        )
    after = freeze(env)
    changed, added = compare(env.base_freeze(), after)
    error = ""
    if done.returncode != 0:
        lines = (done.stdout + done.stderr).strip().splitlines()
        error = lines[-1] if lines else f"exited with {done.returncode}"
    return Outcome(after.get("coursekit", ""), changed, added, error)
