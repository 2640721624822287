"""This Python, at its environment's real path: a course's ``.venv`` reached through a link.

Why: the grader's sandbox gives a hand-in the host's Python folders at their real paths (its
own root file system binds them there), while a Python started through a link keeps the
link's paths on ``sys.path``. Whatever the grading process had imported still worked, and the
first module it had not (``IPython.core.oinspect``) was not found, so every hand-in failed
to be graded. Both ways in (``coursekit ...`` and the Gradescope bundle's ``python -m
coursekit.commands.gradescope``) start again from the real path first.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def python_at_its_real_path() -> Path | None:
    """This Python, started again from its environment's real folder, where it was started
    through a link to that folder (``$AUTOGRADER_ROOT/venv`` linked to a course's ``.venv``,
    the easy way to stand in for ``setup.sh`` locally); None where it was not.

    Why: the sandbox gives a hand-in the host's Python folders at their real paths (its own
    root file system binds them there), while a Python started through a link keeps the
    link's paths on ``sys.path``. Whatever the warm process had imported still worked, and
    the first module it had not (``IPython.core.oinspect``) was not found: every submission
    failed before its ``Mode:`` line."""
    prefix = Path(sys.prefix)
    real = Path(os.path.realpath(prefix))
    if real == prefix:
        return None
    try:
        return real / Path(sys.executable).relative_to(prefix)
    except ValueError:  # the interpreter lives outside its prefix: nothing to start again
        return None


def start_again_at_the_real_path(module: str, arguments: list[str]) -> None:
    """Replace this process with ``python -m module arguments`` run from the environment's
    real folder, where this one was started through a link; return where it was not."""
    python = python_at_its_real_path()
    if python is None or not os.access(python, os.X_OK):
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(python, [str(python), "-m", module, *arguments])
