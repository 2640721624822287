"""The harness, sealed: what the grading code in a hand-in's process runs, recorded before any
hand-in code runs, and compared after the cells and after every test.

A question's ``run`` (the harness) calls the student's function inside the hand-in's own
process, so a hand-in can change what the harness runs. :func:`seal` records, in the warm
parent (once, before any hand-in is forked), every object the harness can reach by name:
coursekit's modules (every global), their classes (every member), the question registry and
each question's state and class; torch's main modules, numpy and a few standard modules
(builtins, json, math...) with their public functions and classes' methods; for each plain
function among those, its code, defaults, keyword defaults and closure's contents; and the
import hooks (``sys.meta_path``, ``sys.path_hooks``). :func:`changes` names each difference:
a function replaced, its ``__code__`` or defaults swapped, a method or a question's class
replaced, a name added where it shadows one, an import hook added. In coursekit and the
builtins every change counts; in torch, numpy and the standard library a replacement counts
unless its code is all library code (:mod:`coursekit.grading.sandbox.provenance`: decided from code
objects and file text, never from a file name a hand-in chose), since libraries patch torch
too. Python's own additions (a module's warning registry, a class's ``__slotnames__`` that
``copy`` caches, an import, coursekit's lazy exports) are not changes. The seal holds every
object it recorded, so no replacement can take a recorded one's address.

The comparison stays in this one module, over 400 lines, on purpose: the hand-in's process
runs it from a private copy of this module's globals (``runner.py``), and a helper module
of its own would be called through the shared one, where a notebook can rebind its names.
"""

from __future__ import annotations

import operator
import sys
import types
from dataclasses import dataclass, field
from itertools import repeat

WATCHED_MODULES = (
    "torch",
    "torch.nn",
    "torch.nn.functional",
    "torch.nn.init",
    "torch.nn.utils",
    "torch.nn.parallel",
    "torch.optim",
    "torch.optim.lr_scheduler",
    "torch.autograd",
    "torch.amp",
    "torch.func",
    "torch.utils.checkpoint",
    "torch.distributed",
    "torch.testing",
    "numpy",
    "numpy.testing",
    "builtins",
    "os",
    "signal",
    "struct",
    "select",
    "resource",
    "json",
    "math",
    "random",
    "operator",
    "functools",
    "copy",
    "itertools",
    "threading",
    "gc",
    "torch.overrides",
    "torch.library",
    "torch.nn.modules.module",
    "torch.optim.optimizer",
    "torch.autograd.graph",
    "torch.autograd.grad_mode",
    "torch.utils._python_dispatch",
    "torch._tensor",
)
_DUNDERS = (
    "__init__",
    "__call__",
    "__getattr__",
    "__getattribute__",
    "__setattr__",
    "__torch_function__",  # torch.Tensor's: every tensor operation goes through it
    "__torch_dispatch__",
)
_DESCRIPTORS = (staticmethod, classmethod, property)
_MISSING = object()


@dataclass
class Seal:
    """What :func:`changes` compares against (built by :func:`seal`)."""

    # (where, namespace, key, object, strict): strict where any replacement counts
    entries: list = field(default_factory=list)
    # (where, namespace, names, strict): namespaces where a new name would shadow another
    names: list = field(default_factory=list)
    # (where, function, code, defaults, keyword defaults, closure contents)
    functions: list = field(default_factory=list)
    # (where, object, class)
    classes: list = field(default_factory=list)
    hooks: dict = field(default_factory=dict)  # "meta_path" / "path_hooks" -> tuple
    modules: frozenset = frozenset()  # coursekit's modules sealed
    # the same entries and functions, laid out for :func:`_unchanged` (made by :func:`seal`)
    quick: _Quick | None = None


@dataclass
class _Quick:
    """The seal's entries and functions as flat tuples, so that :func:`changes` can tell that
    none differs in a few C-level passes (``map`` and ``operator.is_not``) rather than one
    Python step per entry: the check runs after the cells and after each question's tests,
    over some 16,000 entries in some 800 namespaces and 3,000 functions, in every hand-in's
    process. It decides only "all identical"; any difference is named by the full
    comparison, as before.

    Entries held in plain dicts (modules' globals, registries) and in classes' mapping
    proxies are read in one pass each, through ``dict.get`` and ``MappingProxyType.get``
    themselves (the storage, whatever a subclass would override); entries of any other
    mapping, by the namespace's own ``get``, one pass per namespace."""

    dicts: tuple  # (namespaces, keys, values): one item per entry held in a plain dict
    proxies: tuple  # ... in a mapping proxy (a class's members)
    groups: tuple  # (namespace, keys, values) for each namespace of another type
    functions: tuple  # the sealed functions
    codes: tuple  # ... their code, defaults and keyword defaults, in the same order
    defaults: tuple
    kwdefaults: tuple
    cells: tuple  # the closure cells of those whose every cell was full when sealed
    contents: tuple  # ... what each held
    others: tuple  # (function, contents) of those with a cell empty when sealed


def _flat(entries: list) -> tuple:
    """(namespaces, keys, values) of ``(namespace, key, value)`` entries, as three tuples."""
    return tuple(tuple(column) for column in zip(*entries, strict=True)) or ((), (), ())


def _quick(found: Seal) -> _Quick:
    dicts, proxies, by_namespace = [], [], {}
    for _, namespace, key, value, _ in found.entries:
        if type(namespace) is dict:
            dicts.append((namespace, key, value))
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
    functions = [entry[1] for entry in found.functions]
    return _Quick(
        dicts=_flat(dicts),
        proxies=_flat(proxies),
        groups=tuple(
            (ns, tuple(keys), tuple(values)) for ns, keys, values in by_namespace.values()
        ),
        functions=tuple(functions),
        codes=tuple(entry[2] for entry in found.functions),
        defaults=tuple(entry[3] for entry in found.functions),
        kwdefaults=tuple(entry[4] for entry in found.functions),
        cells=tuple(full_cells),
        contents=tuple(contents),
        others=tuple(others),
    )


# What the comparison calls, bound here as the module is imported (in the warm parent, before
# any hand-in exists): the hand-in's process runs :func:`changes` from a private copy of this
# module's globals and of the builtins (runner.py), so a notebook that later replaces
# ``operator.is_not``, ``itertools.repeat``, ``types.CodeType``, ``sys.modules`` or a name
# in this module does not change what the check compares with.
_IS_NOT = operator.is_not
_REPEAT = repeat
_DICT_GET = dict.get
_PROXY_GET = types.MappingProxyType.get
_CODE_TYPE = types.CodeType
_MODULES = sys.modules
_CODE = operator.attrgetter("__code__")
_DEFAULTS = operator.attrgetter("__defaults__")
_KWDEFAULTS = operator.attrgetter("__kwdefaults__")
_CONTENTS = operator.attrgetter("cell_contents")


def _differs(now, then) -> bool:
    """Whether any item of ``now`` is not the very object at its place in ``then``."""
    return any(map(_IS_NOT, now, then))


def _entries_unchanged(quick: _Quick) -> bool:
    """Whether every sealed entry still holds the very object it held when sealed."""
    for get, (namespaces, keys, values) in (
        (_DICT_GET, quick.dicts),
        (_PROXY_GET, quick.proxies),
    ):
        if _differs(map(get, namespaces, keys, _REPEAT(_MISSING)), values):
            return False
    for namespace, keys, values in quick.groups:
        if _differs(map(namespace.get, keys, _REPEAT(_MISSING)), values):
            return False
    return True


def _functions_unchanged(quick: _Quick) -> bool:
    """Whether every sealed function still has the code, defaults, keyword defaults and
    closure contents it had when sealed (a closure tuple cannot be replaced: it is read-only,
    and new ``__code__`` must have as many free variables)."""
    functions = quick.functions
    if (
        _differs(map(_CODE, functions), quick.codes)
        or _differs(map(_DEFAULTS, functions), quick.defaults)
        or _differs(map(_KWDEFAULTS, functions), quick.kwdefaults)
    ):
        return False
    try:
        if _differs(map(_CONTENTS, quick.cells), quick.contents):
            return False
    except ValueError:  # a cell emptied since
        return False
    return not any(_changed_cells(function, cells) for function, cells in quick.others)


def watched_names() -> list[str]:
    ours = [n for n in _MODULES if n == "coursekit" or n.startswith("coursekit.")]
    return sorted({*ours, *(m for m in WATCHED_MODULES if m in _MODULES)})


def seal() -> Seal:
    """Record what the harness can reach (see the module's docstring)."""
    found = Seal()
    names = watched_names()
    found.modules = frozenset(n for n in names if n.startswith("coursekit"))
    for name in names:
        found.entries.append(("sys.modules", sys.modules, name, sys.modules[name], True))
    seen: set[int] = set()  # classes and registries: each is recorded once
    for module_name in names:
        _seal_module(found, module_name, seen)
    _seal_functions(found)
    _seal_globals_read(found)
    _seal_functions(found)  # the functions those globals hold, too (once: no further)
    found.hooks = {"meta_path": tuple(sys.meta_path), "path_hooks": tuple(sys.path_hooks)}
    found.quick = _quick(found)
    return found


def _seal_module(found: Seal, module_name: str, seen: set[int]) -> None:
    namespace = vars(sys.modules[module_name])
    ours = module_name.startswith("coursekit")
    strict = ours or module_name == "builtins"
    if ours:  # a new global there shadows a builtin for coursekit's own code
        found.names.append((module_name, namespace, frozenset(namespace), True))
    for name, value in list(namespace.items()):
        if not ours and (name.startswith("_") or not callable(value)):
            continue
        found.entries.append((f"{module_name}.{name}", namespace, name, value, strict))
        if not (isinstance(value, type) and _same_package(value, module_name)):
            continue
        if id(value) in seen:
            continue
        seen.add(id(value))
        members = vars(value)
        found.names.append((f"{module_name}.{name}", members, frozenset(members), ours))
        for attribute, member in list(members.items()):
            if ours or (
                (callable(member) or isinstance(member, _DESCRIPTORS))
                and (not attribute.startswith("__") or attribute in _DUNDERS)
            ):
                where = f"{module_name}.{name}.{attribute}"
                found.entries.append((where, members, attribute, member, ours))
    registry = namespace.get("QUESTIONS") if ours else None
    if isinstance(registry, dict) and id(registry) not in seen:
        seen.add(id(registry))
        for key, question in list(registry.items()):
            found.entries.append(
                (f"{module_name}.QUESTIONS[{key!r}]", registry, key, question, True)
            )
            state = vars(question)
            found.names.append((f"QUESTIONS[{key!r}]", state, frozenset(state), True))
            found.classes.append((f"QUESTIONS[{key!r}].__class__", question, type(question)))
            for attribute, member in list(state.items()):
                where = f"QUESTIONS[{key!r}].{attribute}"
                found.entries.append((where, state, attribute, member, True))


def _seal_functions(found: Seal) -> None:
    """Each plain function among the entries (and those that methods, properties and static
    or class methods wrap): what it runs, to compare by identity."""
    seen = {id(function) for _, function, *_ in found.functions}
    for where, _, _, value, _ in found.entries:
        inner = [value, getattr(value, "__func__", None)]
        if isinstance(value, property):
            inner += [value.fget, value.fset, value.fdel]
        for item in inner:
            if isinstance(item, types.FunctionType) and id(item) not in seen:
                seen.add(id(item))
                found.functions.append((f"the code of {where}", item, *_state_of(item)))


def _seal_globals_read(found: Seal) -> None:
    """The module globals each sealed library function reads by name as it runs (``F`` in
    ``nn.Linear.forward``): rebinding one changes what the function does without replacing
    it. A module there must stay that module (no library swaps one); a function or class
    there is judged as the library's entries are. Other values are the library's state
    (locks, caches, counters: ``threading`` makes new ones after a fork), not sealed. One
    level: not the globals those globals' own functions read."""
    have = {(id(namespace), key) for _, namespace, key, _, _ in found.entries}
    for _, function, code, *_ in list(found.functions):
        namespace = function.__globals__
        module = str(namespace.get("__name__", ""))
        if module.startswith("coursekit"):
            continue  # coursekit's globals are sealed whole
        for name in sorted(_names_read(code)):
            if (id(namespace), name) in have or name not in namespace:
                continue
            have.add((id(namespace), name))
            value = namespace[name]
            strict = isinstance(value, types.ModuleType)
            if strict or callable(value):
                found.entries.append((f"{module}.{name}", namespace, name, value, strict))


def _names_read(code: types.CodeType) -> set[str]:
    """The global names ``code`` and the code nested in it may read."""
    names, stack = set(), [code]
    while stack:
        here = stack.pop()
        names.update(here.co_names)
        stack += [c for c in here.co_consts if isinstance(c, types.CodeType)]
    return names


def _state_of(function) -> tuple:
    """(code, defaults, keyword defaults, closure contents) of a function."""
    cells = []
    for cell in function.__closure__ or ():
        try:
            cells.append(cell.cell_contents)
        except ValueError:  # an empty cell
            cells.append(_MISSING)
    return function.__code__, function.__defaults__, function.__kwdefaults__, tuple(cells)


def _same_package(cls: type, module_name: str) -> bool:
    return str(getattr(cls, "__module__", "")).split(".")[0] == module_name.split(".")[0]


def changes(sealed: Seal, provenance=None) -> list[str]:
    """Where the harness differs from ``sealed`` (see the module's docstring)."""
    found = []
    quick = sealed.quick or _quick(sealed)
    if not _entries_unchanged(quick):
        for where, namespace, key, value, strict in sealed.entries:
            now = namespace.get(key, _MISSING)
            if now is not value and (strict or not library_value(now, provenance)):
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
    for where, namespace, names, strict in sealed.names:
        if len(namespace) == len(names) and namespace.keys() == names:
            continue
        for added in sorted(namespace.keys() - names, key=str):
            now = namespace.get(added)
            if _expected_addition(namespace, added):
                continue
            if strict or not library_value(now, provenance):
                found.append(f"{where}.{added}")
    for key, hooks in sealed.hooks.items():
        now = tuple(getattr(sys, key))
        if len(now) != len(hooks) or any(a is not b for a, b in zip(now, hooks, strict=False)):
            added = [h for h in now if not any(h is v for v in hooks)]
            if len(now) < len(hooks) or not all(library_hook(h, provenance) for h in added):
                found.append(f"sys.{key}")
    if provenance is not None:
        for name in watched_names():
            if name.startswith("coursekit") and name not in sealed.modules:
                found += _foreign_code(name, provenance)
    return found


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


def library_value(value, provenance) -> bool:
    """Could this replacement in torch or the standard library be a library's own doing?
    Libraries patch torch too (Lightning wraps ``torch.compile`` on import), so a value all
    of whose code is the libraries' own passes, a module too: judged by
    :meth:`coursekit.grading.sandbox.provenance.Provenance.is_library_callable` (code,
    globals, closure, defaults, a partial's arguments, a bound ``__self__``, wrapped
    callables), strictly: a library function with other defaults, or a ``partial`` with
    arguments bound, is not the library's. Data where there was a function is not either."""
    if isinstance(value, type(sys)):
        return True
    if provenance is None:
        return True
    return callable(value) and provenance.is_library_callable(value, strict=True)


def library_hook(value, provenance) -> bool:
    """Could this import hook added to ``sys.meta_path`` or ``sys.path_hooks`` be a library's
    own doing? A finder is an object, not a function (``six`` adds one when it is imported):
    its class and what it holds must be the libraries'."""
    if provenance is None:
        return True
    if callable(value) and not isinstance(value, type):
        return provenance.is_library_callable(value, strict=True)
    return provenance.is_library_object(value)


def _expected_addition(namespace, name) -> bool:
    value = namespace.get(name)
    if isinstance(value, type(sys)):
        return True
    if name == "__warningregistry__" and isinstance(value, dict):  # made by warnings.warn
        return True
    if name == "__slotnames__" and isinstance(value, list):  # copyreg's cache, on a copy
        return all(isinstance(item, str) for item in value)
    exports = namespace.get("_EXPORTS") if "__path__" in namespace else None
    if isinstance(exports, dict) and isinstance(exports.get(name), str):
        source = _MODULES.get(exports[name])
        return source is not None and vars(source).get(name, _MISSING) is value
    return False


def _foreign_code(module_name: str, provenance) -> list[str]:
    """``module.name`` (or ``module.Class.name``) for functions of a coursekit module imported
    since the seal whose code is not library code (:mod:`coursekit.grading.sandbox.provenance`).
    Code named ``<string>`` is passed over: ``dataclasses`` and ``namedtuple`` make methods
    that way, with no file to check them against. (Such a module is no part of the harness,
    which is sealed whole; this only names a notebook's code planted in coursekit.)"""
    found = []
    for name, value in list(vars(_MODULES[module_name]).items()):
        members = list(vars(value).items()) if isinstance(value, type) else []
        for label, item in [(name, value), *((f"{name}.{m}", v) for m, v in members)]:
            code = getattr(item, "__code__", None)
            if (
                isinstance(code, _CODE_TYPE)
                and code.co_filename != "<string>"
                and not provenance.is_library(code)
            ):
                found.append(f"{module_name}.{label}")
    return found
