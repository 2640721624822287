"""Running a notebook in a kernel from a test, the one way the tests do it.

A cell that runs past its timeout is interrupted, so the test fails with the cell's own
traceback (``KeyboardInterrupt`` at the line it was stuck on). Without the interrupt nbclient
shuts the kernel down while the cell still runs, and the kernel prints
``ZMQError: Socket operation on non-socket`` as it tries to answer on a closed socket: noise
that looks like a second, unrelated failure. The interrupt makes that rare, not impossible
(the kernel can still be answering when it is shut down), so the kernel's stderr is read
back and passed on without that one traceback; everything else it printed is kept.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from nbclient import NotebookClient

_SHUTDOWN_NOISE = "zmq.error.ZMQError: Socket operation on non-socket"


def without_shutdown_noise(text: str) -> str:
    """``text`` without the traceback of each ZMQError a kernel prints as it is shut down:
    from its ``ERROR:tornado`` log line (or ``Traceback``) to the error line itself."""
    lines = text.splitlines(keepends=True)
    kept: list[str] = []
    for line in lines:
        if _SHUTDOWN_NOISE not in line:
            kept.append(line)
            continue
        for start in range(len(kept) - 1, -1, -1):
            if kept[start].startswith("Traceback (most recent call last)"):
                if start and kept[start - 1].startswith("ERROR:tornado"):
                    start -= 1  # the log line that introduced the traceback
                del kept[start:]
                break
    return "".join(kept)


def execute(notebook, timeout_s: int, cwd: Path | str | None = None, **options) -> None:
    """Run ``notebook`` top to bottom in a ``python3`` kernel, in place (outputs included)."""
    resources = {"metadata": {"path": str(cwd)}} if cwd is not None else {}
    with tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace") as kernel_stderr:
        try:
            NotebookClient(
                notebook,
                timeout=timeout_s,
                kernel_name="python3",
                interrupt_on_timeout=True,
                resources=resources,
                **options,
            ).execute(stderr=kernel_stderr)
        finally:
            kernel_stderr.seek(0)
            sys.stderr.write(without_shutdown_noise(kernel_stderr.read()))
