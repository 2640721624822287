"""The seal's quick comparison (harness_seal._Quick) misses nothing the full one names.

:func:`harness_seal.changes` first asks, in a few C-level passes, whether every sealed entry
and function is as sealed, and names differences only when one is not. These tests change a
sealed module in each way the full comparison names (an entry replaced by an equal object or
removed, a function's code, defaults or keyword defaults swapped, a keyword default changed
in its dict, a closure cell refilled or emptied, in a function whose cells were all full and
in one with an empty cell) and check that each change is named, and that nothing is once it
is undone.
"""

from __future__ import annotations

import sys
import types

import pytest

from coursekit.grading.sandbox import harness_seal

PROBE = "coursekit._seal_quick_probe"


def _probe_module() -> types.ModuleType:
    module = types.ModuleType(PROBE)
    exec(  # noqa: S102 - the probe's own code, sealed below
        "def make():\n"
        "    held = [1]\n"
        "    def closed(x=1, *, y=2):\n"
        "        return held, x, y\n"
        "    return closed\n"
        "def make_empty():\n"
        "    def closed():\n"
        "        return later\n"
        "    later = None\n"
        "    del later\n"
        "    return closed\n"
        "def bare(x):\n"
        "    return x\n"
        "def no_module(x=1, *, y=2):\n"
        "    return x\n"
        "del no_module.__module__\n"
        "def no_doc(x=1, *, y=2):\n"
        "    return x\n"
        "del no_doc.__doc__\n"
        "class Holder:\n"
        "    SIZE = 1\n"
        "    def run(self):\n"
        "        return self.SIZE\n"
        "closed = make()\n"
        "empty = make_empty()\n"
        "LIMIT = 1\n",
        vars(module),
    )
    return module


@pytest.fixture(scope="module")
def sealed():
    module = _probe_module()
    sys.modules[PROBE] = module
    try:
        yield module, harness_seal.seal()
    finally:
        sys.modules.pop(PROBE, None)


def _names(sealed_seal) -> set[str]:
    return set(harness_seal.changes(sealed_seal))


@pytest.fixture(params=["version tags", "item by item"])
def seal_mode(request, sealed):
    """The seal as it compares here (each dict's version tag first, where CPython keeps
    one: dict_versions.py), and as it compares where no tag can be trusted: every key and
    value read."""
    _, seal = sealed
    quick = seal.quick
    kept = quick.space_views, quick.proxy_views, quick.name_views
    if request.param == "version tags":
        if harness_seal._VERSION is None:
            pytest.skip("this CPython keeps no version tag the seal can trust")
        assert None not in kept
    else:
        quick.space_views = quick.proxy_views = quick.name_views = None
    try:
        yield request.param
    finally:
        quick.space_views, quick.proxy_views, quick.name_views = kept


def test_an_untouched_seal_names_nothing_and_is_laid_out_once(sealed):
    module, seal = sealed
    assert seal.quick is not None  # made by seal(), in the warm parent, not per hand-in
    assert module.closed in seal.quick.functions
    assert module.empty in [function for function, _ in seal.quick.others]
    assert _names(seal) == set()


@pytest.mark.parametrize(
    "change, undo, named",
    [
        ("module.LIMIT = 1.0", "module.LIMIT = 1", f"{PROBE}.LIMIT"),  # equal, not the same
        ("del module.LIMIT", "module.LIMIT = 1", f"{PROBE}.LIMIT"),
        (
            "module.closed.__code__ = module.make().__code__.replace(co_consts=(None, 2))",
            "module.closed.__code__ = saved['code']",
            f"the code of {PROBE}.closed",
        ),
        (
            "module.closed.__defaults__ = (1,)",
            "module.closed.__defaults__ = saved['defaults']",
            f"the code of {PROBE}.closed",
        ),
        (
            "module.closed.__kwdefaults__ = {'y': 2}",
            "module.closed.__kwdefaults__ = saved['kwdefaults']",
            f"the code of {PROBE}.closed",
        ),
        (  # in place: the same dict, no audit event
            "module.closed.__kwdefaults__['y'] = 3",
            "module.closed.__kwdefaults__['y'] = saved['y']",
            f"{PROBE}.closed's keyword default y",
        ),
        (
            "del module.closed.__kwdefaults__['y']",
            "module.closed.__kwdefaults__['y'] = saved['y']",
            f"{PROBE}.closed's keyword default y",
        ),
        (
            "module.closed.__closure__[0].cell_contents = [1]",
            "module.closed.__closure__[0].cell_contents = saved['held']",
            f"the code of {PROBE}.closed",
        ),
        (
            "del module.closed.__closure__[0].cell_contents",
            "module.closed.__closure__[0].cell_contents = saved['held']",
            f"the code of {PROBE}.closed",
        ),
        (
            "module.empty.__closure__[0].cell_contents = None",
            "del module.empty.__closure__[0].cell_contents",
            f"the code of {PROBE}.empty",
        ),
        # a class's members (read through its mapping proxy) and names added
        ("module.Holder.run = lambda self: 2", "module.Holder.run = saved['run']", "Holder.run"),
        ("del module.Holder.SIZE", "module.Holder.SIZE = 1", f"{PROBE}.Holder.SIZE"),
        ("module.Holder.extra = 1", "del module.Holder.extra", f"{PROBE}.Holder.extra"),
        ("module.shadow = len", "del module.shadow", f"{PROBE}.shadow"),
    ],
)
def test_each_change_is_named_and_nothing_once_undone(seal_mode, sealed, change, undo, named):
    module, seal = sealed
    saved = {
        "code": module.closed.__code__,
        "defaults": module.closed.__defaults__,
        "kwdefaults": module.closed.__kwdefaults__,
        "held": module.closed.__closure__[0].cell_contents,
        "y": module.closed.__kwdefaults__["y"],
        "run": module.Holder.__dict__["run"],
    }
    assert _names(seal) == set()  # (each dict's tag read as clean: what follows, by its tag)
    scope = {"module": module, "saved": saved}
    exec(change, scope)  # noqa: S102 - the change under test
    try:
        first, second = _names(seal), _names(seal)
        # at every comparison, not only the first: nothing found is taken as the new normal
        assert any(where.endswith(named) for where in first), first
        assert second == first
    finally:
        exec(undo, scope)  # noqa: S102
    assert _names(seal) == set()
    assert _names(seal) == set()


def _blind(how: str) -> dict:
    """Rebind what the comparison calls, as a notebook could; what was there, to put back."""
    import builtins
    import operator

    saved = {}
    if how == "its module":
        names = ("_look", "_entries_unchanged", "_functions_unchanged", "_differs", "_foreign_code")
        for name in names:
            saved[(harness_seal, name)] = getattr(harness_seal, name)
        harness_seal._look = lambda quick: ([], [])
        harness_seal._entries_unchanged = lambda quick, looked=None, odd_classes=None: True
        harness_seal._functions_unchanged = lambda quick: True
        harness_seal._differs = lambda now, then: False
        harness_seal._foreign_code = lambda name, provenance: []
    elif how == "operator":
        saved[(operator, "is_not")] = operator.is_not
        operator.is_not = lambda a, b: False
    elif how == "builtins":
        saved[(builtins, "any")] = builtins.any
        builtins.any = lambda items: False
    return saved


@pytest.mark.parametrize("how", ["its module", "operator", "builtins"])
def test_the_private_copy_the_runner_uses_is_not_blinded_by_rebinding_what_it_calls(sealed, how):
    """runner.py takes the comparison as a private copy before any hand-in code runs: a
    notebook that then rebinds the names the comparison calls still has its change named."""
    from coursekit.grading.sandbox import tampering

    module, seal = sealed
    private = tampering.private_copy(harness_seal)  # as the runner does, before the notebook
    saved = _blind(how)
    module.LIMIT = 2
    try:
        named = set(private.changes(seal))
        blinded_shared = set(harness_seal.changes(seal))
    finally:
        module.LIMIT = 1
        for (owner, name), value in saved.items():
            setattr(owner, name, value)
    assert f"{PROBE}.LIMIT" in named
    if how != "operator":  # (operator.is_not is bound as the module is imported)
        assert f"{PROBE}.LIMIT" not in blinded_shared  # what the shared module misses
    assert _names(seal) == set()


def test_the_runner_compares_with_a_private_copy():
    import inspect

    from coursekit.grading.sandbox import runner

    source = inspect.getsource(runner.serve)
    assert "seal_copy = shared_tampering.private_copy(harness_seal)" in source
    assert "changes, rebound_names = seal_copy.changes, seal_copy.rebound_names" in source


# A function's referents, which the quick comparison reads all at once, leave out what is
# absent: each of these sets a value where there was none, or takes one away, alone or
# with another change that shifts the rest back into line by count.
SHIFTS = {
    "defaults where there were none": ["bare.__defaults__ = (1,)"],
    "keyword defaults where there were none": ["bare.__kwdefaults__ = {'y': 2}"],
    "defaults set, the doc taken away": ["bare.__defaults__ = (1,)", "del bare.__doc__"],
    "defaults set, the annotations taken away": [
        "bare.__defaults__ = (1,)",
        "bare.__annotations__ = None",
    ],
    "keyword defaults set, the doc taken away": [
        "bare.__kwdefaults__ = {'y': 2}",
        "del bare.__doc__",
    ],
    "defaults taken away, a doc object in their place": [
        "closed.__defaults__ = None",
        "closed.__doc__ = closed.__kwdefaults__",
    ],
    "defaults swapped for a tuple the seal holds elsewhere": [
        "closed.__defaults__ = closed.__closure__",
    ],
    # found by review: __module__ and __doc__ take any object, and can be emptied
    "defaults moved into an emptied module": [
        "no_module.__module__ = no_module.__defaults__",
        "no_module.__defaults__ = None",
    ],
    "keyword defaults moved into an emptied module": [
        "no_module.__module__ = no_module.__kwdefaults__",
        "no_module.__kwdefaults__ = None",
    ],
    "keyword defaults moved into an emptied doc": [
        "no_doc.__doc__ = no_doc.__kwdefaults__",
        "no_doc.__kwdefaults__ = None",
    ],
}


EMPTIED = {"no_module": "__module__", "no_doc": "__doc__"}  # what the probe deleted


@pytest.mark.parametrize("lines", SHIFTS.values(), ids=SHIFTS.keys())
def test_a_shift_in_what_a_function_holds_is_seen_by_the_quick_comparison(sealed, lines):
    module, seal = sealed
    function = getattr(module, lines[0].split(".")[0])
    names = ("__defaults__", "__kwdefaults__", "__doc__", "__module__")
    saved = {name: getattr(function, name) for name in names}
    saved["__annotations__"] = function.__annotations__
    assert harness_seal._functions_unchanged(seal.quick)
    for line in lines:
        exec(line, vars(module))  # noqa: S102 - the change under test
    try:
        assert not harness_seal._functions_unchanged(seal.quick)
        code_changed = any("defaults" in line.split("=")[0] for line in lines)
        if code_changed:
            assert f"the code of {PROBE}.{function.__name__}" in _names(seal)
    finally:
        for name, value in saved.items():
            setattr(function, name, value)
        if function.__name__ in EMPTIED:  # as it was sealed: emptied, not None
            delattr(function, EMPTIED[function.__name__])
    assert harness_seal._functions_unchanged(seal.quick)
    assert _names(seal) == set()


def test_the_quick_comparison_reads_no_function_attribute_that_is_audited(sealed):
    """Reading a function's ``__code__`` or defaults raises an audit event, which the
    runner's audit hook sees: thousands a comparison cost some 25 ms a hand-in."""
    _, seal = sealed
    events = []
    calls_before = len(events)

    def count(event, args):
        if event == "object.__getattr__" and events is not None:
            events.append(args[1] if len(args) > 1 else "?")

    sys.addaudithook(count)  # stays for this process: it only counts, and stops below
    try:
        assert harness_seal.changes(seal) == []
        seen = events[calls_before:]
    finally:
        events = None
    assert seen == [], f"the comparison read {len(seen)} audited attributes: {set(seen)}"


class _Provenance:
    """The notebook's code is what a cell compiled; the rest is the libraries'."""

    def is_library(self, code) -> bool:
        return code.co_filename != "<cell>"


def test_a_coursekit_module_since_the_seal_is_read_and_odd_keys_run_nothing(sealed):
    """coursekit's modules imported since the seal are read from ``sys.modules``' keys of
    exactly ``str``, with ``str``'s own methods, again only when its keys changed; a key of
    another class is named, and none of its methods runs (a ``str`` subclass's
    ``startswith``, ``__eq__`` or ``__hash__`` would run the notebook's code inside the
    check)."""
    _, seal = sealed
    ran = []

    class Spy(str):
        def startswith(self, *args):
            ran.append("startswith")
            return False

        def __eq__(self, other):
            ran.append("__eq__")
            return False

        def __hash__(self):
            ran.append("__hash__")
            return 1

    planted = types.ModuleType("coursekit._planted_since_the_seal")
    cell = compile("def planted():\n    return 1\n", "<cell>", "exec")
    exec(cell, vars(planted))  # noqa: S102 - the notebook's code
    assert harness_seal.changes(seal, _Provenance()) == []
    sys.modules[planted.__name__] = planted
    try:
        found = harness_seal.changes(seal, _Provenance())
        assert found == ["coursekit._planted_since_the_seal.planted"]
        assert harness_seal.changes(seal, _Provenance()) == found  # (the keys unchanged)
        dict.__setitem__(sys.modules, Spy("coursekit.spy"), planted)
        ran.clear()
        found = harness_seal.changes(seal, _Provenance())
        ran_in_the_check = list(ran)
    finally:
        for key in [k for k in list(dict.keys(sys.modules)) if type(k) is Spy]:
            dict.pop(sys.modules, key)
        sys.modules.pop(planted.__name__, None)
    assert ran_in_the_check == []
    assert "sys.modules (a key that is not a plain string)" in found
    assert harness_seal.changes(seal, _Provenance()) == []


_PLANTS_A_KEY_IN_A_CLASS = """
import gc
RAN = []
class Grab:
    def __ror__(self, other):  # handed the class's own dict (no gc, no ctypes)
        HELD.append(other)
        return NotImplemented
HELD = []
try:
    vars(Holder) | Grab()
except TypeError:
    pass
members = HELD[0]
sealed_run = members['run']
class Key:
    def __hash__(self):
        return hash('run')
    def __eq__(self, other):  # 'run', while gc is off (inside the seal), and no other time
        RAN.append(other)
        return not gc.isenabled() and other == 'run'
members.pop('__doc__', None)
del members['run']
members[Key()] = sealed_run  # ahead of 'run' in the dict's probe order
members['run'] = lambda self: 2
"""


def test_a_key_of_the_notebooks_in_a_classs_members_is_named_and_never_compared(seal_mode, sealed):
    """Found by review: ``vars(cls) | obj`` hands a class's own dict to ``obj.__ror__``, with
    no audited step. A key hashed as a member's name and put ahead of it was compared with
    the name in the seal's lookups, and its ``__eq__`` answered there with the sealed
    member, for another the cell had put in its place. The seal reads each class's keys in
    C first, and names the class; its members are then read as items."""
    module, seal = sealed
    kept = dict(vars(module.Holder))
    namespace = {"__name__": "__main__", "Holder": module.Holder}
    exec(compile(_PLANTS_A_KEY_IN_A_CLASS, "<cell>", "exec"), namespace)  # noqa: S102
    try:
        if type(vars(module.Holder).get("run")) is not types.FunctionType:
            pytest.skip("this Python hands a class's dict to no __ror__")
        namespace["RAN"].clear()
        first, second = _names(seal), _names(seal)
        ran = list(namespace["RAN"])
    finally:
        members = namespace["HELD"][0] if namespace.get("HELD") else None
        if members is not None:
            members.clear()
            members.update(kept)
        type.__setattr__(module.Holder, "run", kept["run"])  # (type's caches emptied)
    assert ran == [], f"the seal ran the notebook's __eq__ {len(ran)} time(s)"
    assert f"{PROBE}.Holder (a key that is not a plain string)" in first, first
    assert any(where.endswith("Holder.run") for where in first), first
    assert second == first
    assert _names(seal) == set()


def test_a_member_of_a_base_class_written_through_its_dict_is_named():
    """Found by review: the bases of sealed classes were not sealed, an immutable type's
    least of all, and ``vars(TensorBase) | obj`` hands ``obj.__ror__`` its dict:
    ``Tensor.item`` replaced there changed every loss the harness reads, unnamed."""
    import gc

    import torch

    held = []

    class Grab:
        def __ror__(self, other):
            held.append(other)
            return NotImplemented

    with pytest.raises(TypeError):
        vars(torch._C.TensorBase) | Grab()
    members = held[0] if held else None
    if type(members) is not dict:
        pytest.skip("this Python hands a class's dict to no __ror__")
    import os

    from coursekit.grading.sandbox.provenance import Provenance

    record = Provenance((os.path.dirname(os.path.dirname(torch.__file__)) + "/",))
    record.seal()  # (torch's code is the libraries'; this file's is not)
    seal = harness_seal.seal()
    kept = members["item"]
    try:
        members["item"] = lambda self: 0.0
        sys._clear_type_cache()
        assert torch.tensor(3.5).item() == 0.0  # the interpreter runs it
        found = harness_seal.changes(seal, record)
    finally:
        members["item"] = kept
        sys._clear_type_cache()
        gc.collect()
    assert torch.tensor(3.5).item() == 3.5
    assert "torch._C.TensorBase.item" in found, found
    assert harness_seal.changes(seal, record) == []
