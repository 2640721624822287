"""The harness, sealed: what the grading code in a hand-in's process runs, recorded before any
hand-in code runs, and compared after the cells and after every test.

A question's ``run`` (the harness) calls the student's function inside the hand-in's own
process, so a hand-in can change what the harness runs. :func:`seal` records, in the warm
parent (once, before any hand-in is forked), every object the harness can reach
(:mod:`coursekit.grading.sandbox.seal_reach` says what: coursekit's modules whole, torch's
and a few other libraries' callables and classes, what their functions read as they run,
tables they consult) and the import hooks (``sys.meta_path``, ``sys.path_hooks``).
:func:`changes` names each difference: a function replaced, its ``__code__`` or defaults
swapped, a method or a question's class replaced, a name added where it shadows one, a
table's entry changed, an import hook added. In coursekit and the builtins every change
counts; in torch, numpy and the standard library a replacement counts unless its code is
all library code (:mod:`coursekit.grading.sandbox.provenance`: decided from code objects and
file text, never from a file name a hand-in chose) and it wraps what it replaced
(:func:`library_value`), since libraries patch torch too. Python's own additions (a module's
warning registry, a class's ``__slotnames__`` that ``copy`` caches, an import, coursekit's
lazy exports) are not changes. The seal holds every object it recorded, so no replacement
can take a recorded one's address.

The comparison stays in this one module, over 400 lines, on purpose: the hand-in's process
runs it from a private copy of this module's globals (``runner.py``), and a helper module
of its own would be called through the shared one, where a notebook can rebind its names.
"""

from __future__ import annotations

import gc
import itertools
import operator
import sys
import types
from dataclasses import dataclass, field
from itertools import repeat

from coursekit.grading.sandbox import dict_versions, seal_reach
from coursekit.grading.sandbox.seal_reach import (
    _MISSING,
    Seal,
)


@dataclass
class _Quick:
    """The seal's entries and functions as flat tuples, so that :func:`changes` can tell that
    none differs in a few C-level passes (``map`` and ``operator.is_not``) rather than one
    Python step per entry: the check runs after the cells and after each question's tests,
    over some 16,000 entries in some 800 namespaces and 3,000 functions, in every hand-in's
    process. It decides only "all identical"; any difference is named by the full
    comparison, as before.

    The plain dicts that hold entries (modules' globals, registries) are compared whole,
    with what each held at the last look that found it clean (:func:`_look`): the very
    keys and values, in order, so that no name is looked up in a dict before it is known
    to hold only keys that are exactly ``str``. Entries held in classes' mapping proxies
    are read in one pass, through ``MappingProxyType.get`` itself (the storage, whatever a
    subclass would override); entries of any other mapping, by the namespace's own
    ``get``, one pass per namespace."""

    loose: tuple  # (namespaces, keys, values) of entries in a plain dict not in spaces
    proxies: tuple  # (namespaces, keys, values): one item per entry in a mapping proxy
    groups: tuple  # (namespace, keys, values) for each namespace of another type
    functions: tuple  # the sealed functions
    referents: tuple  # ... what they hold, all in one (see :func:`_functions_unchanged`)
    modules: tuple  # ... their __module__ and __doc__, each read on its own
    docs: tuple
    cells: tuple  # the closure cells of those whose every cell was full when sealed
    contents: tuple  # ... what each held
    others: tuple  # (function, contents) of those with a cell empty when sealed
    attribute_dicts: tuple  # the sealed functions' __dict__s
    attribute_counts: tuple  # ... and how many attributes each had
    module_keys: tuple = ()  # sys.modules' keys at the last look (_new_coursekit_modules)
    new_modules: list = field(default_factory=list)  # coursekit's imported since the seal
    classes: tuple = ()  # the sealed classes (whose members are sealed)
    metaclasses: tuple = ()  # ... each one's class
    mro_lengths: list = field(default_factory=list)  # ... its MRO's length
    mros: tuple = ()  # ... and all their MROs, one after another
    spaces: tuple = ()  # every plain dict the comparison looks names up in (_look)
    space_labels: tuple = ()  # ... how a finding names each
    space_entries: tuple = ()  # ... the (keys, values) of the entries sealed in each
    space_lengths: list = field(default_factory=list)  # ... each one's length, keys and
    space_keys: list = field(default_factory=list)  # values at the last look that found
    space_values: list = field(default_factory=list)  # it clean (-1: never clean)
    space_views: list | None = None  # a view of each one's version tag (dict_versions.py)
    space_tags: list = field(default_factory=list)  # ... its tag at that look (-1: never)
    proxy_views: list | None = None  # the tag of each class's dict behind ``proxies``,
    proxy_tags: list = field(default_factory=list)  # when all its entries were last as sealed
    name_views: list | None = None  # the tag of the dict behind each of ``Seal.names``
    name_tags: list = field(default_factory=list)  # when it last held its names only
    class_dicts: tuple = ()  # the dict behind each sealed class's mapping proxy, once each,
    class_proxies: tuple = ()  # ... the proxies that show it, how a finding names it,
    class_labels: tuple = ()  # a view of its tag, and its tag when last found to hold
    class_views: list | None = None  # only keys that are exactly ``str`` (_odd_classes)
    class_tags: list = field(default_factory=list)


def _dict_behind(namespace) -> dict | None:
    """The plain dict a namespace is, or the dict a class's mapping proxy shows (a ctypes
    type's is a subclass of dict, whose storage and tag are a dict's), or None."""
    if type(namespace) is dict:
        return namespace
    if type(namespace) is types.MappingProxyType:
        behind = gc.get_referents(namespace)
        if len(behind) == 1 and isinstance(behind[0], dict):
            return behind[0]
    return None


def _flat(entries: list) -> tuple:
    """(namespaces, keys, values) of ``(namespace, key, value)`` entries, as three tuples."""
    return tuple(tuple(column) for column in zip(*entries, strict=True)) or ((), (), ())


def _quick(found: Seal) -> _Quick:
    dicts, proxies, by_namespace = {}, [], {}
    for _, namespace, key, value, _ in found.entries:
        if type(namespace) is dict:
            dicts.setdefault(id(namespace), []).append((namespace, key, value))
        elif type(namespace) is types.MappingProxyType:
            proxies.append((namespace, key, value))
        else:
            group = by_namespace.setdefault(id(namespace), (namespace, [], []))
            group[1].append(key)
            group[2].append(value)
    full_cells, contents, others = [], [], []
    for _, function, _, _, _, cells in found.functions:
        closure = function.__closure__ or ()
        if any(item is _MISSING for item in cells) or len(closure) != len(cells):
            others.append((function, cells))
        else:
            full_cells += closure
            contents += cells
    spaces, labels = {id(_SYS_DICT): _SYS_DICT, id(_MODULES): _MODULES}, {}
    labels.update({id(_SYS_DICT): "sys", id(_MODULES): "sys.modules"})
    named = [(where, where, namespace) for where, namespace, *_ in found.names]  # its name
    for where, namespace, *_ in found.entries:  # a name in it: what holds the name
        at = where.rfind("[") if where.endswith("]") else where.rfind(".")
        named.append((where[:at] if at > 0 else where, where, namespace))
    used = set(labels.values())
    for label, where, namespace in named:
        if type(namespace) is dict and id(namespace) not in spaces:
            spaces[id(namespace)] = namespace
            if label in used or " " in where:  # (a default's or a cell's place: in words)
                label = f"the names beside {where}"  # (each dict named once: no two alike)
            used.add(label)
            labels[id(namespace)] = label
    for _, table, _ in found.tables:
        spaces.pop(id(table), None)  # keyed by classes: compared by identity (_table_changes)
    loose = [e for key, held in dicts.items() if key not in spaces for e in held]
    entries = [_flat(dicts.get(key, []))[1:] for key in spaces]
    views = dict_versions.views(spaces.values())  # (read first: a later change is seen)
    tags = list(map(_VERSION, views)) if views is not None else []
    clean = [not _odd(held) for held in spaces.values()]  # (all, in the warm parent)
    classes = [owner for *_, owner in found.names if owner is not None]
    functions = [entry[1] for entry in found.functions]
    for function in functions:  # made now if missing, so no later read adds one (below)
        function.__annotations__  # noqa: B018
    behind_proxies = {id(d): d for d in map(_dict_behind, {id(p): p for p, *_ in proxies}.values())}
    proxy_views = dict_versions.views(behind_proxies.values())
    if None in behind_proxies.values():  # (no class's dict found behind one: not tagged)
        proxy_views = None
    classes_by_dict: dict = {}  # id(dict behind): (dict, [proxies], label)
    shown = [(where, namespace) for where, namespace, *_ in found.names]
    shown += [(where.rpartition(".")[0] or where, ns) for where, ns, *_ in found.entries]
    for label, namespace in shown:
        behind = _dict_behind(namespace) if type(namespace) is types.MappingProxyType else None
        if behind is not None:
            held = classes_by_dict.setdefault(id(behind), (behind, [], label))
            if not any(proxy is namespace for proxy in held[1]):
                held[1].append(namespace)
    class_dicts = tuple(held[0] for held in classes_by_dict.values())
    behind_names = [_dict_behind(namespace) for _, namespace, *_ in found.names]
    name_views = None
    if None not in behind_names:  # (the sealed names: read whole, never by tag, else)
        name_views = dict_versions.views(behind_names)
    class_views = dict_versions.views(class_dicts)
    return _Quick(
        class_dicts=class_dicts,
        class_proxies=tuple(tuple(held[1]) for held in classes_by_dict.values()),
        class_labels=tuple(held[2] for held in classes_by_dict.values()),
        class_views=class_views,
        class_tags=[-1] * len(class_dicts),  # (-1: never a tag) taken at the first look
        proxy_views=proxy_views,
        proxy_tags=[-1] * len(proxy_views or ()),  # (-1: never a tag) taken at the first look
        name_views=name_views,
        name_tags=[-1] * len(name_views or ()),
        loose=_flat(loose),
        proxies=_flat(proxies),
        groups=tuple(
            (ns, tuple(keys), tuple(values)) for ns, keys, values in by_namespace.values()
        ),
        functions=tuple(functions),
        referents=tuple(_REFERENTS(*functions)),
        modules=tuple(map(_MODULE, functions)),
        docs=tuple(map(_DOC, functions)),
        cells=tuple(full_cells),
        contents=tuple(contents),
        others=tuple(others),
        attribute_dicts=tuple(entry[1] for entry in found.function_attributes),
        attribute_counts=tuple(entry[2] for entry in found.function_attributes),
        classes=tuple(classes),
        metaclasses=tuple(map(_TYPE, classes)),
        mro_lengths=[len(_MRO(kind)) for kind in classes],
        mros=tuple(_CHAIN(map(_MRO, classes))),
        spaces=tuple(spaces.values()),
        space_labels=tuple(labels[key] for key in spaces),
        space_entries=tuple(entries),
        space_lengths=[
            len(held) if ok else -1 for held, ok in zip(spaces.values(), clean, strict=True)
        ],
        space_keys=[tuple(dict.keys(held)) for held in spaces.values()],
        space_values=[tuple(dict.values(held)) for held in spaces.values()],
        space_views=views,
        space_tags=[tag if ok else -1 for tag, ok in zip(tags, clean, strict=False)],
    )


# What the comparison calls, bound here as the module is imported (in the warm parent, before
# any hand-in exists): the hand-in's process runs :func:`changes` from a private copy of this
# module's globals and of the builtins (runner.py), so a notebook that later replaces
# ``operator.is_not``, ``itertools.repeat``, ``types.CodeType``, ``sys.modules`` or a name
# in this module does not change what the check compares with.
_IS_NOT = operator.is_not
_VERSION = dict_versions.READ  # a dict's version tag, read in C (None: not trusted here)
_IS_NOT_EQUAL = operator.ne
_REPEAT = repeat
_DICT_GET = dict.get
_PROXY_GET = types.MappingProxyType.get
_CODE_TYPE = types.CodeType
_MODULES = sys.modules
_REFERENTS = gc.get_referents
_GC_ENABLED, _GC_DISABLE, _GC_ENABLE = gc.isenabled, gc.disable, gc.enable
_MODULE = operator.attrgetter("__module__")  # neither read raises an audit event
_DOC = operator.attrgetter("__doc__")
_CONTENTS = operator.attrgetter("cell_contents")
_STARTS = str.startswith
_SYS_DICT = vars(sys)
_TYPE = type
_CHAIN = itertools.chain.from_iterable
_ALWAYS_STR = repeat(str)
_FUNCTION = types.FunctionType
_MODULE_TYPE = types.ModuleType
_CODE_OF = types.FunctionType.__dict__["__code__"].__get__
_MODULE_DICT = types.ModuleType.__dict__["__dict__"].__get__
_WRAPPED_FUNCTION = tuple(
    (kind, kind.__dict__["__func__"].__get__)
    for kind in (staticmethod, classmethod, types.MethodType)
)


def _places_changed(tags: list, last: list) -> list[int]:
    """The places where two lists of version tags (ints) differ: none, in one C-level
    comparison, where none does."""
    if tags == last:
        return []
    return [at for at, (now, then) in enumerate(zip(tags, last, strict=True)) if now != then]


def _differs(now, then) -> bool:
    """Whether any item of ``now`` is not the very object at its place in ``then``."""
    return any(map(_IS_NOT, now, then))


def _odd(held) -> bool:
    """Whether ``held`` (a plain dict) has a key that is not exactly a ``str``: read in C,
    no key's method runs."""
    return any(map(_IS_NOT, map(_TYPE, iter(held)), _ALWAYS_STR))


def _look(quick: _Quick) -> tuple[list[int], list[int]]:
    """``(odd, changed)``: the places in :attr:`_Quick.spaces` of the dicts that hold a key
    that is not exactly a ``str``, and of those where a sealed entry no longer holds the
    object sealed.

    A cell can put such a key in a module's globals, ``sys.modules`` or an object's
    ``__dict__`` without any audited step, and one whose hash is a name's is compared with
    that name when it is looked up: its ``__eq__`` would run inside the comparison (found
    by review: it answered with the very function the seal holds, for one the cell had
    patched). So no name is looked up in a dict before its keys are read, in C: first all
    dicts at once, against what each held at the last look that found it clean (the very
    keys and values, in order: some 40,000 of each, under a millisecond); then, where one
    differs, that dict alone: named if it holds such a key, else its sealed entries looked
    up. One whose entries are all as sealed is clean again, and what it holds now is what
    the next look compares with. (Classes' dicts: :func:`_odd_classes`.)"""
    spaces, tags = quick.spaces, None
    if quick.space_views is not None:  # each dict's version tag: one read each
        tags = list(map(_VERSION, quick.space_views))
        places = _places_changed(tags, quick.space_tags)
        if not places:
            return [], []
    elif (
        list(map(len, spaces)) == quick.space_lengths
        and not _differs(_CHAIN(map(dict.keys, spaces)), _CHAIN(quick.space_keys))
        and not _differs(_CHAIN(map(dict.values, spaces)), _CHAIN(quick.space_values))
    ):
        return [], []
    else:
        places = range(len(spaces))
    odd, changed = [], []
    for at in places:
        held = spaces[at]
        if (
            len(held) == quick.space_lengths[at]
            and not _differs(dict.keys(held), quick.space_keys[at])
            and not _differs(dict.values(held), quick.space_values[at])
        ):
            if tags is not None:  # changed and changed back: as it was
                quick.space_tags[at] = tags[at]
            continue
        if _odd(held):
            odd.append(at)
            continue
        keys, values = quick.space_entries[at] or ((), ())
        if _differs(map(_DICT_GET, _REPEAT(held), keys, _REPEAT(_MISSING)), values):
            changed.append(at)
            continue
        quick.space_keys[at] = tuple(dict.keys(held))  # clean: the next look's baseline
        quick.space_values[at] = tuple(dict.values(held))
        quick.space_lengths[at] = len(quick.space_keys[at])
        if tags is not None:  # (the tag read before these: a change since is seen next)
            quick.space_tags[at] = tags[at]
    return odd, changed


def _odd_classes(quick: _Quick) -> list[int]:
    """The places in :attr:`_Quick.class_dicts` of the classes' dicts that hold a key that
    is not exactly a ``str``, read in C before anything is looked up in them: a class's
    real dict is handed to a notebook's ``__ror__`` by ``vars(cls) | obj`` (no audited
    step; found by review), and such a key, hashed as a member's name and put ahead of
    it, ran its ``__eq__`` in the seal's lookups and answered with the sealed member. A
    dict is read only where its version tag moved since it was last found clean."""
    views, last = quick.class_views, quick.class_tags
    tags = list(map(_VERSION, views)) if views is not None else None
    places = _places_changed(tags, last) if tags is not None else range(len(quick.class_dicts))
    odd = []
    for at in places:
        if _odd(quick.class_dicts[at]):
            odd.append(at)
        elif tags is not None:  # (the tag read before the keys: a change since is seen next)
            last[at] = tags[at]
    return odd


def _get(held, key, default=None):
    """``held.get(key, default)`` for a plain dict that may hold keys of the notebook's:
    looked up where every key is exactly a ``str``, else read item by item, each key
    compared only if it is exactly a ``str`` (nothing of the notebook's runs)."""
    if _TYPE(held) is not dict:
        return default
    if not _odd(held):
        return _DICT_GET(held, key, default)
    for name, value in list(dict.items(held)):
        if _TYPE(name) is str and name == key:
            return value
    return default


def _entries_unchanged(
    quick: _Quick, looked: tuple | None = None, odd_classes: list | None = None
) -> bool:
    """Whether every sealed entry still holds the very object it held when sealed (and no
    dict that holds one has a key of the notebook's): ``looked`` and ``odd_classes`` are
    :func:`_look`'s and :func:`_odd_classes`' answers, where the caller has them."""
    odd, changed = looked if looked is not None else _look(quick)
    if odd_classes is None:
        odd_classes = _odd_classes(quick)
    if odd or changed or odd_classes:
        return False
    namespaces, keys, values = quick.loose
    if _differs(map(_DICT_GET, namespaces, keys, _REPEAT(_MISSING)), values):
        return False
    # the classes' entries: not read where no class's dict has changed since they were last
    # read as sealed (each dict's version tag, read first: a change after it is read next)
    tags = list(map(_VERSION, quick.proxy_views)) if quick.proxy_views is not None else None
    if tags is None or tags != quick.proxy_tags:
        namespaces, keys, values = quick.proxies
        if _differs(map(_PROXY_GET, namespaces, keys, _REPEAT(_MISSING)), values):
            return False
        if tags is not None:
            quick.proxy_tags = tags
    for namespace, keys, values in quick.groups:
        if _differs(map(namespace.get, keys, _REPEAT(_MISSING)), values):
            return False
    return True


def _functions_unchanged(quick: _Quick) -> bool:
    """Whether every sealed function still has the code, defaults, keyword defaults and
    closure contents it had when sealed (a closure tuple cannot be replaced: it is read-only,
    and new ``__code__`` must have as many free variables).

    The first three are read all at once, as what the functions hold, in one call of
    ``gc.get_referents``: reading ``__code__`` or a default raises an audit event, and
    thousands of those, each through the runner's audit hook, cost more than the
    comparison. A function's referents come in a fixed order (code, globals, builtins,
    module, defaults, keyword defaults, doc, name, attributes, closure, annotations,
    qualified name), absent ones left out. A replaced value puts another object at its
    place. A value set where there was none, or taken away, shifts the places after it by
    one; for the whole to line up again, the object moved into a place would have to be
    the very one the seal holds there. ``__module__`` and ``__doc__`` take any object and
    can be emptied, so they are compared one by one as well (a defaults tuple moved into
    an empty ``__module__``, with the defaults taken away, would otherwise line up); what
    is left to move into the places of the defaults is a string (a name) or a dict, never
    the tuple of defaults there was. A function cannot make up for another's shift: each
    one's list starts with its code, which has to stay where it was.
    """
    functions = quick.functions
    now = _REFERENTS(*functions)
    if (
        len(now) != len(quick.referents)
        or _differs(now, quick.referents)
        or _differs(map(_MODULE, functions), quick.modules)
        or _differs(map(_DOC, functions), quick.docs)
    ):
        return False
    try:
        if _differs(map(_CONTENTS, quick.cells), quick.contents):
            return False
    except ValueError:  # a cell emptied since
        return False
    return not any(_changed_cells(function, cells) for function, cells in quick.others)


def seal() -> Seal:
    """Record what the harness can reach (see the module's docstring): made once, in the warm
    parent, by :mod:`coursekit.grading.sandbox.seal_reach`."""
    found = seal_reach.record(Seal())
    found.quick = _quick(found)
    changes(found)  # (nothing differs yet): each dict's tag read as all is sealed, here, once
    return found


def changes(sealed: Seal, provenance=None) -> list[str]:
    """Where the harness differs from ``sealed`` (see the module's docstring). No
    collection runs meanwhile (:func:`_without_collection`)."""
    return _without_collection(_changes, sealed, provenance)


def _without_collection(work, *args):
    """``work(*args)`` with gc off, left on or off as it was found: a collection in the
    middle of a comparison would finalize a cycle of the notebook's, running its
    ``__del__`` there (found by review)."""
    collecting = _GC_ENABLED()
    _GC_DISABLE()
    try:
        return work(*args)
    finally:
        if collecting:
            _GC_ENABLE()


def _changes(sealed: Seal, provenance) -> list[str]:
    found = []
    quick = sealed.quick or _quick(sealed)
    looked = _look(quick)  # first: the rest looks names up in these dicts
    odd, odd_classes = looked[0], _odd_classes(quick)
    readable = _readable(quick, odd, odd_classes)
    found += [f"{quick.space_labels[at]} (a key that is not a plain string)" for at in odd]
    found += [f"{quick.class_labels[at]} (a key that is not a plain string)" for at in odd_classes]
    if not _entries_unchanged(quick, looked, odd_classes):
        for where, namespace, key, value, strict in sealed.entries:
            now = _READ(readable, namespace).get(key, _MISSING)
            if now is not value and (
                strict or not library_value(now, provenance, key, value, where)
            ):
                found.append(where)
    if not _functions_unchanged(quick):
        for where, function, code, defaults, kwdefaults, cells in sealed.functions:
            if (
                function.__code__ is not code
                or function.__defaults__ is not defaults
                or function.__kwdefaults__ is not kwdefaults
                or _changed_cells(function, cells)
            ):
                found.append(where)
    for where, holder, cls in sealed.classes:
        if type(holder) is not cls:
            found.append(where)
    found += _bases_changes(sealed, quick)
    for where, holder, slot, attributes in sealed.instance_dicts:
        try:  # a question's attributes replaced whole (found by review): read in C
            now = slot.__get__(holder, _TYPE(holder))
        except (AttributeError, TypeError):
            now = None
        if now is not attributes:
            found.append(where)
    for where, table, contents in sealed.tables:
        found += _table_changes(where, table, contents)
    if any(map(_IS_NOT_EQUAL, map(len, quick.attribute_dicts), quick.attribute_counts)) or (
        _differs(map(_FUNCTION_DICT, quick.functions), quick.attribute_dicts)
    ):
        for (where, attributes, count), (_, function, *_) in zip(
            sealed.function_attributes, sealed.functions, strict=False
        ):
            if len(attributes) != count or _FUNCTION_DICT(function) is not attributes:
                found.append(f"{where} (an attribute added, or the whole of it replaced)")
    views, last = quick.name_views, quick.name_tags
    tags = list(map(_VERSION, views)) if views is not None else None
    for at in _places_changed(tags, last) if tags is not None else range(len(sealed.names)):
        where, held, names, strict, owner = sealed.names[at]
        namespace = _READ(readable, held)  # (one with odd keys: its names only)
        if len(namespace) == len(names) and namespace.keys() == names:
            if tags is not None and namespace is held:  # its names only: unread till changed
                last[at] = tags[at]
            continue
        for added in sorted(namespace.keys() - names, key=str):
            now = namespace.get(added)
            if _expected_addition(namespace, added):
                continue
            if strict or not _library_addition(now, provenance, added, where, owner, sealed):
                found.append(f"{where}.{added}")
    for key, hooks in sealed.hooks.items():
        now = _get(_SYS_DICT, key)
        if _TYPE(now) is not list:  # replaced by an object of the notebook's: not iterated
            found.append(f"sys.{key}")
            continue
        now = tuple(now)
        if len(now) != len(hooks) or any(a is not b for a, b in zip(now, hooks, strict=False)):
            added = [h for h in now if not any(h is v for v in hooks)]
            if len(now) < len(hooks) or not all(library_hook(h, provenance) for h in added):
                found.append(f"sys.{key}")
    if provenance is not None:
        for name in _new_coursekit_modules(quick, sealed.modules):
            found += _foreign_code(name, provenance)
    return found


def _bases_changes(sealed: Seal, quick: _Quick) -> list[str]:
    """Sealed classes whose bases (so their MRO) or metaclass changed: ``__bases__`` set
    through a library's frame (``unittest.mock.patch.object``) escaped the audit hook, and
    puts another class's methods in the place of those sealed (found by review). Read in
    C: ``type``'s own slots, compared by identity."""
    classes = quick.classes
    if (
        not _differs(map(_TYPE, classes), quick.metaclasses)
        and list(map(len, map(_MRO, classes))) == quick.mro_lengths
        and not _differs(_CHAIN(map(_MRO, classes)), quick.mros)
    ):
        return []
    where_of = {id(owner): where for where, *_, owner in sealed.names if owner is not None}
    found, at = [], 0
    for kind, meta, length in zip(classes, quick.metaclasses, quick.mro_lengths, strict=True):
        then = quick.mros[at : at + length]
        at += length
        if _TYPE(kind) is not meta or len(_MRO(kind)) != length or _differs(_MRO(kind), then):
            found.append(f"{where_of.get(id(kind), '?')}.__bases__")
    return found


def _new_coursekit_modules(quick: _Quick, sealed_names: frozenset) -> list[str]:
    """coursekit's modules imported since the seal, by name: read again from ``sys.modules``
    only when its keys are not the very ones of the last look (checked in C). Only keys of
    exactly ``str`` are read, with ``str``'s own methods; another key is never hashed,
    compared or asked for its methods (:func:`changes` names it: :func:`_look`)."""
    keys = tuple(dict.keys(_MODULES))
    last = quick.module_keys
    if len(keys) != len(last) or _differs(keys, last):
        quick.module_keys = keys
        quick.new_modules = [
            name
            for name in keys
            if type(name) is str
            and (name == "coursekit" or _STARTS(name, "coursekit."))
            and name not in sealed_names
        ]
    return quick.new_modules


def rebound_names(sealed: Seal, provenance=None) -> list[tuple]:
    """Of :func:`changes`' findings, the names rebound in a plain dict (a module's globals):
    ``(where, namespace, key, sealed value, whether the name was absent)`` for each, which a
    memory test's fork puts back before it measures (``runner.py``). No collection runs
    meanwhile, as in :func:`changes`."""
    return _without_collection(_rebound_names, sealed, provenance)


def _rebound_names(sealed: Seal, provenance) -> list[tuple]:
    quick = sealed.quick or _quick(sealed)
    looked = _look(quick)  # first: no name is looked up in odd ones (named by changes())
    odd_classes = _odd_classes(quick)
    if _entries_unchanged(quick, looked, odd_classes):
        return []
    found = []
    readable = _readable(quick, looked[0], odd_classes)
    for where, namespace, key, value, strict in sealed.entries:
        if type(namespace) is not dict:
            continue
        now = _READ(readable, namespace).get(key, _MISSING)
        if now is not value and (strict or not library_value(now, provenance, key, value, where)):
            found.append((where, namespace, key, value, value is _MISSING))
    return found


def _readable(quick: _Quick, odd: list[int], odd_classes: list[int] = ()) -> dict:
    """For each dict among ``odd`` (by its id), and each class's among ``odd_classes`` (by
    the id of each mapping proxy that shows it): a copy of its items whose keys are exactly
    ``str``, built in C, where its sealed names are looked up instead (a rebinding there
    is still named, and still put back for a memory test: :func:`put_back_names`)."""
    readable = {id(quick.spaces[at]): _names_of(quick.spaces[at]) for at in odd}
    for at in odd_classes:
        names = _names_of(quick.class_dicts[at])
        readable.update((id(proxy), names) for proxy in quick.class_proxies[at])
    return readable


def _names_of(held) -> dict:
    """A copy of ``held``'s items (a dict, or a class's mapping proxy) whose keys are
    exactly ``str`` (no key's method runs)."""
    items = list(dict.items(held)) if _TYPE(held) is dict else list(held.items())
    return {k: v for k, v in items if _TYPE(k) is str}


def _READ(readable: dict, namespace):  # noqa: N802 - reads like a lookup table
    """Where ``namespace``'s names are looked up: its copy of exact ``str`` keys, if it
    has odd ones, else itself."""
    return readable.get(id(namespace), namespace)


def put_back_names(rebound: list[tuple], held: list) -> None:
    """Put names :func:`rebound_names` found back as sealed (in a memory test's fork,
    before it measures). A dict that holds a key that is not exactly a ``str`` is first
    made of names only (its items held in ``held``, so nothing is finalized here): a write
    compares the name with every key of its hash, running a key's ``__eq__``."""
    for _, namespace, key, value, absent in rebound:
        if _odd(namespace):
            items = list(dict.items(namespace))
            held.append(items)
            dict.clear(namespace)
            dict.update(namespace, [(k, v) for k, v in items if _TYPE(k) is str])
        if absent:
            held.append(namespace.pop(key, None))
        else:
            held.append(namespace.get(key))
            namespace[key] = value


def _table_changes(where: str, table: dict, contents: dict) -> list[str]:
    """An entry of a table replaced or removed, or one added for a class or dtype of torch's,
    numpy's or coursekit's (``copy._deepcopy_dispatch[nn.Parameter] = ...``: what copying a
    model does). A library may add its own classes (``copyreg.pickle`` on import). Keys are
    compared by identity, never looked up: a key of the notebook's whose hash is a sealed
    class's would be compared with it, running its ``__eq__``. An added key's class is read
    past any metaclass of the notebook's (no notebook code runs here)."""
    if (
        len(table) == len(contents)
        and not _differs(dict.keys(table), dict.keys(contents))
        and not _differs(dict.values(table), dict.values(contents))
    ):
        return []  # the very keys and values, in their order (the common case, read in C)
    now = {id(key): value for key, value in list(dict.items(table))}  # (ints: compared in C)
    found = [
        f"{where}[{key!r}]"
        for key, value in contents.items()
        if _DICT_GET(now, id(key), _MISSING) is not value
    ]
    known = {id(key) for key in contents}
    for key in list(table):  # by identity: a key of the notebook's is never hashed here
        if id(key) in known:
            continue
        owner = key if issubclass(_TYPE(key), type) else _TYPE(key)
        module, name = _class_names(owner)
        if module.split(".")[0] in _GRADED_PACKAGES:
            found.append(f"{where}[{module}.{name}]")
    return found


def _class_names(kind: type) -> tuple[str, str]:
    """A class's ``__module__`` and ``__qualname__``, as exact ``str`` ("?" for anything
    else), read without running any code of its making: the module from its own members,
    item by item (``type``'s getset would look the name up in them, where a key of the
    notebook's could be compared with it; a metaclass's property would run), or from its
    C name where it is a static type; the qualified name from its C slot."""
    module = "?"
    if _TYPE_FLAGS(kind) & _HEAP_TYPE:
        for key, value in list(_CLASS_DICT(kind).items()):
            if _TYPE(key) is str and key == "__module__":
                module = value
                break
    else:  # a static type: its __module__ comes from its C name, not from a dict
        module = _TYPE_MODULE(kind)
    name = _TYPE_QUALNAME(kind)
    return (
        module if _TYPE(module) is str else "?",
        name if _TYPE(name) is str else "?",
    )


_TYPE_MODULE = type.__dict__["__module__"].__get__
_TYPE_QUALNAME = type.__dict__["__qualname__"].__get__
_TYPE_FLAGS = type.__dict__["__flags__"].__get__
_HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE
_GRADED_PACKAGES = ("torch", "numpy", "coursekit")


def _changed_cells(function, cells: tuple) -> bool:
    closure = function.__closure__ or ()
    if len(closure) != len(cells):
        return True
    for cell, value in zip(closure, cells, strict=True):
        try:
            if cell.cell_contents is not value:
                return True
        except ValueError:
            if value is not _MISSING:
                return True
    return False


def library_value(value, provenance, key=None, original=_MISSING, where=None) -> bool:
    """Could this replacement (of ``original``, under ``key``, at ``where``) in torch or the
    standard library be a library's own doing? Libraries patch torch too (Lightning wraps
    ``torch.compile`` on import), so a value all of whose code is the libraries' own can pass,
    a module too: judged by :meth:`coursekit.grading.sandbox.provenance.Provenance
    .is_library_callable` (code, globals, closure, defaults, a partial's arguments, a bound
    ``__self__``, wrapped callables), strictly: a library function with other defaults, or a
    ``partial`` with arguments bound, is not the library's. Data where there was a function
    is not either. Nor is another library function put in its place
    (``torch.equal = torch.is_same_size``): see :func:`_stands_for`."""
    if issubclass(_TYPE(value), _MODULE_TYPE):  # (isinstance would ask it for __class__)
        return True
    if provenance is None:
        return True
    return (  # its provenance first: only then are its attributes read (no notebook code runs)
        callable(value)
        and provenance.is_library_callable(value, strict=True)
        and _stands_for(value, key, original, where.split(".")[0] if where else None)
    )


def _library_addition(value, provenance, name, where, owner, sealed) -> bool:
    """A name added to a library's class (``owner``) or module: in a class, where it shadows
    what a base class has, judged as a replacement of that, as it is or as it was sealed
    (torch.compile wraps ``AdamW._init_group`` over ``Adam``'s, then ``Adam``'s own); where it
    shadows nothing (a method transformers adds to ``nn.Module``), any library callable, but
    for a dunder, which Python itself may look up: a library function of that name."""
    if owner is None:
        return library_value(value, provenance, name, _MISSING, where)
    for base in _MRO(owner)[1:]:
        # read as items, exact str only: a base's dict can hold a key of the notebook's,
        # which a lookup would compare with the name (found by review: in object's dict)
        now = _names_of(_CLASS_DICT(base)).get(name, _MISSING)
        then = sealed.members.get((id(base), name), _MISSING)
        if now is not _MISSING or then is not _MISSING:
            return any(
                library_value(value, provenance, name, inherited, where)
                for inherited in (now, then)
                if inherited is not _MISSING
            )
    if not (name.startswith("__") and name.endswith("__")):
        # a new method (transformers adds Logger.warning_once, an lru_cache): nothing called
        # it before, so any library callable will do
        return provenance is None or provenance.is_library_callable(value, strict=True)
    return library_value(value, provenance, name)  # a new dunder: Python may call it


_MRO = type.__dict__["__mro__"].__get__
_CLASS_DICT = type.__dict__["__dict__"].__get__


def _stands_for(value, key, original, package: str | None) -> bool:
    """Whether library code ``value`` can stand for ``original`` under ``key`` in
    ``package``. In place of a function: only a wrapper that libraries are known to put
    around torch's functions once a hand-in runs (:data:`KNOWN_WRAPPERS`), wrapping that very
    function (``functools.wraps`` gave it ``__wrapped__``, and its own closure holds it).
    A library's decorator in general will not do: ``torch.autocast(...)(f)``,
    ``context_decorator(contextlib.suppress(AssertionError), f)`` or
    ``contextlib.contextmanager(f)`` hold ``f`` and compute something else, from data
    provenance cannot judge. Nor another function, even of the same name
    (``nn.MSELoss.forward = nn.L1Loss.forward``). Where nothing was (a name added): a
    function whose own code has that name, from the package's own files (any library's,
    where ``package`` is None). Only what a caller cannot set is read: the code object and
    the closure, not ``__name__`` or ``__module__``."""
    if _TYPE(value) is not _FUNCTION:
        return False  # a builtin's __module__ can be set; a partial's or a class's __name__
    code = value.__code__
    if original is not _MISSING:
        # torch._dynamo.disable of a function it has disabled before wraps what that one
        # wraps (torch.compile's patch of the optimizers, run again): the same call
        for target in (original, _wrapped_by(original)):
            if target is not _MISSING and _wraps(value, code, target):
                return True
        return False
    if key is None or code.co_name != key:
        return False
    if package is None:
        return True
    home = _get(_MODULES, package)
    home = _get(_MODULE_DICT(home), "__file__") if issubclass(_TYPE(home), _MODULE_TYPE) else None
    folder = _dirname(home if _TYPE(home) is str else "")
    return bool(folder) and code.co_filename.startswith(folder + "/")


def _wraps(value, code, target) -> bool:
    return _get(_FUNCTION_DICT(value), "__wrapped__") is target and any(
        code.co_name == name
        and code.co_filename.endswith(path)
        and _pinned(value, target, cell, check)
        for path, name, cell, check in KNOWN_WRAPPERS
    )


def _wrapped_by(original):
    """What ``original`` calls, where it is itself a known wrapper as its library made it."""
    if _TYPE(original) is not _FUNCTION:
        return _MISSING
    code = original.__code__
    for path, name, cell, check in KNOWN_WRAPPERS:
        if code.co_name == name and code.co_filename.endswith(path):
            cells = dict(zip(code.co_freevars, original.__closure__ or (), strict=False))
            inner = _contents(cells[cell]) if cell in cells else _MISSING
            if inner is not _MISSING and _pinned(original, inner, cell, check):
                return inner
    return _MISSING


def _pinned(wrapper, original, cell: str, check) -> bool:
    """Whether ``original`` sits in ``wrapper``'s closure cell named ``cell``, and every other
    cell passes ``check`` (closure cells can be set after the wrapper is made)."""
    names = wrapper.__code__.co_freevars
    cells = wrapper.__closure__ or ()
    return len(names) == len(cells) and all(
        _contents(one) is original if name == cell else check(name, _contents(one))
        for name, one in zip(names, cells, strict=False)
    )


def _contents(cell):
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return _MISSING


def _plain_disable(name: str, value) -> bool:
    """``torch._dynamo.disable``'s own context, as it makes it: no callback, no hooks."""
    kind = type(value)
    if name != "self" or _class_names(kind) != ("torch._dynamo.eval_frame", "DisableContext"):
        return False
    state = object.__getattribute__(value, "__dict__")
    hooks, cleanups = _get(state, "enter_exit_hooks"), _get(state, "cleanup_fns")
    return (  # types first: == on an object of the notebook's would run its __eq__
        _get(state, "callback", _MISSING) is None
        and _TYPE(hooks) is list
        and _TYPE(cleanups) is list
        and len(hooks) == 0
        and len(cleanups) == 0
    )


def _no_other_cells(name: str, value) -> bool:
    return False


# The wrappers libraries put around torch's functions after a hand-in has started, each a
# plain pass-through: (the end of its file's path, its code's name, the closure cell that
# holds what it wraps, what every other cell must be). Provenance has checked that code
# compiled under such a path is that file's own.
KNOWN_WRAPPERS = (
    # torch._dynamo.disable: torch.compile wraps the optimizers' _init_group with it
    ("/torch/_dynamo/eval_frame.py", "_fn", "fn", _plain_disable),
    # the profiler's hook on an optimizer class's step, made as its first optimizer is
    ("/torch/optim/optimizer.py", "wrapper", "func", _no_other_cells),
    # Lightning wraps torch.compile on import
    ("/lightning/fabric/wrappers.py", "_capture", "compile_fn", _no_other_cells),
    ("/lightning_fabric/wrappers.py", "_capture", "compile_fn", _no_other_cells),
)


_FUNCTION_DICT = types.FunctionType.__dict__["__dict__"].__get__


def _dirname(path: str) -> str:
    return path.rpartition("/")[0]


def library_hook(value, provenance) -> bool:
    """Could this import hook added to ``sys.meta_path`` or ``sys.path_hooks`` be a library's
    own doing? A finder is an object, not a function (``six`` adds one when it is imported):
    its class and what it holds must be the libraries'."""
    if provenance is None:
        return True
    if callable(value) and not issubclass(_TYPE(value), type):
        return provenance.is_library_callable(value, strict=True)
    return provenance.is_library_object(value)


def _expected_addition(namespace, name) -> bool:
    """Python's own additions to a namespace (its keys exactly ``str``: :func:`changes`),
    read by exact types: ``isinstance`` would ask an object of the notebook's for its
    ``__class__``, which runs its code."""
    value = namespace.get(name)
    kind = _TYPE(value)
    if issubclass(kind, _MODULE_TYPE):
        return True
    if name == "__warningregistry__" and issubclass(kind, dict):  # made by warnings.warn
        return True
    if name == "__slotnames__" and issubclass(kind, list):  # copyreg's cache, on a copy
        return all(_TYPE(item) is str for item in list.copy(value))
    exports = namespace.get("_EXPORTS") if "__path__" in namespace else None
    source = _get(exports, name) if _TYPE(exports) is dict else None
    if _TYPE(source) is str:
        source = _get(_MODULES, source)
        if issubclass(_TYPE(source), _MODULE_TYPE):
            return _get(_MODULE_DICT(source), name, _MISSING) is value
    return False


def _foreign_code(module_name: str, provenance) -> list[str]:
    """``module.name`` (or ``module.Class.name``) for functions of a coursekit module imported
    since the seal whose code is not library code (:mod:`coursekit.grading.sandbox.provenance`).
    Code named ``<string>`` is passed over: ``dataclasses`` and ``namedtuple`` make methods
    that way, with no file to check them against. (Such a module is no part of the harness,
    which is sealed whole; this only names a notebook's code planted in coursekit.)"""
    found = []
    module = _get(_MODULES, module_name)
    if not issubclass(_TYPE(module), _MODULE_TYPE):
        return [f"sys.modules[{module_name!r}] (not a module)"]
    for name, value in list(dict.items(_MODULE_DICT(module))):
        members = list(_CLASS_DICT(value).items()) if issubclass(_TYPE(value), type) else []
        name = name if _TYPE(name) is str else "?"  # (formatting another would run its code)
        members = [(m if _TYPE(m) is str else "?", v) for m, v in members]
        for label, item in [(name, value), *((f"{name}.{m}", v) for m, v in members)]:
            # a function's code read through its own slot: no attribute of the notebook's
            # object, nor a metaclass's, runs here
            for kind, inner in _WRAPPED_FUNCTION:  # by identity: no metaclass's __hash__
                if _TYPE(item) is kind:  # (C's own types: their __func__ is a slot)
                    item = inner(item)
            code = _CODE_OF(item) if _TYPE(item) is _FUNCTION else None
            if _TYPE(code) is not _CODE_TYPE:
                continue
            filename = code.co_filename  # exact str only: a subclass's __ne__ would be the
            if _TYPE(filename) is str and filename == "<string>":  # notebook's (review)
                continue
            if not provenance.is_library(code):
                found.append(f"{module_name}.{label}")
    return found
