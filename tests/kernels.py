"""Running a notebook in a kernel from a test, the one way the tests do it.

A cell that runs past its timeout is interrupted, so the test fails with the cell's own
traceback (``KeyboardInterrupt`` at the line it was stuck on). Without the interrupt nbclient
shuts the kernel down while the cell still runs, and the kernel prints
``ZMQError: Socket operation on non-socket`` as it tries to answer on a closed socket: noise
that looks like a second, unrelated failure.
"""

from __future__ import annotations

from pathlib import Path

from nbclient import NotebookClient


def execute(notebook, timeout_s: int, cwd: Path | str | None = None, **options) -> None:
    """Run ``notebook`` top to bottom in a ``python3`` kernel, in place (outputs included)."""
    resources = {"metadata": {"path": str(cwd)}} if cwd is not None else {}
    NotebookClient(
        notebook,
        timeout=timeout_s,
        kernel_name="python3",
        interrupt_on_timeout=True,
        resources=resources,
        **options,
    ).execute()
