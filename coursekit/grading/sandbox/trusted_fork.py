"""A fork in which no code of the notebook's runs: no fork hook, before or after.

``os.fork`` runs the hooks of ``os.register_at_fork``: a notebook's ``before`` and
``after_in_parent`` hooks in the process that forks, its ``after_in_child`` hooks in the
child, before the child's own code. In the child that measures the notebook's function
(:mod:`coursekit.checks.memory_peak`), such a hook could change what is measured: one that
touched 300 MiB and gave it back hid a whole window's forward from the memory test. The
standard library's own hooks run a notebook's code too, less directly: ``threading``'s calls
methods of every ``Thread`` made (a subclass's, started or not), ``logging``'s of every
handler, ``random``'s of its generator, whose class a notebook can change.

:func:`fork_running` forks with libc's ``fork``, called with the GIL (and the import lock,
as ``os.fork`` takes it) held, so no ``before`` or ``after_in_parent`` hook runs. In the
child, Python's own re-initialisation (``PyOS_AfterFork_Child``: its threads' states, locks
and signals, as after ``os.fork``) runs the ``after_in_child`` hooks in the order they were
registered, and the first is :func:`_take_over`: the warm parent imports this module before
any module that registers a hook (:data:`FIRST` says so, and the warm parent refuses to start
without it). It runs the child's work there and ends the process, so no other hook runs. What
the skipped hooks would have done (fresh locks for ``threading``, ``logging`` and a reseeded
``random``) matters only to a lock another thread held at the fork; the memory test forks
once the notebook's threads have settled (:func:`coursekit.checks.window_memory._prime`).

Everything both functions call is bound as a keyword default when this module is imported:
a notebook that rebinds a name here (and puts it back before the seal looks) changes
nothing they run, and changing a default is reported by the audit hook.
"""

from __future__ import annotations

import _imp
import ctypes
import os
import sys

FORKS = sys.platform.startswith("linux") and hasattr(os, "register_at_fork")
NOT_TAKEN_OVER = 71  # the child's exit status, should :func:`_take_over` not have run
# standard modules that register fork hooks which call methods of objects a notebook makes
HOOKING_MODULES = ("threading", "logging", "random", "concurrent.futures.thread", "asyncio")
# whether :func:`_take_over` is registered before any of their hooks
FIRST = FORKS and not any(name in sys.modules for name in HOOKING_MODULES)


def _libc_fork():
    if not FORKS:
        return None, None
    fork = ctypes.PyDLL(None, use_errno=True).fork  # PyDLL: the GIL stays held
    fork.argtypes, fork.restype = [], ctypes.c_int
    after_fork_child = ctypes.pythonapi.PyOS_AfterFork_Child
    after_fork_child.argtypes, after_fork_child.restype = [], None
    return fork, after_fork_child


_FORK, _AFTER_FORK_CHILD = _libc_fork()


def fork_running(
    work,
    *,
    _fork=_FORK,
    _after_fork_child=_AFTER_FORK_CHILD,
    _lock=_imp.acquire_lock,
    _unlock=_imp.release_lock,
    _exit=os._exit,
    _errno=ctypes.get_errno,
) -> int:
    """Fork a child that runs ``work()`` and ends (status 0, or 1 if it raised); the
    child's pid. Raises OSError where the fork failed. This function's frame holds
    ``work``: nothing but this frame says which fork is one of these."""
    _lock()  # as os.fork does: no other thread is importing as the child is made
    try:
        pid = _fork()
    except BaseException:
        _unlock()
        raise
    if pid == 0:  # pragma: no cover - the child never returns from the next line
        _after_fork_child()  # (re-initialises the import lock, among the rest)
        _exit(NOT_TAKEN_OVER)
    _unlock()
    if pid < 0:
        raise OSError(_errno(), "fork")
    return pid


def _take_over(*, _frame=sys._getframe, _exit=os._exit, _code=fork_running.__code__) -> None:
    """Run in every fork's child by Python: in one :func:`fork_running` made, its work, here
    (the process ends here, so the hooks after this one never run)."""
    try:
        frame = _frame(1)
    except ValueError:  # a fork made from C, with no Python frame: not one of ours
        return
    if frame.f_code is not _code:
        return
    code = 1
    try:
        frame.f_locals["work"]()
        code = 0
    finally:
        _exit(code)


if FORKS:
    os.register_at_fork(after_in_child=_take_over)
