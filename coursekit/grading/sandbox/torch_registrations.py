"""Who registered what with torch's dispatcher: ``torch.library`` kernels and operators.

A notebook can register a kernel of its own for one of torch's operators
(``torch.library.Library("aten", "IMPL").impl("mul.Tensor", ...)``) and every later
multiplication, the hidden tests' included, runs it; nothing the harness seal records is
replaced. Torch registers kernels too, lazily, as its modules are imported. :func:`watch`
(in the warm parent, before any hand-in code) wraps torch's ways in and records, for each
registration, the stack that made it; :func:`by_notebook` says whether the notebook's code
did; :func:`take_back` undoes it. :mod:`coursekit.grading.sandbox.global_state` calls both
before each test. A registration made through a handle the library itself made earlier (a
``Library``'s own ``.m``) is not seen: a limit, documented.
"""

from __future__ import annotations

import sys

# What :func:`watch` records: (what, stack, owner); the stack from the registering call
# down, as (code, globals) pairs, until the import system's call that runs a module's code;
# the owner, what take_back undoes (the Library, or the dispatcher's handle).
RECORD: list = []
_WATCHERS: set = set()  # ids of the wrappers made (each registrar is wrapped once)
_IMPORTING = "_call_with_frames_removed"
_NEW_LIBRARY = "a library of operators"
_REGISTRARS = ("torch.library", "torch._library", "torch._ops")


def registrars() -> list:
    """(owner, attribute name) of each of torch's ways to register with its dispatcher."""
    import torch.library

    names = ("define", "impl", "fallback", "_register_fake", "_register_torch_dispatch_rule")
    watched = [(torch._C, "_dispatch_library")]
    return watched + [(torch.library.Library, name) for name in names]


def watch() -> None:
    """Wrap torch's ways to register with its dispatcher (``torch._C._dispatch_library`` and
    ``torch.library.Library``'s methods) so that each call records who made it. Run once, in
    the warm parent, before the seal and before any hand-in code. A registration is the
    notebook's when the nearest frame below it that is not library code called torch's
    registration API itself; one made while a module is imported, or by torch's own lazy
    set-up, is the library's (judged by :func:`by_notebook`, in
    :func:`coursekit.grading.sandbox.global_state.restore`, where provenance is known)."""
    getframe, record = sys._getframe, RECORD.append

    def wrap(function, label: str):
        def registering(*args, **kwargs):
            stack, frame = [], getframe(1)
            while frame is not None and len(stack) < 64:
                stack.append((frame.f_code, frame.f_globals))
                if frame.f_code.co_name == _IMPORTING:
                    break
                frame = frame.f_back
            detail = args[1] if len(args) > 1 and isinstance(args[1], str) else ""
            result = function(*args, **kwargs)
            owner = result if label == _NEW_LIBRARY else (args[0] if args else None)
            record((f"{label} {detail.strip()[:60]}".strip(), stack, owner))
            return result

        _WATCHERS.add(id(registering))
        return registering

    for owner, name in registrars():
        current = vars(owner).get(name)
        if current is None or id(current) in _WATCHERS:
            continue
        label = _NEW_LIBRARY if name == "_dispatch_library" else f"Library.{name}"
        setattr(owner, name, wrap(current, label))


def by_notebook(stack: list, provenance) -> bool:
    """Whether a recorded registration is the notebook's (see :func:`watch`)."""
    for index, (code, namespace) in enumerate(stack):
        if code.co_name == _IMPORTING and provenance.is_library(code):
            return False
        if provenance.is_library(code) and provenance.is_library_globals(namespace):
            continue
        if index == 0:
            return True
        callee = str(stack[index - 1][1].get("__name__", ""))
        return callee.startswith(_REGISTRARS)
    return False


def take_back(owner) -> None:
    """Undo a notebook's registrations: its ``Library`` destroyed, or the dispatcher's
    handle it holds reset (either removes every kernel and operator it registered)."""
    destroy = getattr(type(owner), "_destroy", None)
    reset = getattr(type(owner), "reset", None)
    try:
        if callable(destroy) and getattr(owner, "m", None) is not None:
            destroy(owner)
        elif callable(reset):
            reset(owner)
    except Exception:  # noqa: BLE001 - already destroyed, or a handle of another kind: flagged
        return
