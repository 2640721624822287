"""``coursekit --version``: the installed version, or a source checkout's, without torch."""

from __future__ import annotations

from pathlib import Path

#: The checkout's ``pyproject.toml`` (coursekit/commands/command_line/ is three folders down).
PYPROJECT = Path(__file__).resolve().parents[3] / "pyproject.toml"


def installed_version() -> str:
    """The installed distribution's version, without importing torch.

    A source checkout that was never installed has no distribution metadata; its
    ``pyproject.toml`` states the version instead.
    """
    from importlib import metadata

    try:
        return metadata.version("coursekit")
    except metadata.PackageNotFoundError:
        return source_version(PYPROJECT)


def source_version(pyproject: Path) -> str:
    """``[project] version`` from a checkout's ``pyproject.toml``, or ``unknown``."""
    try:
        text = pyproject.read_text(encoding="utf-8")
    except OSError:
        return "unknown"
    try:
        import tomllib  # Python 3.11+
    except ModuleNotFoundError:  # Python 3.10: the version line of the [project] table
        import re

        project = re.search(r"^\[project\]$(.*?)(?=^\[|\Z)", text, re.M | re.S)
        found = project and re.search(r'^version\s*=\s*"([^"]+)"', project.group(1), re.M)
        return found.group(1) if found else "unknown"
    try:
        return str(tomllib.loads(text)["project"]["version"])
    except (tomllib.TOMLDecodeError, KeyError, TypeError):
        return "unknown"
