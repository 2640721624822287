"""gc's debug flags held at 0 for the rest of a hand-in's process.

Why: with ``gc.DEBUG_SAVEALL`` set, every object a collection finds unreachable goes to
``gc.garbage`` instead of being freed, frames included; a frame that outlived its call still
leads, through ``f_back``, to its caller's, and so down to the runner's own frames. Nothing
of that (``gc.set_debug``, ``gc.collect``, ``gc.garbage``, ``f_back``, ``f_locals``) raises
an audit event. Wrapping ``gc.set_debug`` in Python would not do: a hand-in can make a new
``gc`` module with ``_imp.create_builtin``, whose functions are the interpreter's own. So
the C function behind ``set_debug`` is replaced, in the interpreter's table of gc's methods
(shared by every ``gc`` module there is), by the one behind ``get_debug``: ``set_debug(x)``
then returns the flags, unchanged, and sets nothing. Done by the runner, before any hand-in
code runs, in the hand-in's process alone (a fork's copy of the interpreter).
"""

from __future__ import annotations

import ctypes
import gc
import sys


def lock_debug() -> bool:
    """Set gc's debug flags to 0, empty ``gc.garbage`` and make ``gc.set_debug`` a no-op for
    good; whether it could (CPython only)."""
    if sys.implementation.name != "cpython":
        return False
    try:
        return _locked()
    except (OSError, ValueError, TypeError):  # never a reason to grade no one: said in applied
        return False


def _locked() -> bool:
    gc.set_debug(0)
    gc.garbage.clear()
    pointer = ctypes.sizeof(ctypes.c_void_p)
    # a builtin function: PyObject_HEAD (refcount, type), then m_ml, its PyMethodDef
    set_def = ctypes.c_void_p.from_address(id(gc.set_debug) + 2 * pointer).value
    get_def = ctypes.c_void_p.from_address(id(gc.get_debug) + 2 * pointer).value
    # PyMethodDef: ml_name, then ml_meth (both take the module and one argument)
    target = ctypes.c_void_p.from_address(set_def + pointer)
    target.value = ctypes.c_void_p.from_address(get_def + pointer).value
    gc.set_debug(gc.DEBUG_SAVEALL)
    return gc.get_debug() == 0
