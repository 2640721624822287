"""Whether a dict changed, in one read: CPython's own version tag of each dict.

CPython (3.6 to 3.13, PEP 509) gives every dict a 64-bit ``ma_version_tag`` and sets it to a
new value, from one counter for all dicts, at every change of the dict (an item set to
another object, added, deleted; ``clear``, ``update``, ``pop``, ``popitem``,
``setdefault``): a dict whose tag reads as it did has the very keys and values it had.
The seal compares some 1,000 dicts after the cells and after each question's tests
(:mod:`coursekit.grading.sandbox.harness_seal`); comparing their 27,000 keys and values
one by one took most of each comparison, and touched the reference count of every one of
them, so each hand-in's process, forked from the warm parent, copied those pages on its
first comparison. Reading each dict's tag touches nothing but the tag.

The tag is not exposed to Python: it is read at its place in the dict's memory, through a
``ctypes`` view made once per dict, in the warm parent, as the seal is made
(:func:`views`). Only where a self-test at import shows that the field at that place is
the tag (the length beside it is the dict's ``len``, and every kind of change above, on a
plain dict, a module's globals and a class's members, gives a new tag, and a read gives
none) is it used; elsewhere (a CPython that no longer keeps the tag, another layout,
PyPy) :data:`READ` is ``None`` and the seal compares every key and value, as before. A
tag read as unchanged is trusted only as far as the dict's own operations: a write
through ``ctypes`` into a dict's memory passes it by, and is named by the audit hook,
which is where such a write shows (``ctypes`` raises its own events).
"""

from __future__ import annotations

import ctypes
import types

_WORD = ctypes.sizeof(ctypes.c_void_p)
# PyDictObject: the object's header (reference count, type), then ma_used, then the tag
_USED_AT = 2 * _WORD
_TAG_AT = 3 * _WORD
_VALUE = ctypes._SimpleCData.__dict__["value"].__get__  # the C getter itself: no lookup


def _view(held: dict) -> ctypes.c_uint64:
    return ctypes.c_uint64.from_address(id(held) + _TAG_AT)


def _length(held: dict) -> int:
    return ctypes.c_ssize_t.from_address(id(held) + _USED_AT).value


def _changes_give_new_tags() -> bool:
    """The self-test: the field read is ``ma_version_tag`` and it changes at every change."""
    if _WORD != 8 or ctypes.sizeof(ctypes.c_ssize_t) != 8:
        return False
    held: dict = {}
    kept = [held]

    class Holder:
        pass

    module = types.ModuleType("coursekit_dict_versions_probe")
    changes = [
        lambda d: d.__setitem__("a", object()),  # added
        lambda d: d.__setitem__("a", object()),  # set to another object
        lambda d: d.update(b=1, c=2),
        lambda d: d.setdefault("e", 3),
        lambda d: d.__delitem__("b"),
        lambda d: d.pop("c"),
        lambda d: d.popitem(),
        lambda d: d.clear(),
        lambda d: d.update({"x": 1}),
    ]
    for target in (held, vars(module)):
        kept.append(target)
        for change in changes:
            before = _view(target).value
            change(target)
            if _view(target).value == before or _length(target) != len(target):
                return False
            before = _view(target).value
            _ = target.get("x"), len(target), list(target)  # reads: no new tag
            if _view(target).value != before:
                return False
    members = Holder.__dict__  # a class's members: set through the type
    underlying = next(d for d in _referents(members) if type(d) is dict)
    before = _view(underlying).value
    Holder.probe = 1
    if _view(underlying).value == before or _length(underlying) != len(members):
        return False
    one, other = {}, {}
    one["k"] = 1
    other["k"] = 1
    return _view(one).value != _view(other).value  # one counter for all dicts


def _referents(held):
    import gc

    return gc.get_referents(held)


def _usable() -> bool:
    try:
        return _changes_give_new_tags()
    except Exception:  # noqa: BLE001 - any surprise: compare item by item instead
        return False


READ = _VALUE if _usable() else None
"""A dict's tag from its view (``READ(view) -> int``), or ``None`` where tags cannot be
trusted here."""


def views(dicts) -> list | None:
    """A view of each dict's tag, to read with :data:`READ` (the caller keeps the dicts
    alive: a view holds only an address), or ``None`` where tags are not used."""
    if READ is None:
        return None
    return [_view(held) for held in dicts]
