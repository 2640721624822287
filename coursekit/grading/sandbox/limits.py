"""What one hand-in may use, and how it is confined: the grader's settings for the sandbox.

:class:`Limits` and :class:`Options` travel to the runner in each job
(:func:`coursekit.grading.sandbox.driver.run_hand_in`); ``grade`` and the Gradescope bundle take
them from their command lines.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """What one hand-in may use.

    Time limits are CPU seconds (user and system time of the notebook's process), so a busy
    machine slows a hand-in down without marking it down. Code that waits without computing
    (a sleep, a blocked read) is ended by a wall-clock backstop: ``wall_factor`` times the
    limit, for each cell, test and whole notebook."""

    cell_timeout_s: float = 60.0
    task_timeout_s: float = 30.0
    hand_in_timeout_s: float = 300.0
    wall_factor: float = 10.0
    memory_bytes: int = 3 * 2**30
    max_processes: int = 64
    output_bytes: int = 2 * 2**20
    file_bytes: int = 64 * 2**20
    scratch_bytes: int = 512 * 2**20  # its whole writable disk (a tmpfs): files, /tmp, /dev/shm
    scratch_files: int = 20_000


@dataclass(frozen=True)
class Options:
    """How to confine: ``isolation`` "auto" (namespaces where the kernel allows), "user"
    (through a user namespace even as root: the non-root path) or "none" (for tests)."""

    landlock: bool = True
    isolation: str = "auto"
    hidden: tuple[str, ...] = ()  # host folders never bound into the sandbox (the course's)
    # Run hand-ins even where they would run as the grader's own user with no namespace of
    # their own (not root, and no user namespaces): an instructor's explicit choice.
    unconfined: bool = False
