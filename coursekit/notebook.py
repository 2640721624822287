"""Helpers for cells that build on a student's exercise."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from coursekit.checks.registry import STRICT_ENV, error_message


@contextlib.contextmanager
def uses_your(name: str) -> Iterator[None]:
    """Run a cell that calls the student's ``name``; if it fails, say so and go on.

    Students run notebooks top to bottom; a demonstration cell that builds on an unfinished
    or broken exercise should explain itself in one line instead of stopping the notebook
    with a traceback. The exercise's own ``check(...)`` says what to fix. Under
    ``COURSEKIT_STRICT_CHECKS=1`` (CI on the solutions) the error is raised instead, so a
    bug in the demonstration itself cannot hide.

    Example:
        >>> with uses_your("train_accumulated"):
        ...     raise NotImplementedError
        This cell uses your train_accumulated: finish that exercise above, then run this cell again.
    """
    try:
        yield
    except NotImplementedError:
        if os.environ.get(STRICT_ENV) == "1":
            raise
        print(f"This cell uses your {name}: finish that exercise above, then run this cell again.")
    except Exception as exc:
        if os.environ.get(STRICT_ENV) == "1":
            raise
        print(
            f"This cell uses your {name}, and it stopped with an error. {error_message(exc)}. "
            f"Run check({name!r}, {name}) above: it says what to fix."
        )
