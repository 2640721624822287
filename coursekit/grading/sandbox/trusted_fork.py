"""A fork in which no code of the notebook's runs: no fork hook, before or after.

``os.fork`` runs the hooks of ``os.register_at_fork``: a notebook's ``before`` and
``after_in_parent`` hooks in the process that forks, its ``after_in_child`` hooks in the
child, before the child's own code. In a child that measures the notebook's function
(:mod:`coursekit.checks.memory_peak`) or reads torch's state for the grader (the dispatcher
after the cells: :mod:`coursekit.grading.sandbox.torch_registrations`), such a hook could
change what is measured or read: one that touched 300 MiB and gave it back hid a whole
window's forward from the memory test.

:func:`fork_running` forks with libc's ``fork``, called with the GIL held, so no ``before``
or ``after_in_parent`` hook runs. In the child, Python's own re-initialisation
(``PyOS_AfterFork_Child``: its threads, locks and signals, as ``os.fork`` does it) runs the
``after_in_child`` hooks in the order they were registered; :func:`_take_over`, registered
as this module is imported (in the grader, before any hand-in exists), runs the child's
work there and ends the process, so no hook registered after it runs. Hooks registered
before it are the libraries' (``threading``'s, ``random``'s) and run as they do in any fork.
"""

from __future__ import annotations

import ctypes
import os
import sys

FORKS = sys.platform.startswith("linux") and hasattr(os, "register_at_fork")
NOT_TAKEN_OVER = 71  # the child's exit status, should :func:`_take_over` not have run
_GET_FRAME = sys._getframe
_EXIT = os._exit

if FORKS:  # looked up once, on import: nothing is resolved in a hand-in's process
    _HELD = ctypes.PyDLL(None, use_errno=True)  # PyDLL: the GIL stays held
    _FORK = _HELD.fork
    _FORK.argtypes, _FORK.restype = [], ctypes.c_int
    _AFTER_FORK_CHILD = ctypes.pythonapi.PyOS_AfterFork_Child
    _AFTER_FORK_CHILD.argtypes, _AFTER_FORK_CHILD.restype = [], None


def fork_running(work) -> int:
    """Fork a child that runs ``work()`` and ends (status 0, or 1 if it raised); the
    child's pid. Raises OSError where the fork failed. This function's frame holds
    ``work``: nothing but this frame says which fork is one of these."""
    pid = _FORK()
    if pid == 0:  # pragma: no cover - the child never returns from the next line
        _AFTER_FORK_CHILD()
        _EXIT(NOT_TAKEN_OVER)
    if pid < 0:
        raise OSError(ctypes.get_errno(), "fork")
    return pid


def _take_over() -> None:
    """Run in every fork's child by Python: in one :func:`fork_running` made, its work, here
    (the process ends here, so the hooks after this one never run)."""
    try:
        frame = _GET_FRAME(1)
    except ValueError:  # a fork made from C, with no Python frame: not one of ours
        return
    if frame.f_code is not _FORK_RUNNING_CODE:
        return
    code = 1
    try:
        frame.f_locals["work"]()
        code = 0
    finally:
        _EXIT(code)


_FORK_RUNNING_CODE = fork_running.__code__
if FORKS:
    os.register_at_fork(after_in_child=_take_over)
