"""A dict's version tag (dict_versions.py) changes at every change of the dict, and only then.

The seal and put-back skip a dict whose tag reads as it did when they last found it as
they want it. That is sound only if no change of a dict leaves its tag as it was: these
tests make each kind of change, on each kind of dict the seal reads (a plain dict, a
module's globals, a class's members, an object's attributes, a ctypes type's members),
and check that the tag moved; and that reading a dict never moves it.
"""

from __future__ import annotations

import ctypes
import platform
import sys
import types

import pytest

from coursekit.grading.sandbox import dict_versions

# a 64-bit CPython 3.10 to 3.13 with the GIL (a free-threaded build lays dicts out otherwise)
TAGGED_HERE = (
    platform.python_implementation() == "CPython"
    and (3, 10) <= sys.version_info[:2] <= (3, 13)
    and ctypes.sizeof(ctypes.c_void_p) == 8
    and getattr(sys, "_is_gil_enabled", lambda: True)()
)

needs_tags = pytest.mark.skipif(
    dict_versions.READ is None, reason="this interpreter keeps no version tag to trust"
)


def test_tags_are_used_where_cpython_keeps_them():
    """On a 64-bit CPython 3.10 to 3.13 (this project's), the self-test passes; the seal
    would otherwise fall back to reading every key and value (tested in
    test_harness_seal_quick.py, both ways)."""
    if not TAGGED_HERE:
        pytest.skip("another interpreter: the self-test decides")
    assert dict_versions.READ is not None


class _Holder:
    SIZE = 1


class _Point(ctypes.Structure):
    _fields_ = [("x", ctypes.c_int)]


def _plain():
    return {"a": 1, "b": 2, "c": 3}


def _module_globals():
    module = types.ModuleType("coursekit_dict_versions_test")
    vars(module).update(a=1, b=2, c=3)
    return vars(module), module


def _class_members(kind):
    import gc

    return next(d for d in gc.get_referents(kind.__dict__) if isinstance(d, dict))


# How a cell changes a dict: each a function of (the dict, what owns it).
CHANGES = {
    "an item added": lambda d, owner: d.__setitem__("new", object()),
    "an item set to another object": lambda d, owner: d.__setitem__("a", object()),
    "an item set to an equal object": lambda d, owner: d.__setitem__("a", 1.0),
    "an item deleted": lambda d, owner: d.__delitem__("a"),
    "pop": lambda d, owner: d.pop("a"),
    "popitem": lambda d, owner: d.popitem(),
    "clear": lambda d, owner: d.clear(),
    "update": lambda d, owner: d.update(a=object()),
    "|=": lambda d, owner: d.__ior__({"z": 1}),
    "setdefault, new": lambda d, owner: d.setdefault("new", 1),
    "__init__ again": lambda d, owner: dict.__init__(d, {"w": 1}),
    "cleared and filled again as it was": lambda d, owner: (
        lambda items: (dict.clear(d), dict.update(d, items))
    )(list(d.items())),
    "deleted and put back": lambda d, owner: (lambda v: (d.pop("a"), d.__setitem__("a", v)))(
        d["a"]
    ),
}


def _targets():
    def plain():
        held = _plain()
        return held, None

    def module():
        return _module_globals()

    def members():
        kind = type("Probe", (), {"a": 1, "b": 2, "c": 3})
        return _class_members(kind), kind

    def attributes():
        holder = _Holder()
        holder.a, holder.b, holder.c = 1, 2, 3
        return vars(holder), holder

    return {
        "a plain dict": plain,
        "a module's globals": module,
        "a class's members": members,
        "an object's attributes": attributes,
    }


@needs_tags
@pytest.mark.parametrize("target", sorted(_targets()))
@pytest.mark.parametrize("change", sorted(CHANGES))
def test_every_change_gives_a_new_tag(target, change):
    held, owner = _targets()[target]()
    [view] = dict_versions.views([held])
    before = dict_versions.READ(view)
    CHANGES[change](held, owner)
    assert dict_versions.READ(view) != before


@needs_tags
@pytest.mark.parametrize(
    "how",
    [
        "setattr(owner, 'a', object())",
        "delattr(owner, 'a')",
        "setattr(owner, 'fresh', 1)",
    ],
)
@pytest.mark.parametrize(
    "target", ["a module's globals", "a class's members", "an object's attributes"]
)
def test_an_attribute_set_through_the_owner_gives_a_new_tag(target, how):
    """The way a cell most often changes a module or a class: ``torch.add = f``,
    ``nn.Linear.forward = f``, through the owner, not its dict."""
    held, owner = _targets()[target]()
    [view] = dict_versions.views([held])
    before = dict_versions.READ(view)
    exec(how, {"owner": owner})  # noqa: S102 - the change under test
    assert dict_versions.READ(view) != before


@needs_tags
def test_a_ctypes_types_members_are_tagged_as_a_dicts():
    """A ctypes type keeps its members in a subclass of dict (StgDict): the seal reads its
    tag as a dict's (harness_seal._dict_behind)."""
    held = _class_members(_Point)
    assert type(held) is not dict and isinstance(held, dict)
    [view] = dict_versions.views([held])
    before = dict_versions.READ(view)
    _Point.probe = 1
    try:
        assert dict_versions.READ(view) != before
    finally:
        del _Point.probe


@needs_tags
def test_reading_a_dict_gives_no_new_tag():
    held = _plain()
    [view] = dict_versions.views([held])
    before = dict_versions.READ(view)
    _ = held.get("a"), "b" in held, len(held), list(held), list(held.items()), held.copy()
    held["a"] = held["a"]  # the very object set again: nothing changed
    assert dict_versions.READ(view) == before


@needs_tags
def test_two_dicts_changed_alike_have_different_tags():
    """One counter for every dict: a dict cannot be given back another's tag, or its own
    earlier one, by changes made elsewhere."""
    one, other = {}, {}
    one["k"] = 1
    other["k"] = 1
    [a, b] = dict_versions.views([one, other])
    seen = {dict_versions.READ(a), dict_versions.READ(b)}
    assert len(seen) == 2
    one["k"] = 2
    one["k"] = 1
    assert dict_versions.READ(a) not in seen


def test_where_tags_are_not_trusted_no_view_is_made(monkeypatch):
    monkeypatch.setattr(dict_versions, "READ", None)
    assert dict_versions.views([{}]) is None
