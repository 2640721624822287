"""torch._dynamo's frame hooks, set only through a guard that the audit hook hears.

``torch._C._dynamo.eval_frame.set_eval_frame(callback)`` hands ``callback`` every Python
frame as it starts, the grader's included, with its locals. :mod:`global_state` puts the
callback back before and after each test, but a callback that a notebook's function turns
on at each call, and that turns itself off as soon as it sees the grader's frames, is gone
by the time anything reads it. So the setters themselves are guarded: :func:`guard`
(in the warm parent, before the seal and before any hand-in) replaces each setter of a
frame hook, wherever torch bound it by name, with a function that raises the audit event
:data:`EVENT` with the callback, then sets it. The audit hook (``tampering.py``) reports a
callback that is not the libraries' own, whoever sets it, and any callback set by the
notebook's own code.

The original setter must be out of the notebook's reach, or it would call it directly. The
guard holds it only as a local of a suspended generator's frame: reaching it takes
``gi_frame`` or ``gc.get_referents``, both of which the audit hook reports. The grader's own
put-back (:mod:`global_state`) takes the originals (:func:`take_originals`, in the hand-in's
process before any hand-in code), keeps them in its baseline, which only the runner's own
frames hold, and calls them directly: the guard runs Python frames, and a callback that is on
sees each of them start. Through the guard, a callback that set the hook
again as it saw the guard's frame would have waited for ever on the guard's own lock, and
the grader with it; the guard now refuses a call made from inside itself.
"""

from __future__ import annotations

import sys
import threading
import types

EVENT = "coursekit.frame_hook"
# torch._C._dynamo.eval_frame's setters of callbacks that are handed frames or their locals
SETTERS = ("set_eval_frame", "set_bytecode_debugger_callback", "set_guard_error_hook")
# torch's own setters, by name, from :func:`guard` (in the warm parent) until the hand-in's
# process takes them (:func:`take_originals`, before any hand-in code runs)
_ORIGINALS: dict = {}


def guard() -> list[str]:
    """Guard each of torch's frame-hook setters where it is bound; the names guarded."""
    try:
        from torch._C._dynamo import eval_frame
    except ImportError:  # a torch without dynamo: no such hooks
        return []
    done = []
    for name in SETTERS:
        original = vars(eval_frame).get(name)
        if original is None or isinstance(original, types.FunctionType):
            continue  # absent in this torch, or guarded already (torch's are compiled)
        _ORIGINALS[name] = original
        guarded = _guarded(original, name)
        for module_name, module in list(sys.modules.items()):
            namespace = getattr(module, "__dict__", None)
            if not isinstance(namespace, dict):
                continue
            for key, value in list(namespace.items()):
                if value is original:
                    namespace[key] = guarded
                    done.append(f"{module_name}.{key}")
    return done


def _guarded(original, name: str):
    """A function that audits, then calls ``original``; ``original`` lives only in a
    generator's frame (see the module's docstring)."""
    calls = _calls(original, sys.audit, name)
    next(calls)
    lock, get_ident = threading.Lock(), threading.get_ident
    holder = [None]  # the thread in the guard now

    def setter(*args):
        if holder[0] == get_ident():  # a callback, handed the guard's own frame, set it again
            raise RuntimeError(f"{name} was called from a frame callback while it ran: refused")
        with lock:
            holder[0] = get_ident()
            try:
                ok, result = calls.send(args)
            finally:
                holder[0] = None
        if ok:
            return result
        raise result

    setter.__name__ = setter.__qualname__ = name
    setter.__doc__ = getattr(original, "__doc__", None)
    return setter


def _calls(original, audit, name: str):
    """Each ``args`` sent: audit the callback, call ``original``; (ok, result or error).
    An error leaves with no traceback, which would lead into this frame."""
    args = yield
    while True:
        try:
            audit(EVENT, name, args[0] if args else None)
            outcome = (True, original(*args))
        except Exception as error:  # noqa: BLE001 - handed to the caller, as raised
            error.__traceback__ = None
            outcome = (False, error)
        args = yield outcome


def take_originals() -> dict:
    """torch's own setters by name, taken out of this module: called once, in the hand-in's
    process, before any hand-in code runs (:func:`coursekit.grading.sandbox.global_state.take`).
    Empty where :func:`guard` did not run, or they were taken already."""
    taken = dict(_ORIGINALS)
    _ORIGINALS.clear()
    return taken
