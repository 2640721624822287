"""A command's process ends without tearing torch down, once its work is done and saved.

Python's own ending clears every module's globals and collects what they held. With torch
(and ``torch._dynamo``, which an optimizer's first step imports) that took 0.7 s of CPU on
this project's machines, for nothing: the process is about to be gone. ``grade`` paid it
once a run, the Gradescope bundle once a hand-in, and the test suite once a command it ran.

So a command run as a program ends as Python's ending would, less that clearing: the
threads that are not daemons are waited for, the ``atexit`` functions run (logging's flush,
``tempfile``'s clean-up, the gradebook's), the standard streams are flushed, and the process
exits with the command's status. Only a status that is ``None`` or an ``int`` ends this way;
anything else (a message, an exception) goes through Python's usual ending, which prints it.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading


def end_now(status: int | None) -> None:
    """End the process with ``status`` as described in the module's docstring; returns only
    where ``status`` is neither ``None`` nor an ``int`` (the caller then raises it)."""
    if status is not None and type(status) is not int:
        return
    current = threading.current_thread()
    for thread in threading.enumerate():
        if thread is not current and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    code = status or 0
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # a closed pipe (`| head`): Python's ending says so too
            code = code or 120
    os._exit(code & 0xFF)  # as the system keeps it: sys.exit(256) ends with 0 too
