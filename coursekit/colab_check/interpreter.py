"""Which Python builds the Colab environment: Colab's release where this machine has one.

Colab's Python cannot always be had (Debian 12 ships 3.11; our machines reach package
registries only, so ``uv python install`` cannot download one). So every interpreter that
can make a virtual environment is a candidate, from ``PATH``, pyenv and uv, and the one
nearest Colab's release is taken; a run says plainly when it is not Colab's.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

#: Prints the version of an interpreter that can make a virtual environment with pip in it
#: (Debian's python3.X without python3.X-venv cannot: no ensurepip).
_PROBE = "import sys, venv, ensurepip; print(*sys.version_info[:3])"


@dataclass(frozen=True)
class Interpreter:
    path: Path
    version: tuple[int, int, int]

    @property
    def release(self) -> str:
        return ".".join(map(str, self.version))


def version_of(path: Path) -> tuple[int, int, int] | None:
    """The version of the Python at ``path``, or None when it cannot make a venv with pip."""
    try:
        done = subprocess.run(
            [str(path), "-I", "-c", _PROBE], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return None
    parts = done.stdout.split()
    if done.returncode != 0 or len(parts) != 3 or not all(p.isdigit() for p in parts):
        return None
    return int(parts[0]), int(parts[1]), int(parts[2])


def candidate_paths() -> list[Path]:
    """Interpreters on this machine: ``python3.X`` on PATH, pyenv's versions, uv's finds."""
    found: list[Path] = []
    for minor in range(8, 30):
        where = shutil.which(f"python3.{minor}")
        if where:
            found.append(Path(where))
    root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    for version in sorted((root / "versions").glob("3.*")):
        if re.fullmatch(r"3\.\d+\.\d+", version.name):
            found.append(version / "bin" / "python3")
    uv = shutil.which("uv")
    if uv:
        try:
            done = subprocess.run(
                [uv, "python", "list", "--only-installed", "--output-format", "json"],
                capture_output=True,
                text=True,
                timeout=30,
            )
            found += [Path(p) for p in re.findall(r'"path":\s*"([^"]+)"', done.stdout)]
        except (OSError, subprocess.SubprocessError):
            pass
    unique: dict[Path, Path] = {}
    for path in found:
        unique.setdefault(path.resolve() if path.exists() else path, path)
    return list(unique.values())


def nearest(wanted: str, candidates: list[Interpreter]) -> Interpreter | None:
    """The candidate nearest the ``wanted`` release: the same minor release (its newest patch)
    first, else the fewest minor releases away, the newer of two equally far."""
    major, minor, *_ = (int(p) for p in wanted.split("."))
    same_major = [c for c in candidates if c.version[0] == major]
    if not same_major:
        return None
    return min(same_major, key=lambda c: (abs(c.version[1] - minor), -c.version[1], -c.version[2]))


def find(wanted: str, explicit: Path | None = None) -> Interpreter:
    """The interpreter to build with: ``explicit`` (``--python``) when given, else the nearest.

    Raises ValueError saying what to do when there is none (or ``explicit`` cannot make a venv).
    """
    if explicit is not None:
        version = version_of(explicit)
        if version is None:
            raise ValueError(
                f"--python {explicit}: not a Python that can make a virtual environment with "
                "pip (`python -m venv` and ensurepip must work)"
            )
        return Interpreter(explicit, version)
    candidates = [
        Interpreter(path, version)
        for path in candidate_paths()
        if (version := version_of(path)) is not None
    ]
    chosen = nearest(wanted, candidates)
    if chosen is None:
        raise ValueError(
            f"no Python 3 that can make a virtual environment was found (Colab's is {wanted}): "
            "install one (e.g. `apt-get install python3-venv`, pyenv, or `uv python install`) "
            "or name it with --python"
        )
    return chosen


def describe(used: Interpreter, wanted: str) -> str:
    """One line for the run's header: the Python used against Colab's, plainly."""
    colab_minor = ".".join(wanted.split(".")[:2])
    used_minor = ".".join(map(str, used.version[:2]))
    if used_minor != colab_minor:
        return (
            f"Python {used.release} ({used.path}), NOT Colab's Python {wanted}: no Python "
            f"{colab_minor} was found here (name one with --python); results may differ on Colab"
        )
    same = "the same release" if used.release == wanted else "the same minor release"
    return f"Python {used.release} ({used.path}); Colab's is {wanted}: {same}"
