"""What the harness seal records: the reach of the harness, followed in the warm parent.

:func:`record` fills a :class:`Seal` once, before any
hand-in exists; :func:`coursekit.grading.sandbox.harness_seal.changes` compares against it in
each hand-in's process. Recorded: every global of coursekit's modules and every member of
their classes, the question registry; the public callables of torch's main modules, numpy and
a few standard ones, with every callable and descriptor (dunders too) of their mutable
classes and the torch objects those hold; every callable of torch's compiled modules
(:data:`COMPILED_MODULES`); each plain function's
code, defaults and closure, and what its closure holds (a decorator's wrapped function);
and what those functions read as they run (:func:`_seal_reads`): globals, attribute chains
through torch's modules, and tables keyed by classes or dtypes.

Apart from the comparison because it never runs in a hand-in's process: the comparison runs
from a private copy of its own module's globals (``runner.py``), and is kept in one module
for that.
"""

from __future__ import annotations

import logging
import sys
import types
from dataclasses import dataclass, field

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
    "logging",  # torch logs from inside backward: Logger's methods run there
    "torch.overrides",
    "torch.library",
    "torch.nn.modules.module",
    "torch.optim.optimizer",
    "torch.autograd.graph",
    "torch.autograd.grad_mode",
    "torch.utils._python_dispatch",
    "torch._tensor",
    # named by the grader's private copies (runner.py) through the live modules: a change
    # left there is seen, as one of builtins or os is
    "types",
    "time",
    "io",
)
# torch's compiled modules, which its Python functions call by attribute
# (``torch._C._nn.mse_loss`` in ``F.mse_loss``, ``_VF.norm`` in ``torch.norm``): every
# callable there is sealed, private ones too, and a name added there is judged (it shadows)
COMPILED_MODULES = (
    "torch._C",
    "torch._C._nn",
    "torch._C._linalg",
    "torch._C._special",
    "torch._C._fft",
    "torch._C._nested",
    "torch._C._sparse",
    "torch._C._autograd",
    "torch._C._functorch",
    "torch._VF",
)
_MISSING = object()
_MODULES = sys.modules


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
    # (where, table, its contents): dicts keyed by classes or dtypes that functions consult
    tables: list = field(default_factory=list)
    hooks: dict = field(default_factory=dict)  # "meta_path" / "path_hooks" -> tuple
    modules: frozenset = frozenset()  # coursekit's modules sealed
    functions_seen: set = field(default_factory=set)  # their ids, while the seal is made
    members: dict = field(default_factory=dict)  # (id of a class, name) -> member, as sealed
    # (where, a sealed function's __dict__, how many attributes it had)
    function_attributes: list = field(default_factory=list)
    # (where, an object, the C getset that reads its __dict__, that dict): a question's
    # attributes, which a cell could replace whole (``q.__dict__ = {...}``, unaudited)
    instance_dicts: list = field(default_factory=list)
    # the same, laid out for a quick comparison (harness_seal._Quick, made by harness_seal.seal)
    quick: object = None


def watched_names() -> list[str]:
    """The modules sealed: coursekit's, and those of :data:`WATCHED_MODULES` and
    :data:`COMPILED_MODULES` that are imported."""
    ours = [n for n in _MODULES if n == "coursekit" or n.startswith("coursekit.")]
    theirs = (m for m in (*WATCHED_MODULES, *COMPILED_MODULES) if m in _MODULES)
    return sorted({*ours, *theirs})


# the libraries whose functions' reads are followed to the end (see _seal_reads), but for
# torch's compiler stack, which no check computes with in the hand-in's process
_FOLLOWED = ("torch",)
_NOT_FOLLOWED = (
    "torch._dynamo",
    "torch._inductor",
    "torch._functorch",
    "torch.fx",
    "torch.export",
    "torch._export",
    "torch._subclasses",
    "torch._guards",
    "torch._numpy",
    "torch.onnx",
    "torch._higher_order_ops",
    "torch._prims",
    "torch._refs",
    "torch._decomp",
)
_IMMUTABLE_TYPE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE: no member can be set or added
_DESCRIPTORS = (staticmethod, classmethod, property)


# Functions that torch or the interpreter itself reach by name in modules the seal does not
# otherwise watch: object.__reduce_ex__ calls copyreg.__newobj__ as it copies any object
# (copy.deepcopy of a model), torch warns through warnings.warn and runs backward in
# contextvars.copy_context(). Only these names: the rest of those modules is the process's
# settings, which honest code changes (logging.captureWarnings replaces showwarning).
NAMED_ENTRIES = {
    "copyreg": ("__newobj__", "__newobj_ex__", "_reconstructor", "_slotnames", "_reduce_ex"),
    "warnings": ("warn", "warn_explicit"),
    "contextvars": ("copy_context",),
}


def record(found: Seal) -> Seal:
    """Fill ``found`` with what the harness can reach now (see the module's docstring)."""
    names = watched_names()
    found.modules = frozenset(n for n in names if n.startswith("coursekit"))
    for name in names:
        found.entries.append(("sys.modules", sys.modules, name, sys.modules[name], True))
    seen: set[int] = set()  # classes and registries: each is recorded once
    for module_name in names:
        _seal_module(found, module_name, seen)
    for module_name, keys in NAMED_ENTRIES.items():
        namespace = vars(_MODULES[module_name]) if module_name in _MODULES else {}
        for key in keys:
            if key in namespace:
                where = f"{module_name}.{key}"
                found.entries.append((where, namespace, key, namespace[key], False))
    _seal_bases(found, seen)
    _seal_functions(found)
    _seal_reads(found, seen)
    start = len(found.entries)
    _seal_bases(found, seen)  # (of the classes what the functions read led to)
    _seal_functions(found, start)
    _seal_function_attributes(found)
    found.hooks = {"meta_path": tuple(sys.meta_path), "path_hooks": tuple(sys.path_hooks)}
    return found


def _seal_function_attributes(found: Seal) -> None:
    """Each sealed function's own attributes (its ``__dict__``): library code reads them as
    it runs (``torch._disable_dynamo``'s wrapper calls ``fn.__dynamo_disable``, which a
    notebook could set on the function it wraps). Every one is sealed strictly, and so is
    their number: one added is a change too (see ``harness_seal._Quick.attribute_counts``).
    The warm parent has made torch's lazy ones first (``preload``)."""
    for where, function, *_ in found.functions:
        attributes = function.__dict__
        label = where.removeprefix("the code of ") + ".__dict__"
        found.function_attributes.append((label, attributes, len(attributes)))
        for key, value in list(attributes.items()):
            found.entries.append((f"{label}[{key!r}]", attributes, key, value, True))


def _seal_module(found: Seal, module_name: str, seen: set[int]) -> None:
    namespace = vars(sys.modules[module_name])
    ours = module_name.startswith("coursekit")
    compiled = module_name in COMPILED_MODULES
    strict = ours or module_name == "builtins"
    if ours or compiled:  # a new global there shadows a builtin, or torch's own function
        found.names.append((module_name, namespace, frozenset(namespace), ours, None))
    for name, value in list(namespace.items()):
        if not (ours or _library_member(name, value, compiled)):
            continue
        found.entries.append((f"{module_name}.{name}", namespace, name, value, strict))
        if isinstance(value, type) and _same_package(value, module_name):
            _seal_class(found, f"{module_name}.{name}", value, ours, seen)
        elif ours and isinstance(value, type) and _in_library(value):
            # a torch class coursekit's code uses (FlopCounterMode, DataLoader): its members
            # as torch's own module would have them sealed
            _seal_class(found, f"{value.__module__}.{value.__qualname__}", value, False, seen)
    registry = namespace.get("QUESTIONS") if ours else None
    if isinstance(registry, dict) and id(registry) not in seen:
        seen.add(id(registry))
        for key, question in list(registry.items()):
            found.entries.append(
                (f"{module_name}.QUESTIONS[{key!r}]", registry, key, question, True)
            )
            state = vars(question)
            found.names.append((f"QUESTIONS[{key!r}]", state, frozenset(state), True, None))
            slot = _dict_getset(type(question))
            if slot is not None:
                found.instance_dicts.append((f"QUESTIONS[{key!r}].__dict__", question, slot, state))
            found.classes.append((f"QUESTIONS[{key!r}].__class__", question, type(question)))
            for attribute, member in list(state.items()):
                where = f"QUESTIONS[{key!r}].{attribute}"
                found.entries.append((where, state, attribute, member, True))


def _dict_getset(kind: type):
    """The C getset that reads the ``__dict__`` of ``kind``'s instances (the first in its
    MRO), or None."""
    for klass in kind.__mro__:
        member = vars(klass).get("__dict__")
        if type(member) is types.GetSetDescriptorType:
            return member
    return None


def _library_member(name: str, value, compiled: bool) -> bool:
    """Whether a library module's global is sealed: its public callables; in torch's
    compiled modules, private ones and torch's own objects too (``_VF.vf``)."""
    if not compiled:
        return not name.startswith("_") and callable(value)
    return not name.startswith("__") and (callable(value) or _torch_object(value))


def _torch_object(value) -> bool:
    """An instance of one of torch's classes (``Variable._execution_engine``, an
    ``_EngineBase``): state the library's code calls into, so it must stay the very object."""
    return not isinstance(value, type) and str(type(value).__module__).startswith("torch")


def _seal_class(
    found: Seal, where: str, cls: type, ours: bool, seen: set[int], base: bool = False
) -> None:
    """Every member of a class: all of coursekit's; of a library's, every callable and
    descriptor, dunders included (``Tensor.__rsub__``, ``__deepcopy__``), and the objects of
    torch's it holds (``Variable._execution_engine``). As a base of a sealed class
    (``base``: :func:`_seal_bases`), an immutable type too (found by review: ``vars(
    TensorBase) | obj`` hands ``obj.__ror__`` the dict of a type Python will not let code
    set a member of, and ``Tensor.item`` was replaced there); an immutable type met only
    as a module's member is left."""
    if id(cls) in seen or (cls.__flags__ & _IMMUTABLE_TYPE and not base):
        return
    seen.add(id(cls))
    members = vars(cls)
    found.names.append((where, members, frozenset(members), ours, cls))
    for attribute, member in list(members.items()):
        if (
            ours
            or callable(member)
            or isinstance(member, _DESCRIPTORS)
            or (_torch_object(member) and attribute != "__dict__")
        ):
            found.entries.append((f"{where}.{attribute}", members, attribute, member, ours))
            found.members[(id(cls), attribute)] = member


def _seal_bases(found: Seal, seen: set[int]) -> None:
    """The classes every sealed class inherits from, once the modules' own are sealed
    under their names (see :func:`_seal_class`; read in the warm parent)."""
    for *_, owner in list(found.names):
        for inherited in owner.__mro__[1:] if owner is not None else ():
            module = str(inherited.__module__)
            mine = module == "coursekit" or module.startswith("coursekit.")
            _seal_class(found, f"{module}.{inherited.__qualname__}", inherited, mine, seen, True)


def _seal_functions(found: Seal, start: int = 0) -> None:
    """Each plain function among the entries from ``start`` on (and those that methods,
    properties and static or class methods wrap, and a decorator's closure holds:
    ``SGD.step``'s own code is in the closure of ``_use_grad``'s wrapper): what it runs, to
    compare by identity."""
    seen = found.functions_seen
    for where, _, _, value, _ in found.entries[start:]:
        inner = [(where, value), (where, getattr(value, "__func__", None))]
        if isinstance(value, property):
            inner += [(where, value.fget), (where, value.fset), (where, value.fdel)]
        while inner:
            label, item = inner.pop()
            if not isinstance(item, types.FunctionType) or id(item) in seen:
                continue
            seen.add(id(item))
            state = _state_of(item)
            found.functions.append((f"the code of {label}", item, *state))
            # what each keyword default holds too: the dict stays the function's, and a
            # value put in it in place (no audit event) changes what the function runs
            if type(state[2]) is dict:
                for key, value in state[2].items():
                    where = f"{label}'s keyword default {key}"
                    found.entries.append((where, state[2], key, value, True))
            if not str(item.__globals__.get("__name__", "")).startswith("coursekit"):
                inner += [(f"{label} (what it wraps)", cell) for cell in state[3]]


def _seal_reads(found: Seal, seen: set[int]) -> None:
    """What each sealed library function reads by name as it runs, and what those read in
    turn: rebinding a module global (``F`` in ``nn.Linear.forward``), or an attribute reached
    through one (``torch._C._nn.mse_loss`` in ``F.mse_loss``), changes what the function does
    without replacing it. A module there must stay that module (no library swaps one); a
    function, class or torch object there is judged as the library's entries are, and the
    members of a torch class read so are sealed like those of an exported one. Other values
    are the library's state (locks, caches, counters: ``threading`` makes new ones after a
    fork), not sealed. Torch's functions are followed to the end
    (``SGD.step`` -> ``sgd`` -> ``_single_tensor_sgd``); other libraries' one level deep."""
    have = {(id(namespace), key) for _, namespace, key, _, _ in found.entries}
    scanned: set[int] = set()
    first, start = True, len(found.entries)
    while True:
        fresh = [entry for entry in found.functions if id(entry[1]) not in scanned]
        for _, function, code, *_ in fresh:
            scanned.add(id(function))
            namespace = function.__globals__
            module = str(namespace.get("__name__", ""))
            if module.startswith("coursekit") or not (first or _followed(module)):
                continue  # coursekit's globals are sealed whole
            names = sorted(_names_read(code))
            _seal_names_read(found, namespace, module, names, have, seen)
        before = len(found.functions)
        _seal_functions(found, start)
        start = len(found.entries)
        first = False
        if len(found.functions) == before:
            return


def _followed(module: str) -> bool:
    return module.split(".")[0] in _FOLLOWED and not any(
        module == name or module.startswith(name + ".") for name in _NOT_FOLLOWED
    )


def _seal_names_read(found, namespace, where, names, have, seen) -> None:
    """The globals among ``names`` in ``namespace``, and the attributes among ``names`` of the
    torch modules reached so (an attribute chain, whichever order the names come in; from a
    module a function imports itself, too: ``import torch._dynamo`` in ``SGD.step``'s
    wrapper). Not of other modules: ``sys.excepthook`` or ``os.environ`` are the process's
    settings, which libraries change (torch.distributed sets its own excepthook). Tables a
    function consults (a dict keyed by classes or dtypes: ``copy._deepcopy_dispatch``,
    ``torch.testing``'s tolerances) are recorded too (:func:`_table`)."""
    holders, followed = [(namespace, where)], {id(namespace)}
    for name in names:  # IMPORT_NAME's dotted names: a local bound to the root module
        root = _MODULES.get(name.split(".")[0]) if "." in name else None
        if (
            isinstance(root, types.ModuleType)
            and _in_torch(root)
            and id(vars(root)) not in followed
        ):
            followed.add(id(vars(root)))
            holders.append((vars(root), root.__name__))
    while holders:
        holder, label = holders.pop()
        for name in names:
            value = holder.get(name, _MISSING)
            if value is _MISSING:
                continue
            module = isinstance(value, types.ModuleType)
            if module and str(value.__name__).startswith("coursekit"):
                continue  # sealed whole
            if (id(holder), name) not in have:
                have.add((id(holder), name))
                if module or callable(value) or _torch_object(value):
                    found.entries.append((f"{label}.{name}", holder, name, value, module))
                elif isinstance(value, logging.Logger):  # torch's `log`, called in backward
                    found.entries.append((f"{label}.{name}", holder, name, value, True))
                elif _table(value):
                    found.tables.append((f"{label}.{name}", value, dict(value)))
                if isinstance(value, type) and _same_package(value, where):
                    _seal_class(found, f"{label}.{name}", value, False, seen)
            if module and id(vars(value)) not in followed and _in_torch(value):
                followed.add(id(vars(value)))  # torch's compiler stack too: one step
                holders.append((vars(value), value.__name__))


def _in_torch(module) -> bool:
    return str(module.__name__).split(".")[0] in _FOLLOWED


def _table(value) -> bool:
    """A dispatch or constants table: a plain dict whose keys are all classes or dtypes."""
    if type(value) is not dict or not value:
        return False
    return all(isinstance(key, type) or type(key).__name__ == "dtype" for key in value)


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


def _in_library(cls: type) -> bool:
    return str(getattr(cls, "__module__", "")).split(".")[0] in ("torch", "numpy")


def _same_package(cls: type, module_name: str) -> bool:
    return str(getattr(cls, "__module__", "")).split(".")[0] == module_name.split(".")[0]
