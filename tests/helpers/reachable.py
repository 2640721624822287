"""What an attacker reaches from an object without frames, ``gc`` or ``ctypes``.

The grader's audit hook reports those three; what is left is plain attribute walking. A check
whose instrument is reachable this way from what the student's function is handed can be
rewritten unseen, so tests hold each instrument out of this walk's reach.
"""

from __future__ import annotations

import types

import torch


def reachable_from(root, depth=6, seen=None):
    """Everything an attacker reaches from ``root`` by ``__self__``, ``__closure__``,
    ``__dict__``, ``__defaults__`` and containers (no frames, no gc)."""
    seen = set() if seen is None else seen
    if id(root) in seen or depth == 0 or isinstance(root, types.ModuleType):
        return  # a module (a builtin's __self__) is the interpreter's, not an instrument
    seen.add(id(root))
    yield root
    children = []
    for name in ("__self__", "__func__", "__wrapped__", "__defaults__"):
        children.append(getattr(root, name, None))
    children += [c.cell_contents for c in getattr(root, "__closure__", None) or ()]
    if isinstance(root, (list, tuple, set)):
        children += list(root)
    if isinstance(root, dict):
        children += list(root.values())
    if not isinstance(root, (type, torch.Tensor)) and hasattr(root, "__dict__"):
        children += list(vars(root).values())
    for child in children:
        if child is not None:
            yield from reachable_from(child, depth - 1, seen)
