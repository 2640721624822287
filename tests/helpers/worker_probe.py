"""A worker for tests of run_workers: what a started process sees of its caller's state."""

import os
import sys


def environment(rank: int, world_size: int, names: list[str]) -> dict:
    """The variables ``names`` as this process sees them, and whether it can import this
    module by the name the caller used (so its ``sys.path`` is the caller's)."""
    return {
        "rank": rank,
        "pid": os.getpid(),
        "environ": {name: os.environ.get(name) for name in names},
        "path_has_tests": any(os.path.isdir(os.path.join(p, "tests", "helpers")) for p in sys.path),
    }
