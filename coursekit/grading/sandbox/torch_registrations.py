"""Who registered what with torch's dispatcher: ``torch.library`` kernels and operators.

A notebook can register a kernel of its own for one of torch's operators
(``torch.library.Library("aten", "IMPL").impl("mul.Tensor", ...)``) and every later
multiplication, the hidden tests' included, runs it; nothing the harness seal records is
replaced. Torch registers kernels too, lazily, as its modules are imported. :func:`watch`
(in the warm parent, before any hand-in code) wraps torch's ways in and records, for each
registration, the stack that made it; :func:`by_notebook` says whether the notebook's code
did; :func:`take_back` undoes it. :mod:`coursekit.grading.sandbox.global_state` calls both
before each test.

Those wrappers see the ways in that torch's Python API offers. A kernel can also be
registered through a handle torch itself made (a ``Library``'s own ``.m``), or through the
registration function taken back out of a wrapper; neither passes a wrapper. So the
dispatcher itself is read too: :func:`dispatcher_snapshot` (in the warm parent, after every
import) keeps each operator's registrations as torch prints them, with the backend
fallbacks, and :func:`dispatcher_changes` names every operator that existed then whose
kernels differ now, however the change was made. Operators added since (a library imported
later defines its own) are not compared: nothing the tests run calls them.
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


def dispatcher_snapshot() -> tuple:
    """Every operator's registrations and the backend fallbacks as they are now, with the
    torch functions that read them, bound now (a hand-in that rebinds them later changes
    nothing :func:`dispatcher_changes` calls). About 50 ms: taken once, in the warm parent."""
    import torch

    C = torch._C
    names_of, dump = C._dispatch_get_all_op_names, C._dispatch_dump
    has_fallback, keys = C._dispatch_has_backend_fallback, tuple(C.DispatchKey.__members__.values())
    names = names_of()
    # a digest each (Python's keyed string hash: a change cannot be made to collide unseen)
    kernels = dict(zip(names, map(hash, map(dump, names)), strict=True))
    return names_of, dump, has_fallback, keys, kernels, _fallbacks(has_fallback, keys)


def _fallbacks(has_fallback, keys) -> frozenset:
    found = set()
    for key in keys:
        try:
            if has_fallback(key):
                found.add(key)
        except Exception:  # noqa: BLE001 - an alias key, which holds no fallback of its own
            continue
    return frozenset(found)


def dispatcher_changes(snapshot: tuple) -> list[str]:
    """The operators of ``snapshot`` whose kernels differ now, or that are gone, and the
    dispatch keys that gained a backend fallback, as flag texts (empty when none). About
    50 ms: the runner calls it after the cells and after the last test."""
    names_of, dump, has_fallback, keys, kernels, fallbacks = snapshot
    now = names_of()
    digests = zip(now, map(hash, map(dump, now)), strict=True)
    changed = [name for name, digest in digests if kernels.get(name, digest) != digest]
    changed += sorted(kernels.keys() - set(now))
    found = []
    if changed:
        more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
        shown = ", ".join(changed[:3]) + more
        found.append(
            f"it changed the kernels torch runs for {shown} by a way torch.library's "
            "functions did not see (this cannot be taken back: the tests after it ran with "
            "them)"
        )
    added = _fallbacks(has_fallback, keys) - fallbacks
    if added:
        shown = ", ".join(sorted(str(key).rsplit(".", 1)[-1] for key in added)[:3])
        found.append(
            f"it registered a fallback kernel for every operator at {shown} by a way "
            "torch.library's functions did not see (this cannot be taken back)"
        )
    return found
