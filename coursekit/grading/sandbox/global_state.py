"""Torch and interpreter state a cell can leave on, put back before each hidden test.

A hand-in's cells run in the process that later runs the hidden tests, and much of what they
can leave behind changes what those tests compute without replacing anything the harness seal
(:mod:`coursekit.grading.sandbox.harness_seal`) records: a ``TorchFunctionMode`` or
``TorchDispatchMode`` entered and never exited rewrites every result; a global module or
optimizer hook (``register_module_forward_hook``) or default saved-tensor hooks reach every
model; a trace or profile function sees every frame; a thread of its own runs beside the test.

:func:`take` records that state when the hand-in's process starts, before any hand-in code
runs. :func:`restore`, called before each test (and after it), compares, puts back what it
can and names what it found:

- *settings* (logging levels, grad mode, inference mode, default dtype and device, autocast,
  anomaly mode, flush-denormal, thread count, and every ``torch._C`` setting with a getter and
  a setter: deterministic algorithms, matmul precision, cuDNN/oneDNN/TF32 flags...) are put
  back and not flagged: an honest notebook may set them in a cell (the course itself works in
  float64), and put back, they gain a hand-in nothing. They go back to what they were before
  the cells, not to what the cells left: the checks build their models and inputs under the
  process's settings, and with a cell's float64 default left on, a correct notebook of module
  1 scored 0 of 10 (measured: "mat1 and mat2 must have the same dtype"). Limit: a function
  that relies on a setting made in a cell (``torch.zeros`` in float64) runs its tests without
  it;
- *code that runs inside later computation* (modes on torch's function and dispatch stacks,
  global module and optimizer hooks, default saved-tensor hooks, dispatch keys included or
  excluded, ``torch.func`` transform levels, trace and profile functions, ``torch._dynamo``'s
  frame-evaluation and bytecode-debugger callbacks, handlers and filters on the root logger
  and torch's, which run inside torch's computation, gc callbacks) is
  put back too, and flagged unless all its code is the libraries' own
  (:meth:`coursekit.grading.sandbox.provenance.Provenance.is_library_callable`);
- ``torch.library`` registrations the notebook's code made are flagged and taken back (its
  ``Library`` destroyed); a thread of the notebook's still running cannot be stopped, and is
  flagged.

The torch and interpreter functions :func:`restore` calls are taken at :func:`take` and kept
in the :class:`Baseline`, which the runner holds privately: a hand-in that rebinds
``sys.settrace`` or ``torch.set_grad_enabled`` later does not change what restores them.
Each check is a few C calls; all of them take about a third of a millisecond a put-back
(``benchmarks/global_state.py`` prints the figures), a third of it checking that every key
of the dicts put-back reads by name is exactly a ``str`` (:func:`_names_only`).
"""

from __future__ import annotations

import _thread
import collections
import functools
import gc
import itertools
import logging
import operator
import sys
import threading
import types
import warnings
from dataclasses import dataclass, field

import torch

from coursekit.grading.sandbox import dict_versions, frame_hook_guard, torch_registrations

_IS_NOT = operator.is_not  # bound as the module is imported, before any hand-in exists
_TYPE = type
_VERSION = dict_versions.READ  # a dict's version tag, read in C (None: not trusted here)

# torch._C getter/setter pairs that are per-thread names or need arguments, not settings.
_NOT_SETTINGS = frozenset(
    {"thread_name", "dispatch_mode", "tensor_metadata", "value_trace", "tracing_state"}
)
_PLAIN = (bool, int, float, str, type(None), torch.dtype, torch.device, tuple, list)
_AUTOCAST_DEVICES = ("cpu", "cuda", "xpu", "mps")  # where a notebook can compute
# Modules whose global hook registries every module or optimizer runs.
_HOOK_MODULES = ("torch.nn.modules.module", "torch.optim.optimizer")


@dataclass
class Baseline:
    """The state :func:`restore` puts back (made by :func:`take`)."""

    settings: list = field(default_factory=list)  # (name, getter, setter, value)
    autocast: list = field(default_factory=list)  # (device, enabled, dtype)
    containers: list = field(default_factory=list)  # (label, module dict, name, object, copy)
    values: list = field(default_factory=list)  # (label, module dict, name, value)
    dispatch_keys: tuple = ()  # (include set text, exclude set text)
    function_modes: tuple = ()
    default_device: tuple = ()  # torch.set_default_device's two records of it
    dispatch_modes: tuple = ()
    infra_modes: dict = field(default_factory=dict)
    transforms: int = 0  # torch.func's transform levels (vmap, grad, jvp) entered
    saved_tensor_hooks: object = None
    tracing: tuple = ()  # sys trace, sys profile, threading trace, threading profile
    frame_hooks: list = field(default_factory=list)  # (what, getter, setter, value): dynamo's
    threads: frozenset = frozenset()
    started_threads: int = 0  # threads Python started (``_thread._count()``) at take()
    gc_callbacks: list = field(default_factory=list)
    gc_list: list = field(default_factory=list)
    registrations: object = None  # torch_registrations.RECORD, the ledger's send
    registrations_seen: int = 0
    watchers: tuple = ()  # (owner, name, watcher) as torch_registrations.watch left them
    tools: dict = field(default_factory=dict)  # the functions used, taken at take()
    kept: list = field(default_factory=list)  # guards that keep a restored state on
    reported_threads: set = field(default_factory=set)
    loggers: list = field(default_factory=list)  # (logger, level, handlers, filters, ...)
    loggers_by_id: dict = field(default_factory=dict)  # the same, by id(logger) (held here)
    logger_names: list = field(default_factory=list)  # [table, keys, values, found, types]
    logger_quick: tuple = ()  # (found, _LoggersAtTake) of the loggers held since take()
    logging_disabled: int = 0  # logging.disable's level
    dict_slots: dict = field(default_factory=dict)  # id(class): (its __dict__ getset, class)
    warnings: tuple = ()  # ((name, function) of warnings' own, its filters list, a copy)
    removed: list = field(default_factory=list)  # what was taken off, held: no __del__ runs
    module_classes: dict = field(default_factory=dict)  # id: (module, its class) if not plain
    modules_passed: tuple = ((), ())  # the modules not of the plain class, and their classes,
    # when put-back last found every one as taken or a library's own
    class_verdicts: dict = field(default_factory=dict)  # id(class): (class, library's own?)
    name_dicts: list = field(default_factory=list)  # (label, dict) read and written by name
    name_dict_views: list | None = None  # ... a view of each one's version tag, and each
    name_dict_tags: list = field(default_factory=list)  # tag when last found names only
    set_always: list = field(default_factory=list)  # (setter, value): no getter to read


def _setting_pairs() -> list:
    """(name, getter, setter) for each zero-argument ``torch._C`` getter with a setter."""
    C, found = torch._C, []
    for name in dir(C):
        for prefix in ("_get_", "_is_", "_are_"):
            if not name.startswith(prefix):
                continue
            base = name[len(prefix) :]
            setter = getattr(C, "_set_" + base, None)
            if base not in _NOT_SETTINGS and callable(setter):
                found.append((base, getattr(C, name), setter))
    return found


def take() -> Baseline:
    """Record the state (in the hand-in's process, before any hand-in code runs)."""
    import torch.utils._device  # what torch.set_default_device keeps its record in

    C, autograd = torch._C, torch._C._autograd
    tools = {name: getattr(C, name) for name in _C_FUNCTIONS}
    tools.update(
        top_saved=autograd._top_saved_tensors_default_hooks,
        pop_saved=autograd._pop_saved_tensors_default_hooks,
        settrace=sys.settrace,
        setprofile=sys.setprofile,
        gettrace=sys.gettrace,
        getprofile=sys.getprofile,
        threading_settrace=threading.settrace,
        threading_setprofile=threading.setprofile,
        threading_gettrace=threading.gettrace,
        threading_getprofile=threading.getprofile,
        current_frames=sys._current_frames,
        started_threads=_thread._count,
        get_ident=threading.get_ident,
        threading=_MODULE_DICT(threading),  # its tables of threads: see _threads
        # threading's own code that runs a thread object (its ``self`` read there)
        thread_codes=tuple(
            function.__code__
            for function in (
                threading.Thread._bootstrap,
                threading.Thread._bootstrap_inner,
                threading.Thread.run,
                threading.Timer.run,
            )
        ),
        is_autocast_enabled=torch.is_autocast_enabled,
        set_autocast_enabled=torch.set_autocast_enabled,
        get_autocast_dtype=torch.get_autocast_dtype,
        set_autocast_dtype=torch.set_autocast_dtype,
        inference_mode=torch.is_inference_mode_enabled,
        DispatchKey=C.DispatchKey,
        transform_depth=C._functorch.get_dynamic_layer_stack_depth,
        undo_transforms=C._functorch.pop_dynamic_layer_stack_and_undo_to_depth,
        device_module=vars(sys.modules["torch.utils._device"]),
        device_context=torch._GLOBAL_DEVICE_CONTEXT,
        # pybind11 builds __members__ anew at each read, from a dict a cell can write:
        # taken once, here
        dispatch_keys_by_name=dict(C.DispatchKey.__members__),
        gc_isenabled=gc.isenabled,
        gc_disable=gc.disable,
        gc_enable=gc.enable,
    )
    base = Baseline(tools=tools)
    for name, getter, setter in _setting_pairs():
        try:
            value = getter()
        except Exception:  # a getter that needs an argument or a device: not a setting
            continue
        if isinstance(value, _PLAIN) or type(value).__module__.startswith("torch"):
            base.settings.append((name, getter, setter, value))
    plain = [
        # torch._C's own setters: torch's Python ones look names up in their modules'
        # globals, where a key of the notebook's would be compared with the name
        ("grad mode", torch.is_grad_enabled, torch._C._set_grad_enabled),
        ("default dtype", torch.get_default_dtype, torch._C._set_default_dtype),
        ("the autocast cache", torch.is_autocast_cache_enabled, torch.set_autocast_cache_enabled),
        ("thread count", torch.get_num_threads, torch.set_num_threads),
        ("anomaly mode", *_anomaly_switch()),
        ("gc thresholds", gc.get_threshold, gc.set_threshold),  # (set with the tuple spread)
    ]
    plain += _fp32_precisions()  # after the legacy setting, which does not set them all
    base.settings += [(name, get, put, get()) for name, get, put in plain]
    # torch has no getter for flush-denormal, and computing one runs an operator, which a
    # kernel of the notebook's could be registered for (found by review): read here, before
    # any hand-in code, and set as taken at every put-back
    base.set_always = [(torch.set_flush_denormal, _flush_denormal_getter()())]
    for device in _AUTOCAST_DEVICES:
        try:
            enabled = torch.is_autocast_enabled(device)
            base.autocast.append((device, enabled, torch.get_autocast_dtype(device)))
        except (RuntimeError, ValueError, TypeError):  # not a device type of this build
            continue
    for module_name in _HOOK_MODULES:
        module = sys.modules.get(module_name)
        if module is None:
            continue
        namespace = vars(module)
        for name, value in list(namespace.items()):
            if name.startswith("_global_") and isinstance(value, dict):
                label = f"{module_name}.{name}"
                base.containers.append((label, namespace, name, value, dict(value)))
            elif name.startswith("_global_"):
                base.values.append((f"{module_name}.{name}", namespace, name, value))
    base.dispatch_keys = (
        str(C._dispatch_tls_local_include_set()),
        str(C._dispatch_tls_local_exclude_set()),
    )
    base.default_device = (
        vars(sys.modules["torch.utils._device"]).get("CURRENT_DEVICE"),
        getattr(torch._GLOBAL_DEVICE_CONTEXT, "device_context", None),
    )
    base.function_modes = tuple(
        C._get_function_stack_at(i) for i in range(C._len_torch_function_stack())
    )
    base.dispatch_modes = tuple(
        C._get_dispatch_stack_at(i) for i in range(C._len_torch_dispatch_stack())
    )
    base.infra_modes = {key: C._get_dispatch_mode(key) for key in _infra_keys()}
    base.transforms = C._functorch.get_dynamic_layer_stack_depth()
    base.saved_tensor_hooks = autograd._top_saved_tensors_default_hooks(True)
    base.tracing = (sys.gettrace(), sys.getprofile(), threading.gettrace(), threading.getprofile())
    base.frame_hooks = _frame_hooks(frame_hook_guard.take_originals())
    base.threads = frozenset(sys._current_frames())
    base.started_threads = _thread._count()
    base.gc_list = gc.callbacks
    base.gc_callbacks = list(gc.callbacks)
    base.registrations = torch_registrations.RECORD
    base.registrations_seen = torch_registrations.records_since(base.registrations, 0)[1]
    base.watchers = tuple(
        (owner, name, vars(owner).get(name)) for owner, name in torch_registrations.registrars()
    )
    base.tools["logging_manager"] = logging.Logger.manager
    base.tools["logger_class"] = logging.Logger
    base.logging_disabled = logging.Logger.manager.disable
    namespace = vars(warnings)
    base.warnings = (
        tuple((name, namespace.get(name)) for name in _WARNINGS_CODE),
        warnings.filters,
        list(warnings.filters),
    )
    base.tools["warnings"] = warnings
    base.tools["logger_table"] = logging.Logger.manager.loggerDict
    base.tools["modules"] = sys.modules
    base.module_classes = {
        id(module): (module, type(module))
        for module in list(sys.modules.values())
        if type(module) is not _MODULE
    }
    base.tools["logger_class_made"] = logging.Logger.manager.loggerClass
    # what library code writes to and looks up (a warning's text through linecache)
    for label, namespace, name in (
        ("sys.stdout", vars(sys), "stdout"),
        ("sys.stderr", vars(sys), "stderr"),
        ("sys.modules['warnings']", sys.modules, "warnings"),
        ("sys.modules['logging']", sys.modules, "logging"),
        ("sys.modules['linecache']", sys.modules, "linecache"),
    ):
        base.values.append((label, namespace, name, namespace.get(name)))
    base.loggers = [_logger_state(logger) for logger in _loggers(logging.Logger.manager)]
    base.loggers_by_id = {id(state[0]): state for state in base.loggers}
    base.name_dicts = _name_dicts(base)
    views = base.name_dict_views = dict_versions.views(held for _, held in base.name_dicts)
    tags = list(map(_VERSION, views)) if views is not None else []  # (read before the keys)
    base.name_dict_tags = [  # each one names only now (-1: read at the first put-back)
        tag if not _odd_keys(held) else -1
        for tag, (_, held) in zip(tags, base.name_dicts, strict=False)
    ]
    return base


def _name_dicts(base: Baseline) -> list:
    """``(label, dict)`` of every dictionary a notebook can write that :func:`restore` reads
    or writes by name: ``sys``'s, ``sys.modules``, the modules whose globals hold torch's
    hooks, ``torch.utils._device``'s, ``warnings``', ``threading``'s (whose Python functions
    put-back calls to read and set the trace hooks) and the modules whose functions register
    with torch's dispatcher. Each is one object for the life of the process (a module's
    dict cannot be replaced), so it is taken once, here."""
    found, seen = [], set()
    modules = [("sys", sys), ("warnings", base.tools["warnings"]), ("threading", threading)]
    modules += [(name, sys.modules.get(name)) for name in ("torch.utils._device", *_HOOK_MODULES)]
    modules += [(None, owner) for owner, _, _ in base.watchers]  # (classes: not rewritten)
    for label, module in modules:
        if issubclass(type(module), types.ModuleType) and id(module) not in seen:
            seen.add(id(module))
            found.append((label or _module_name(module), _MODULE_DICT(module)))
    found.append(("sys.modules", base.tools["modules"]))
    return found


def _loggers(manager) -> list:
    """The root logger and torch's: torch logs from inside its own computation (autograd's
    engine puts a hook on every node of the graph when ``torch.autograd.graph`` logs at
    DEBUG), so a handler there runs in the middle of a hidden test. Read through the C slots
    that hold them, names as exact ``str`` only: no method of the notebook's runs here."""
    held = _attributes(manager)
    found = [dict.get(held, "root")]
    for name, logger in list(dict.items(_logger_table(manager))):
        if type(name) is not str:
            continue
        ours = name in ("torch", "py.warnings") or name.startswith("torch.")
        if ours and not issubclass(type(logger), logging.PlaceHolder):  # py.warnings: logged
            found.append(logger)
    return found


_MRO = type.__dict__["__mro__"].__get__
_CLASS_DICT = type.__dict__["__dict__"].__get__
_GETSET = types.GetSetDescriptorType


def _logger_table(manager, slots: dict | None = None) -> dict:
    """``manager.loggerDict``, if it is still a plain dict (else an empty one: the restore
    then sees every torch logger as gone, and its own records stay)."""
    table = dict.get(_attributes(manager, slots), "loggerDict")
    return table if type(table) is dict else {}


def _attributes(value, slots: dict | None = None) -> dict:
    """``value.__dict__``, the real one, through a C getset that holds it (a logger's, a
    manager's): no ``__getattribute__``, property or ``__eq__`` of a class's making runs;
    {} where ``value`` has none. The same kind of reading as ``provenance._instance_dict``,
    kept here on purpose: the runner runs this module from a private copy of its globals,
    which a function of another module would not share.

    Any ``__dict__`` getset of a class in ``value``'s MRO reads the instance's real dict
    (C's ``subtype_dict`` goes by the instance's own type), so one that a class has
    shadowed (a property, a name that is not exactly ``str``, another class's getset) is
    passed over, not believed: a logger of such a class cannot hide its handlers.

    ``slots`` (a :class:`Baseline`'s) keeps the getset that worked for each class, by the
    class's identity (the class held with it, so that its ``id`` is never another's):
    ``put_back`` reads some 170 loggers before and after every test, and finding the getset
    walks a class's every name in Python."""
    kind = type(value)
    if slots is not None:
        kept = slots.get(id(kind))  # int keys: compared in C
        if kept is not None and kept[1] is kind:
            held = _held_by(kept[0], value, kind)
            if held is not None:
                return held
    for slot in _dict_slots(kind):
        held = _held_by(slot, value, kind)
        if held is not None:
            if slots is not None:
                slots[id(kind)] = (slot, kind)
            return held
    return {}


def _dict_slots(kind) -> list:
    """Every C getset under the exact name ``__dict__`` in the classes of ``kind``'s MRO, in
    order (each class's names compared one by one, as exact ``str`` only: never looked up,
    so no name's ``__eq__`` or ``__hash__`` runs)."""
    found = []
    for klass in _MRO(kind):
        for name, member in list(_CLASS_DICT(klass).items()):
            if type(name) is str and name == "__dict__" and type(member) is _GETSET:
                found.append(member)
    return found


def _held_by(slot, value, kind) -> dict | None:
    """The dict ``slot`` (a C getset) reads of ``value``, or None where it reads none."""
    try:
        held = slot.__get__(value, kind)
    except (AttributeError, TypeError):
        return None
    return held if type(held) is dict else None


def _loggers_now(base: Baseline, manager) -> list:
    """``(logger, state it had at take())`` for the root logger and torch's (:func:`_loggers`),
    read again only when the root logger or the logger table has changed: the same table
    holding the very same names and loggers, of the same classes (a placeholder made a
    logger in place is read), in the same order, holds the same torch loggers (a check in
    C-level passes, where reading them again costs a Python step per logger, and
    ``put_back`` runs before and after every test). A logger made since starts bare."""
    table = _logger_table(manager, base.dict_slots)
    kept = base.logger_names
    if (
        kept
        and kept[0] is table
        and kept[3][0][0] is dict.get(_attributes(manager, base.dict_slots), "root")
        and len(table) == len(kept[1])
        and not any(map(_IS_NOT, table.keys(), kept[1]))
        and not any(map(_IS_NOT, table.values(), kept[2]))
        and not any(map(_IS_NOT, map(_TYPE, kept[2]), kept[4]))
    ):
        return kept[3]
    then = base.loggers_by_id
    found = [(logger, then.get(id(logger)) or _bare(logger)) for logger in _loggers(manager)]
    # and every logger read at take(), wherever it is now: torch's modules hold their own
    # (a table entry replaced or deleted does not take a handler off torch's logger)
    listed = {id(logger) for logger, _ in found}
    found += [(state[0], state) for state in base.loggers if id(state[0]) not in listed]
    values = tuple(table.values())
    base.logger_names[:] = [table, tuple(table.keys()), values, found, tuple(map(_TYPE, values))]
    return found


def _logger_state(logger) -> tuple:
    """``(logger, level, handlers, filters, propagate, disabled, class, keys, values,
    lists, cache)`` as :func:`take` finds it: its settings and the items of its handlers and
    filters, then its class, its dict's keys and values, and where among them its handlers
    and filters lists and its level cache are (-1: none). All of it is put back if the
    notebook changes it (an attribute that shadows a method, ``parent``, the class)."""
    held = _attributes(logger)
    keys, values = tuple(dict.keys(held)), tuple(dict.values(held))
    if not all(type(key) is str for key in keys):  # (never, before a hand-in's code)
        return _bare(logger)
    then = dict(zip(keys, values, strict=True))
    lists = tuple(keys.index(key) if key in then else -1 for key in ("handlers", "filters"))
    cache_at = keys.index("_cache") if type(then.get("_cache")) is dict else -1
    return (
        logger,
        then.get("level"),
        _items_of(then.get("handlers")),
        _items_of(then.get("filters")),
        then.get("propagate"),
        then.get("disabled"),
        type(logger),
        keys,
        values,
        lists,
        cache_at,
    )


def _bare(logger) -> tuple:
    """The state of a logger made since :func:`take`: no handler, no filter, all levels; its
    class and its other attributes are its own."""
    return (logger, 0, (), (), True, False, None, None, None, None, -1)


def _items_of(value) -> tuple:
    """A logger's handlers or filters, as they are held (a list; anything else: none)."""
    return tuple(list.copy(value)) if issubclass(type(value), list) else ()


_C_FUNCTIONS = (
    "_InferenceMode",
    "_len_torch_function_stack",
    "_get_function_stack_at",
    "_pop_torch_function_stack",
    "_push_on_torch_function_stack",
    "_len_torch_dispatch_stack",
    "_get_dispatch_stack_at",
    "_pop_torch_dispatch_stack",
    "_push_on_torch_dispatch_stack",
    "_get_dispatch_mode",
    "_set_dispatch_mode",
    "_unset_dispatch_mode",
    "_dispatch_tls_local_include_set",
    "_dispatch_tls_local_exclude_set",
    "_dispatch_tls_set_dispatch_key_included",
    "_dispatch_tls_set_dispatch_key_excluded",
)


def _fp32_precisions() -> list:
    """(name, getter, setter) of each float32 precision of the newer API, per backend and
    operation (``torch.backends.mkldnn.matmul.fp32_precision`` ...)."""
    get, put, found = torch._C._get_fp32_precision_getter, torch._C._set_fp32_precision_setter, []
    for backend in ("generic", "cuda", "mkldnn", "cudnn"):
        for operation in ("all", "matmul", "conv", "rnn"):
            try:
                get(backend, operation)
            except Exception:  # a pair this build does not have
                continue
            found.append(
                (
                    f"{backend} {operation} fp32 precision",
                    functools.partial(get, backend, operation),
                    functools.partial(put, backend, operation),
                )
            )
    return found


def _anomaly_switch() -> tuple:
    """(getter, setter) of anomaly mode and its NaN check, as one setting."""
    enabled, check_nan, put = (
        torch.is_anomaly_enabled,
        torch.is_anomaly_check_nan_enabled,
        torch.set_anomaly_enabled,
    )
    return (lambda: (enabled(), check_nan())), (lambda value: put(*value))


def _flush_denormal_getter():
    """Whether denormal floats are flushed to zero (torch has no getter: computed)."""
    full, dtype = torch.full, torch.float32
    return lambda: (full((1,), 1e-39, dtype=dtype) * 1.0).item() == 0.0


def _infra_keys() -> list:
    keys = getattr(torch._C, "_TorchDispatchModeKey", None)
    return list(keys.__members__.values()) if keys is not None else []


def restore(base: Baseline, provenance) -> list[str]:
    """Put the state of :func:`take` back; what was found, as flag texts (settings put back
    are not flagged: see the module's docstring). No collection runs meanwhile: a cycle of
    the notebook's with a ``__del__`` (its threshold set to 1, say) would run its code in
    the middle of put-back (found by review); gc is left on or off as it was found."""
    tools = base.tools
    collecting = tools["gc_isenabled"]()
    tools["gc_disable"]()
    try:
        return _restore(base, provenance)
    finally:
        if collecting:
            tools["gc_enable"]()


def _restore(base: Baseline, provenance) -> list[str]:
    found: list[str] = []
    library_code = provenance.is_library_callable
    _all_names_only(base, found)  # first: the rest looks names up in these dicts
    _restore_module_classes(base, found, library_code)  # then: the rest reads modules
    _restore_modes(base, found, library_code)  # then no mode of the notebook's sees the rest
    _restore_settings(base)
    _restore_dispatch_keys(base, found)
    _restore_hooks(base, found, library_code)
    _restore_tracing(base, found, library_code)
    _restore_logging(base, found, library_code)
    _check_threads(base, found, provenance)
    _check_library(base, found, provenance)
    return found


def _odd_keys(held) -> bool:
    """Whether a dict (or a class's mapping proxy) holds a key that is not exactly a
    ``str``: read in C, no key's method runs."""
    return any(map(_IS_NOT, map(_TYPE, iter(held)), _ALWAYS_STR))


def _all_names_only(base: Baseline, found: list[str]) -> None:
    """:func:`_names_only` over :attr:`Baseline.name_dicts`, but for those that have not
    changed since the last put-back found them names only: read from each dict's version
    tag (:mod:`coursekit.grading.sandbox.dict_versions`; where tags are not kept, all are
    read). A tag is read before its dict: a change made after it is read again next time."""
    views, last = base.name_dict_views, base.name_dict_tags
    tags = list(map(_VERSION, views)) if views is not None else None
    if tags is not None and tags == last:  # (lists of ints: compared in C)
        return
    for at, (label, held) in enumerate(base.name_dicts):
        if tags is not None and tags[at] == last[at]:
            continue
        before = len(found)
        _names_only(held, label, base, found)
        if tags is not None and len(found) == before:  # names only as read: this tag's
            last[at] = tags[at]


def _names_only(held: dict, label: str, base: Baseline, found: list[str]) -> None:
    """Take every key that is not exactly a ``str`` out of ``held``, a dict that put-back
    looks names up in or writes names to, and name it. Such a key whose hash is a name's
    is compared with that name at every lookup of it, which runs the key's ``__eq__``: the
    notebook's code, inside put-back, after the checks before it (found by review: a
    planted key put a global hook back on once the hooks were checked). Only a hand-in's
    code puts such a key in a module's globals or ``sys.modules``. The dict is emptied and
    filled again rather than searched (no key is hashed or compared); what was in it is
    held (:attr:`Baseline.removed`), so nothing is finalized here. A thread of the
    notebook's that runs between the two steps sees the dict empty: it is flagged anyway."""
    if not _odd_keys(held):
        return
    items = list(dict.items(held))
    base.removed.append(items)
    dict.clear(held)
    dict.update(held, [(key, value) for key, value in items if type(key) is str])
    found.append(f"it put a key that is not a name in {label} (taken out)")


def _restore_module_classes(base: Baseline, found: list[str], library_code) -> None:
    """A module whose class the notebook changed runs the notebook's code at every lookup of
    one of its names (a ``__getattribute__``), the grader's and the checks' included, and
    a class of its own on ``warnings`` brings warnings back on. Put back (to the class the
    module had at :func:`take`, or a plain module) and named; a class a library gives a
    module of its own is left. Modules of another class than a plain one are few: they are
    found in C, and each class is judged once."""
    modules = list(dict.values(base.tools["modules"]))
    odd = list(_COMPRESS(modules, map(_IS_NOT, map(_TYPE, modules), _ALWAYS_MODULE)))
    known_modules, known_classes = base.modules_passed
    if (
        len(odd) == len(known_modules)
        and not any(map(_IS_NOT, odd, known_modules))
        and not any(map(_IS_NOT, map(_TYPE, odd), known_classes))
    ):
        return  # the very modules, of the very classes, that passed last time (below)
    then, verdicts = base.module_classes, base.class_verdicts
    changed = []
    for module in odd:
        kind = type(module)
        was = then.get(id(module))
        was = was[1] if was is not None and was[0] is module else _MODULE
        if kind is was:
            continue
        verdict = verdicts.get(id(kind))
        if verdict is not None and verdict[0] is kind and verdict[1]:
            continue  # a class a library gives a module of its own: judged before
        try:  # put back before anything is judged: the judging looks names up in modules
            _SET_CLASS(module, was)
        except TypeError:
            found.append(f"it changed the class of module {_module_name(module)} (kept)")
            continue
        base.removed.append(kind)
        changed.append((module, kind))
    named = len(found)
    for module, kind in changed:
        verdict = verdicts.get(id(kind))
        if verdict is None or verdict[0] is not kind:
            verdict = verdicts[id(kind)] = (kind, library_code(kind))
        if verdict[1]:
            _SET_CLASS(module, kind)  # the library's own choice, given back
        else:
            found.append(f"it changed the class of module {_module_name(module)}")
    if len(found) == named:  # every module's class as taken, or a library's: remembered
        # (held, so that no id is reused; each class's verdict is kept by its identity)
        base.modules_passed = (tuple(odd), tuple(map(_TYPE, odd)))


def _local_dict(local) -> dict:
    """A ``threading.local``'s dict for this thread, through ``_thread._local``'s own
    lookup (no method of a subclass runs); {} where there is none."""
    if type(local) is not _LOCAL:
        return {}
    try:
        held = _LOCAL_GETATTRIBUTE(local, "__dict__")
    except (AttributeError, TypeError):
        return {}
    return held if type(held) is dict else {}


_LOCAL = _thread._local
_LOCAL_GETATTRIBUTE = _thread._local.__getattribute__


def _module_name(module) -> str:
    name = _item(_MODULE_DICT(module), "__name__")
    return name if type(name) is str else "?"


def _item(held: dict, key: str, absent=None):
    """``held[key]`` (``absent`` where there is none), read as an item: the dict's keys are
    compared as exact ``str`` one by one, never looked up, so no key of a notebook's is
    hashed or compared."""
    return next((v for k, v in list(dict.items(held)) if type(k) is str and k == key), absent)


def _restore_settings(base: Baseline) -> None:
    tools = base.tools
    if tools["inference_mode"]():  # entered and never left: a guard keeps it off from now
        base.kept.append(tools["_InferenceMode"](False))
    for setter, value in base.set_always:
        setter(value)
    for _ in range(2):  # a getter that failed (matmul precision set two ways) is tried again
        failed = False
        for _name, getter, setter, value in base.settings:
            try:
                now = getter()
            except Exception:  # fails until the settings it reads agree again
                failed = True
                continue
            if not _same_setting(now, value):
                base.removed.append(now)  # held: the setter may let go of its last reference
                try:
                    setter(value)
                except TypeError:  # a setter that takes the getter's tuple as arguments
                    setter(*value)
        if not failed:
            break
    for device, enabled, dtype in base.autocast:
        if tools["is_autocast_enabled"](device) != enabled:
            tools["set_autocast_enabled"](device, enabled)
        if tools["get_autocast_dtype"](device) != dtype:
            tools["set_autocast_dtype"](device, dtype)


def _same_setting(now, value) -> bool:
    """Whether a setting read now is the value :func:`take` found: the very object, or a
    plain value of the same exact type that ``==`` compares in C (tuples and lists item by
    item). An
    object of another type is never compared: some settings take any object
    (``torch._C._set_graph_exec_group``), and ``!=`` would run its class's ``__ne__``
    inside put-back (found by review)."""
    if now is value:
        return True
    kind = type(now)
    if kind is not type(value):
        return False
    if kind is tuple or kind is list:
        return len(now) == len(value) and all(map(_same_setting, now, value))
    return id(kind) in _PLAIN_SETTING_TYPES and now == value


_PLAIN_SETTING_TYPES = frozenset(
    map(id, (bool, int, float, str, type(None), torch.dtype, torch.device))
)  # (the types themselves live as long as the process: their ids are never another's)


def _restore_modes(base: Baseline, found: list[str], library_code) -> None:
    C = _NAMESPACE(**base.tools)
    modes = [C._get_function_stack_at(i) for i in range(C._len_torch_function_stack())]
    if len(modes) != len(base.function_modes) or any(
        a is not b for a, b in zip(modes, base.function_modes, strict=False)
    ):
        for mode in modes:
            if not any(mode is b for b in base.function_modes) and not library_code(mode):
                found.append(f"it left a torch function mode on ({_name_of(mode)})")
        base.removed.append(modes)  # held: no __del__ of the notebook's runs here
        while C._len_torch_function_stack():
            C._pop_torch_function_stack()
        for mode in base.function_modes:
            C._push_on_torch_function_stack(mode)
    current, context = base.default_device  # torch.set_default_device: a mode and two records
    if C.device_module.get("CURRENT_DEVICE") is not current:
        base.removed.append(C.device_module.get("CURRENT_DEVICE"))
        C.device_module["CURRENT_DEVICE"] = current
    # (a threading.local: its dict for this thread, read through the C type's own lookup,
    # its keys made names only, as for the modules' dicts)
    held = _local_dict(C.device_context)
    _names_only(held, "torch's default device context", base, found)
    if dict.get(held, "device_context") is not context:
        base.removed.append(dict.get(held, "device_context"))
        held["device_context"] = context
    modes = [C._get_dispatch_stack_at(i) for i in range(C._len_torch_dispatch_stack())]
    if len(modes) != len(base.dispatch_modes) or any(
        a is not b for a, b in zip(modes, base.dispatch_modes, strict=False)
    ):
        for mode in modes:
            if not any(mode is b for b in base.dispatch_modes) and not library_code(mode):
                found.append(f"it left a torch dispatch mode on ({_name_of(mode)})")
        base.removed.append(modes)
        while C._len_torch_dispatch_stack():
            C._pop_torch_dispatch_stack(None)
        for mode in base.dispatch_modes:
            C._push_on_torch_dispatch_stack(mode)
    if C.transform_depth() != base.transforms:  # a vmap or grad level never left
        found.append("it left a torch.func transform level on (vmap, grad or jvp)")
        C.undo_transforms(base.transforms)
    for key, mode in base.infra_modes.items():
        now = C._get_dispatch_mode(key)
        if now is not mode:
            if now is not None and not library_code(now):
                found.append(f"it left a torch dispatch mode on ({_name_of(now)})")
            base.removed.append(now)
            C._unset_dispatch_mode(key)
            if mode is not None:
                C._set_dispatch_mode(mode)


def _restore_dispatch_keys(base: Baseline, found: list[str]) -> None:
    """Dispatch keys left included or excluded (``torch._C._ExcludeDispatchKeyGuard``...):
    compared after the settings, whose own keys (inference mode, autocast) are theirs."""
    C = _NAMESPACE(**base.tools)
    include, exclude = base.dispatch_keys
    now_include = str(C._dispatch_tls_local_include_set())
    now_exclude = str(C._dispatch_tls_local_exclude_set())
    if now_include != include or now_exclude != exclude:
        found.append("it left dispatch keys included or excluded for later computation")
        for wanted, now, put in (
            (include, now_include, C._dispatch_tls_set_dispatch_key_included),
            (exclude, now_exclude, C._dispatch_tls_set_dispatch_key_excluded),
        ):
            wanted, now = _keys_in(wanted), _keys_in(now)
            for name in wanted ^ now:
                key = C.dispatch_keys_by_name.get(name)  # (taken at take(): see there)
                if key is not None:
                    put(key, name in wanted)


def _keys_in(text: str) -> set[str]:
    """The key names in a ``DispatchKeySet(A, B)`` text."""
    inner = text[text.find("(") + 1 : text.rfind(")")]
    return {name.strip() for name in inner.split(",") if name.strip()}


def _restore_hooks(base: Baseline, found: list[str], library_code) -> None:
    """Torch's global hooks (dicts keyed by handle numbers), default saved-tensor hooks and
    gc callbacks, put back. A dict's entries are compared by identity, never looked up (a
    key of the notebook's class would run its ``__hash__`` and ``__eq__``), and what is
    taken off is kept (``Baseline.removed``), so none of its ``__del__`` runs here."""
    for label, namespace, name, container, copy in base.containers:
        now = namespace.get(name)
        if now is container and _same_items(container, copy):
            continue
        held = list(dict.items(now)) if issubclass(type(now), dict) else []
        base.removed.append((now, held))
        then = {(id(k), id(v)) for k, v in dict.items(copy)}  # ints: the handles' numbers
        added = [v for k, v in held if (id(k), id(v)) not in then]
        if now is not container or not all(map(library_code, added)):
            found.append(f"it left a global hook in {label}")
        namespace[name] = container
        base.removed.append(list(dict.items(container)))
        container.clear()  # torch's own OrderedDict, as take() found it: its methods are C's
        container.update(copy)
    for label, namespace, name, value in base.values:
        now = namespace.get(name)
        if now is not value:
            base.removed.append(now)
            namespace[name] = value
            found.append(f"it changed {label}")
    top_saved, pop_saved = base.tools["top_saved"], base.tools["pop_saved"]
    top = top_saved(True)
    if not _same_hooks(top, base.saved_tensor_hooks):
        if not all(library_code(hook) for hook in top or ()):
            found.append("it left default saved-tensor hooks on (they see every backward)")
        for _ in range(1000):
            top = top_saved(True)
            if _same_hooks(top, base.saved_tensor_hooks):
                break
            base.removed.append(top)
            pop_saved()
    callbacks, then = base.gc_list, base.gc_callbacks
    if len(callbacks) != len(then) or any(
        c is not b for c, b in zip(callbacks, then, strict=False)
    ):
        # by identity: a list's != would run a notebook callback's own __eq__ here
        added = [c for c in callbacks if not any(c is b for b in base.gc_callbacks)]
        if any(not library_code(c) for c in added):
            found.append("it left a gc callback (run at every collection)")
        base.removed.append(list(callbacks))
        callbacks[:] = base.gc_callbacks


def _same_items(container: dict, copy: dict) -> bool:
    """Whether ``container`` holds the very keys and values of ``copy``, in order (read in C:
    no key is hashed or compared)."""
    return (
        len(container) == len(copy)
        and not any(map(_IS_NOT, dict.keys(container), dict.keys(copy)))
        and not any(map(_IS_NOT, dict.values(container), dict.values(copy)))
    )


def _same_hooks(now, then) -> bool:
    """The same saved-tensor hooks, by identity: ``==`` on tuples would call a notebook
    hook's own ``__eq__``."""
    if now is then:
        return True
    if type(now) is not tuple or type(then) is not tuple or len(now) != len(then):
        return False
    return all(a is b for a, b in zip(now, then, strict=True))


def _frame_hooks(originals: dict) -> list:
    """torch._dynamo's hooks on frame evaluation, each handed every frame as it starts (its
    locals and globals): (what, getter, setter, value now), where this torch has them. The
    setter is torch's own where ``originals`` has it (frame_hook_guard.py), called from the
    frame that reads the hook, with no Python frame between the reading and the setting.
    A callback left on still sees the frames that lead there (``restore``'s own), but none
    inside the guard: through the guard, one that set the hook again as it saw the guard's
    frames once held the grader until its time ran out. Taken once: a second :func:`take`
    in the same process gets the guarded setters."""
    try:
        from torch._C._dynamo import eval_frame
    except ImportError:  # a torch without dynamo: nothing to put back
        return []
    hooks = []
    for what, get, put in (
        (
            "a frame-evaluation callback (torch._dynamo's set_eval_frame)",
            "get_eval_frame_callback",
            "set_eval_frame",
        ),
        (
            "a bytecode debugger callback (torch._dynamo's)",
            "get_bytecode_debugger_callback",
            "set_bytecode_debugger_callback",
        ),
    ):
        getter = getattr(eval_frame, get, None)
        setter = originals.get(put) or getattr(eval_frame, put, None)
        if callable(getter) and callable(setter):
            hooks.append((what, getter, setter, getter()))
    return hooks


def _restore_tracing(base: Baseline, found: list[str], library_code) -> None:
    for what, get, put, value in base.frame_hooks:  # first: they see every frame after this
        now = get()
        if now is not value:
            base.removed.append(now)  # held: no __del__ of the notebook's runs here
            put(value)  # before any other frame of the grader's starts, then judged
            if now is not None and not library_code(now):
                found.append(f"it left {what} on, which is handed every frame")
    tools = base.tools
    trace, profile, thread_trace, thread_profile = base.tracing
    for what, get, put, value in (
        ("a trace function (sys.settrace)", "gettrace", "settrace", trace),
        ("a profile function (sys.setprofile)", "getprofile", "setprofile", profile),
        (
            "a trace function for new threads",
            "threading_gettrace",
            "threading_settrace",
            thread_trace,
        ),
        (
            "a profile function for new threads",
            "threading_getprofile",
            "threading_setprofile",
            thread_profile,
        ),
    ):
        now = tools[get]()
        if now is not value:
            if now is not None and not library_code(now):
                found.append(f"it left {what} on")
            base.removed.append(now)
            tools[put](value)


def silence() -> None:
    """Logging off and every warning ignored in the hand-in's process, from before its
    first cell (the runner calls this before :func:`take`, so that put-back keeps it so):
    torch logs and warns from inside its computation, and what logging and warnings then
    run (a handler's or formatter's attributes, the stream it writes to, the functions a
    warning is formatted with, ``linecache``) is reachable from a cell in more places than
    put-back compares. With both off, none of it runs. No check reads a log or a warning."""
    logging.disable(logging.CRITICAL)
    warnings.simplefilter("ignore")


def _restore_logging(base: Baseline, found: list[str], library_code) -> None:
    """Levels, ``propagate``, ``disabled`` and ``logging.disable`` are settings, put back
    without a flag (``logging.basicConfig`` in a cell is honest); a handler or filter on the
    root logger or one of torch's is code that runs inside torch's computation: taken off,
    and flagged unless it is the libraries' own. So is anything else of such a logger that
    logging runs or reads (an attribute set over one of its methods, its ``parent``, its
    class): put back as it was, and named. Torch's loggers made since start bare. What is
    taken off is kept (``Baseline.removed``), so none of its ``__del__`` runs here."""
    _restore_warnings(base, found, library_code)
    manager = base.tools["logging_manager"]
    settings = _attributes(manager, base.dict_slots)
    _names_only(settings, "logging's manager of loggers", base, found)
    changed = False
    table = base.tools["logger_table"]
    if dict.get(settings, "loggerDict") is not table:
        base.removed.append(dict.get(settings, "loggerDict"))
        settings["loggerDict"] = table
        found.append("it replaced logging's table of loggers")
    if dict.get(settings, "_disable") is not base.logging_disabled:  # (``disable``'s own)
        base.removed.append(dict.get(settings, "_disable"))  # held: no __del__ runs here
        settings["_disable"] = base.logging_disabled
        changed = True
    made_as = dict.get(settings, "loggerClass")  # the class of every logger made from now
    if made_as is not base.tools["logger_class_made"]:
        if not library_code(made_as):
            found.append("it set the class logging makes new loggers of (setLoggerClass)")
        base.removed.append(made_as)
        settings["loggerClass"] = base.tools["logger_class_made"]
    roots = (dict.get(settings, "root"), base.loggers[0][0] if base.loggers else None)
    pairs = _loggers_now(base, manager)
    if not base.logger_quick or base.logger_quick[0] is not pairs:
        base.logger_quick = (pairs, _loggers_at_take(pairs, base.dict_slots))
    quick = base.logger_quick[1]
    if _loggers_unchanged(quick):  # the common case: every logger held since take() as it was
        # each level cache emptied (isEnabledFor reads it before disable): the very dicts
        # take() saw, still held (checked just now)
        # (what they held kept: a value of the notebook's finalized here would run its code
        # inside put-back)
        base.removed.append(list(filter(None, map(dict.copy, quick.caches))))
        _EXHAUST(map(dict.clear, quick.caches))
        pairs = quick.others  # those made since, looked at one by one
    for logger, state in pairs:
        if state[6] is not None and type(logger) is not state[6]:
            base.removed.append(type(logger))
            try:
                _SET_CLASS(logger, state[6])
                found.append(f"it changed the class of {_logger_name(logger, roots)}")
            except TypeError:
                found.append(f"it changed the class of {_logger_name(logger, roots)} (kept)")
            changed = True
        held = _attributes(logger, base.dict_slots)  # the logger's own dict: no method runs
        if state[7] is not None:
            if not _as_taken(held, state):
                _put_back_dict(held, state, _logger_name(logger, roots), base, found, library_code)
                changed = True
            elif state[10] >= 0:  # its level cache, the very dict take() saw: emptied, as
                cache = state[8][state[10]]  # isEnabledFor reads it before disable; what
                base.removed.append(list(dict.items(cache)))  # it held kept: no __del__
                dict.clear(cache)
            continue
        if not _plain_new_logger(logger, held, library_code):  # made since take()
            name = _logger_name(logger, roots)
            _put_back_new_logger(logger, held, name, base, found, library_code)
            held = _attributes(logger, base.dict_slots)
            changed = True
        _, level, handlers, filters, propagate, disabled = state[:6]
        for what, key, before in (
            ("handler", "handlers", handlers),
            ("filter", "filters", filters),
        ):
            held_now = dict.get(held, key)
            if _same_list(held_now, before):  # the common case, decided in C
                continue
            now = _items_of(held_now)
            added = [item for item in now if not any(item is old for old in before)]
            if added or len(now) != len(before) or type(held_now) is not list:
                if not all(library_code(item) for item in added):
                    name = _logger_name(logger, roots)
                    found.append(f"it added a logging {what} of its own to {name}")
                base.removed.append(held_now)
                held[key] = list(before)  # a new list: the old one may be a subclass's
        if (
            dict.get(held, "level") is not level
            or dict.get(held, "propagate") is not propagate
            or dict.get(held, "disabled") is not disabled
        ):
            base.removed.append([dict.get(held, key) for key in _SETTINGS])  # held, as above
            held.update(zip(_SETTINGS, (level, propagate, disabled), strict=True))
            changed = True
    if changed:
        _clear_caches(table, base)


@dataclass
class _LoggersAtTake:
    """The loggers :func:`take` read, as flat tuples, so that :func:`_loggers_unchanged` can
    tell that none changed in a few C-level passes (``map`` over C functions) rather than a
    Python step per logger: ``put_back`` runs before and after every test, over some 170
    loggers. It decides only "all as taken"; any difference is put back and named by the
    per-logger path, as before. Each logger's dict is read through the C getset that reads
    it (:func:`_attributes`' cache), its keys and values compared by identity, in order, and
    its handlers and filters lists item by item; nothing is hashed, looked up by name or
    compared with ``==`` but the lengths (ints). Data only: the functions that read it are
    this module's, which the runner runs from a private copy of its globals."""

    others: list  # (logger, state) of loggers made since take(): looked at one by one
    loggers: tuple
    classes: tuple
    slots: tuple  # the __dict__ getset of each one's class
    lengths: list
    keys: tuple
    values: tuple
    lists: tuple  # their handlers and filters lists, as taken
    list_lengths: list
    items: tuple
    caches: tuple  # their level caches, as taken
    dicts: tuple = ()  # their dicts when this was made, a view of each one's version tag,
    dict_views: list | None = None  # and each tag when its keys and values were last
    dict_tags: list = field(default_factory=list)  # found as taken (dict_versions.py)


def _loggers_at_take(pairs: list, dict_slots: dict) -> _LoggersAtTake:
    held, others, slots = [], [], []
    for logger, state in pairs:
        kind = state[6]
        if state[7] is None or kind is None or type(logger) is not kind:
            others.append((logger, state))
            continue
        _attributes(logger, dict_slots)  # finds and keeps the getset of its class
        kept = dict_slots.get(id(kind))
        if kept is None or kept[1] is not kind:
            others.append((logger, state))
            continue
        held.append(state)
        slots.append(kept[0])
    dicts = list(map(_GETSET_GET, slots, (state[0] for state in held)))
    views = dict_versions.views(dicts) if all(_TYPE(d) is dict for d in dicts) else None
    lists, items = [], []
    for state in held:
        for at, before in zip(state[9], state[2:4], strict=True):
            if at >= 0:
                lists.append(state[8][at])
                items.append(before)
    return _LoggersAtTake(
        others=others,
        loggers=tuple(state[0] for state in held),
        classes=tuple(state[6] for state in held),
        slots=tuple(slots),
        lengths=[len(state[7]) for state in held],
        keys=tuple(itertools.chain.from_iterable(state[7] for state in held)),
        values=tuple(itertools.chain.from_iterable(state[8] for state in held)),
        lists=tuple(lists),
        list_lengths=[len(before) for before in items],
        items=tuple(itertools.chain.from_iterable(items)),
        caches=tuple(state[8][state[10]] for state in held if state[10] >= 0),
        dicts=tuple(dicts),
        dict_views=views,
        dict_tags=[-1] * len(dicts),  # (-1: never a tag) compared whole the first time
    )


def _loggers_unchanged(quick: _LoggersAtTake) -> bool:
    """Whether every logger held since take() has its class, and a dict of the very keys
    and values, handlers and filters it had then."""
    if any(map(_IS_NOT, map(_TYPE, quick.loggers), quick.classes)):
        return False
    try:
        held = list(map(_GETSET_GET, quick.slots, quick.loggers))
    except (AttributeError, TypeError):
        return False
    if any(map(_IS_NOT, map(_TYPE, held), _ALWAYS_DICT)):
        return False
    # the very dicts, unchanged since their keys and values were last found as taken (each
    # one's version tag, read before them: a change after it is seen next time), or read
    views = quick.dict_views if len(held) == len(quick.dicts) else None
    tags = list(map(_VERSION, views)) if views is not None else None
    if tags is None or tags != quick.dict_tags or any(map(_IS_NOT, held, quick.dicts)):
        if list(map(len, held)) != quick.lengths:  # (a list of ints: compared in C)
            return False
        if any(map(_IS_NOT, _CHAIN(map(dict.keys, held)), quick.keys)):
            return False
        if any(map(_IS_NOT, _CHAIN(map(dict.values, held)), quick.values)):
            return False
        if tags is not None and not any(map(_IS_NOT, held, quick.dicts)):
            quick.dict_tags = tags
    # the lists are the very objects taken (the values above): now their items
    if any(map(_IS_NOT, map(_TYPE, quick.lists), _ALWAYS_LIST)):
        return False
    if list(map(len, quick.lists)) != quick.list_lengths:
        return False
    return not any(map(_IS_NOT, _CHAIN(quick.lists), quick.items))


_GETSET_GET = types.GetSetDescriptorType.__get__
_CHAIN = itertools.chain.from_iterable
_ALWAYS_DICT = itertools.repeat(dict)
_ALWAYS_STR = itertools.repeat(str)
_ALWAYS_LIST = itertools.repeat(list)
_EXHAUST = collections.deque(maxlen=0).extend


_LOGGER_KEYS = frozenset(  # what logging itself puts in a logger's dict
    {"filters", "name", "level", "parent", "propagate", "handlers", "disabled", "_cache", "manager"}
)


def _plain_new_logger(logger, held: dict, library_code) -> bool:
    """Whether a torch logger made since :func:`take` is of a library's class and holds in
    its dict only what logging puts there (names read as items, compared as exact str)."""
    if type(logger) is not _LOGGER and not library_code(type(logger)):
        return False
    return all(type(key) is str and key in _LOGGER_KEYS for key in list(dict.keys(held)))


def _put_back_new_logger(logger, held: dict, name: str, base, found, library_code) -> None:
    """A torch logger made since :func:`take` with a class or attributes of the notebook's
    (a method set on it, which a torch module imported later would call): made a plain
    ``Logger`` holding only what logging puts in one, and named."""
    if type(logger) is not _LOGGER:
        try:
            _SET_CLASS(logger, _LOGGER)
            found.append(f"it made {name} of a class of its own")
        except TypeError:
            found.append(f"it made {name} of a class of its own (kept)")
    items = list(dict.items(held))
    base.removed.append(items)  # held: no __del__ of the notebook's runs here
    kept = {k: v for k, v in items if type(k) is str and k in _LOGGER_KEYS}
    if len(kept) != len(items):
        extra = [v for k, v in items if not (type(k) is str and k in _LOGGER_KEYS)]
        if not all(map(library_code, extra)) or len(extra) != len(items) - len(kept):
            found.append(f"it set attributes of its own on {name}")
        dict.clear(held)
        dict.update(held, kept)


def _logger_name(logger, roots) -> str:
    """How a flag names a logger (its ``name`` read as an item of its own dict)."""
    if any(logger is root for root in roots):
        return "the root logger"
    name = _item(_attributes(logger), "name")
    return name if type(name) is str else "a logger"


def _as_taken(held: dict, state: tuple) -> bool:
    """Whether a logger's dict holds the very keys and values it held at :func:`take`, in
    order, and its handlers and filters lists the same items: read in C, nothing looked up
    by name (a key of the notebook's could be compared)."""
    keys, values, (handlers_at, filters_at) = state[7], state[8], state[9]
    if (
        len(held) != len(keys)
        or any(map(_IS_NOT, dict.keys(held), keys))
        or any(map(_IS_NOT, dict.values(held), values))
    ):
        return False
    return (handlers_at < 0 or _same_list(values[handlers_at], state[2])) and (
        filters_at < 0 or _same_list(values[filters_at], state[3])
    )


def _put_back_dict(held: dict, state: tuple, name: str, base, found, library_code) -> None:
    """Put a logger's dict back as :func:`take` found it (handlers and filters as they were,
    settings as they were, a fresh ``_cache``), naming what the notebook changed. Its keys
    are read as items and compared as exact ``str`` only; the dict is emptied and filled
    again rather than searched, so no key of the notebook's is hashed or compared."""
    _, level, handlers, filters, propagate, disabled, _, keys, values, _, _ = state
    then = dict(zip(keys, values, strict=True))
    items = list(dict.items(held))
    base.removed.append(items)  # the notebook's objects taken off stay alive: no __del__
    seen = set()
    for key, value in items:
        if type(key) is not str:
            found.append(f"it gave {name} an attribute of its own")
            continue
        seen.add(key)
        if key in ("handlers", "filters"):
            before = handlers if key == "handlers" else filters
            now = _items_of(value)
            added = [item for item in now if not any(item is old for old in before)]
            if (added or type(value) is not list) and not all(map(library_code, added)):
                what = "handler" if key == "handlers" else "filter"
                found.append(f"it added a logging {what} of its own to {name}")
        elif key == "_cache":  # logging's own, emptied as levels change: a fresh one
            if type(value) is not dict:
                found.append(f"it changed {name}._cache")
        elif key in _SETTINGS:
            continue
        elif key not in then:
            if not library_code(value):  # (torch's own logging sets some: set_logs)
                found.append(f"it set {name}.{key} to code of its own")
        elif value is not then[key] and not library_code(value):
            found.append(f"it changed {name}.{key}")
    for key in then:
        if key not in seen:
            found.append(f"it took {name}.{key} away")
    then.update(
        handlers=list(handlers),
        filters=list(filters),
        _cache={},
        level=level,
        propagate=propagate,
        disabled=disabled,
    )
    dict.clear(held)
    dict.update(held, then)


def _clear_caches(table: dict, base) -> None:
    """What ``Manager._clear_cache`` does, without running any ``clear`` of the notebook's:
    each logger's ``_cache`` of levels emptied (a fresh dict where it is not a plain one)."""
    loggers = [state[0] for state in base.loggers]
    loggers += [v for v in list(dict.values(table)) if issubclass(type(v), _LOGGER)]
    for logger in loggers:
        held = _attributes(logger, base.dict_slots)
        cache = _item(held, "_cache", _ABSENT)
        if type(cache) is dict:
            base.removed.append(list(dict.items(cache)))  # held: no __del__ runs here
            dict.clear(cache)
        elif cache is not _ABSENT:
            base.removed.append(cache)
            _names_only(held, _logger_name(logger, ()), base, [])  # (named where it was read)
            held["_cache"] = {}


def _same_list(now, before: tuple) -> bool:
    """Whether ``now`` is a plain list of the very items of ``before``, in order (its
    iteration is list's own, in C: nothing of a notebook's runs)."""
    return type(now) is list and len(now) == len(before) and not any(map(_IS_NOT, now, before))


_SETTINGS = ("level", "propagate", "disabled")  # a logger's, put back without a flag
_ABSENT = object()  # what _item gives where a dict holds no such key
_SET_CLASS = object.__dict__["__class__"].__set__  # C's own: no metaclass of the notebook's
# bound as the module is imported: a module whose class a notebook changes runs its code at
# every lookup of one of its names (put back first thing: _restore_module_classes)
_MODULE = types.ModuleType
_MODULE_DICT = types.ModuleType.__dict__["__dict__"].__get__
_NAMESPACE = types.SimpleNamespace
_LOGGER = logging.Logger
_COMPRESS = itertools.compress
_ALWAYS_MODULE = itertools.repeat(types.ModuleType)
_BY_NOTEBOOK = torch_registrations.by_notebook
_RECORDS_SINCE = torch_registrations.records_since
_TAKE_BACK = torch_registrations.take_back
_TAKEN_BACK_WHOLE = torch_registrations.the_notebooks_own


def _restore_warnings(base: Baseline, found: list[str], library_code) -> None:
    """torch warns from inside its computation: warnings' functions then run there
    (``showwarning``, the ``_showwarnmsg`` and ``_formatwarnmsg`` pairs, ``formatwarning``;
    ``_filters_mutated``, which ``catch_warnings`` calls). One that is not the libraries'
    own is code of the notebook's, put back and named (``logging.captureWarnings`` is
    honest: its function is logging's). The filters are settings: put back silently into
    the list warnings holds, unless the list itself was replaced by an object of the
    notebook's class (named). Read as the module's items, compared as exact ``str``."""
    module = base.tools["warnings"]
    functions, filters, copy = base.warnings
    namespace = _MODULE_DICT(module)
    now = {k: v for k, v in list(dict.items(namespace)) if type(k) is str and k in _WARNINGS_SET}
    for name, before in functions:
        if now.get(name) is not before:
            if not library_code(now.get(name)):
                found.append(f"it set warnings.{name} to code of its own")
            base.removed.append(now.get(name))
            namespace[name] = before
    held = now.get("filters")
    if held is not filters:
        if type(held) is not list:
            found.append("it replaced warnings.filters with an object of its own")
        base.removed.append(held)
        namespace["filters"] = filters
    if not _same_list(filters, tuple(copy)):
        # the filters taken off held: a notebook's filter finalized here would run its code
        # inside put-back, after the checks above (found by review)
        base.removed.append(list.copy(filters))
        list.__setitem__(filters, slice(None), copy)
        _FILTERS_MUTATED()


_WARNINGS_CODE = (
    "showwarning",
    "_showwarnmsg",
    "_showwarnmsg_impl",
    "formatwarning",
    "_formatwarnmsg",
    "_formatwarnmsg_impl",
    "_filters_mutated",
)
_WARNINGS_SET = frozenset({*_WARNINGS_CODE, "filters"})
_FILTERS_MUTATED = warnings._filters_mutated  # _warnings' own, bound before any hand-in


def _check_threads(base: Baseline, found: list[str], provenance) -> None:
    """Threads started since :func:`take` whose running code, or whose target, is the
    hand-in's: they run beside the tests, and cannot be stopped from here."""
    tools = base.tools
    if base.started_threads == 0 and tools["started_threads"]() == 0 and len(base.threads) <= 1:
        # no thread Python started runs now, as at take(): nothing to read (reading every
        # thread's frame raises an audit event that the runner's hook judges each time,
        # at every put-back). A thread made in C that runs Python (through ctypes, which
        # that hook reports) is seen only beside one Python started.
        return
    me = tools["get_ident"]()
    frames = tools["current_frames"]()
    if len(frames) <= len(base.threads) + 1 and frames.keys() <= base.threads | {me}:
        return
    idents = ((_item(_thread_dict(t), "_ident"), t) for t in _threads(tools["threading"]))
    targets = {ident: t for ident, t in idents if type(ident) is int}  # no __hash__ of its own
    for ident, frame in frames.items():
        if ident in base.threads or ident == me or ident in base.reported_threads:
            continue
        thread = targets.get(ident)
        objects = [thread] if thread is not None else []
        ours = True
        while frame is not None:
            ours = ours and provenance.is_library_frame(frame)
            # and the thread object its own frames run for (the ``self`` of threading's
            # bootstrap or run): one taken out of threading's tables, its ident changed,
            # or run by ``_thread.start_new_thread(timer.run, ())`` is found there
            # (found by review). Read only in threading's own code, whose locals' names
            # are threading's.
            if any(frame.f_code is code for code in tools["thread_codes"]):
                owner = dict.get(frame.f_locals, "self")
                if owner is not None and not any(owner is known for known in objects):
                    objects.append(owner)
            frame = frame.f_back
        for owner in objects:
            # read through Thread's own __dict__ slot, so no attribute lookup of a
            # notebook's Thread subclass runs here; its class (its run()) is judged, and
            # what threading will call (its target, a Timer's function, a function it is
            # handed: a Timer keeps its function elsewhere, found by review)
            ours = ours and provenance.is_library_callable(type(owner))
            ours = ours and all(
                map(provenance.is_library_callable, _callables_of(_thread_dict(owner)))
            )
        if not ours:
            base.reported_threads.add(ident)
            name = _item(_thread_dict(objects[0]) if objects else {}, "_name")
            name = name if type(name) is str else f"thread {ident}"
            found.append(f"a thread it started ({name}) still runs beside the tests")


def _threads(held: dict) -> list:
    """The threads ``threading`` knows of, read from its own tables (``_active``,
    ``_limbo``) as values, in C. Not ``threading.enumerate``: it enters
    ``_active_limbo_lock``, a global a cell can rebind to an object whose ``__enter__``
    then ran at every put-back (found by review). ``held`` is threading's dict, whose keys
    put-back has made names only (:func:`_names_only`) before it is read here."""
    found = []
    for name in ("_active", "_limbo"):
        table = dict.get(held, name)
        if type(table) is dict:
            found += list(dict.values(table))
    return found


def _callables_of(held: dict) -> list:
    """What threading's classes will call for a thread object (read as items of its dict,
    exact ``str`` names only): its target, a Timer's function, and the functions it is
    handed as arguments (a function, a method or a ``partial`` in its arguments, one level
    down). Other objects it holds or is handed are data (a model saved by
    ``Thread(target=torch.save, args=(model, path))``, an attribute set on it): judging
    them flagged honest threads (found by review)."""
    found, arguments = [], []
    for name, value in list(dict.items(held)):
        if type(name) is not str:
            continue
        if name in _THREAD_CALLS:
            found.append(value)
        elif name in _THREAD_ARGUMENTS:
            kind = type(value)
            if kind is tuple or kind is list:
                arguments += list(value)
            elif kind is dict:
                arguments += list(dict.values(value))
    found += [item for item in arguments if _is_function(item)]
    return [item for item in found if item is not None]


def _is_function(value) -> bool:
    """A function, a method, a builtin or a ``partial``: made to be called (by type, by
    identity: a metaclass's ``__eq__`` would run in ``in``)."""
    kind = type(value)
    return any(kind is known for known in _FUNCTION_TYPES) or issubclass(kind, functools.partial)


_THREAD_CALLS = frozenset({"_target", "function", "_invoke_excepthook"})
_THREAD_ARGUMENTS = frozenset({"_args", "_kwargs", "args", "kwargs"})
_FUNCTION_TYPES = (
    types.FunctionType,
    types.MethodType,
    types.BuiltinFunctionType,
    types.BuiltinMethodType,
    types.MethodWrapperType,
)


def _thread_dict(thread) -> dict:
    """A thread object's attributes, through ``Thread``'s own ``__dict__`` slot (C: checks
    the object's real type, runs no method of a subclass)."""
    try:
        held = _THREAD_DICT(thread)
    except (AttributeError, TypeError):
        return {}
    return held if type(held) is dict else {}


_THREAD_DICT = threading.Thread.__dict__["__dict__"].__get__


def _check_library(base: Baseline, found: list[str], provenance) -> None:
    """Kernels and operators registered with torch's dispatcher by the notebook's code since
    :func:`take` (:mod:`coursekit.grading.sandbox.torch_registrations`): flagged, taken back."""
    for owner, name, watcher in base.watchers:
        is_class = issubclass(type(owner), type)  # torch.library.Library, or torch._C
        held = _CLASS_DICT(owner) if is_class else _MODULE_DICT(owner)  # (modules': plain)
        if is_class and _odd_keys(held):  # a class's dict, written past type's setattr
            found.append(f"it put a key that is not a name in {_TYPE_QUALNAME(owner)}")
            now = next((v for k, v in list(held.items()) if type(k) is str and k == name), None)
        else:
            now = held.get(name)
        if now is not watcher:
            label = _TYPE_QUALNAME(owner) if is_class else _module_name(owner)
            found.append(f"it changed {label}.{name}")
    new, count = _RECORDS_SINCE(base.registrations, base.registrations_seen)
    records = None  # all of them, read only where one is judged
    for entry in new:
        if not _made_by_the_wrappers(entry):  # read no further: its parts could run code
            found.append("it added to the record of torch.library registrations")
            continue
        what, stack, owner, handed = entry
        # the notebook's: made by its code, or handed a function of its code to run (a
        # kernel), whoever called torch (copy, asyncio, a mock's side effect: found by
        # review; torch's own kernels, closures over torch's objects, are torch's code)
        if not _BY_NOTEBOOK(stack, provenance) and not _notebooks_code_in(handed, provenance):
            continue
        records = records or _RECORDS_SINCE(base.registrations, 0)[0]
        if _TAKEN_BACK_WHOLE(owner, records, provenance):
            found.append(f"it registered {what} with torch's dispatcher (torch.library)")
            _TAKE_BACK(owner, base.removed, provenance)
        else:  # a handle torch made: undoing it would take torch's own kernels off too
            found.append(
                f"it registered {what} with torch's dispatcher on a handle torch made "
                "(this cannot be taken back: the tests after it ran with it)"
            )
    base.registrations_seen = count


def _notebooks_code_in(handed: tuple, provenance) -> bool:
    """Whether a registration was handed a function whose code is the notebook's: as it
    is, inside a ``functools.partial`` or a bound method (read through their C slots), or
    as the ``__call__`` of its class (read as items of the classes' dicts). Judged by the
    code object only (:meth:`Provenance.is_library`): the closures torch makes over its
    own objects as it registers lazily are its code."""
    for item in handed:
        inner = [item]
        if issubclass(_TYPE(item), functools.partial):
            inner += [_PARTIAL_FUNC(item), *_PARTIAL_ARGS(item), *_PARTIAL_KEYWORDS(item).values()]
        elif _TYPE(item) is types.MethodType:
            inner.append(_METHOD_FUNC(item))
        for klass in _MRO(_TYPE(item)):  # (type's own slot: no metaclass of the notebook's)
            members = list(_CLASS_DICT(klass).items())
            inner += [v for k, v in members if _TYPE(k) is str and k == "__call__"]
        for function in inner:
            if _TYPE(function) is types.FunctionType and not provenance.is_library(
                _FUNCTION_CODE(function)
            ):
                return True
    return False


_PARTIAL_FUNC = functools.partial.func.__get__
_PARTIAL_ARGS = functools.partial.args.__get__
_PARTIAL_KEYWORDS = functools.partial.keywords.__get__
_METHOD_FUNC = types.MethodType.__func__.__get__
_FUNCTION_CODE = types.FunctionType.__code__.__get__


def _made_by_the_wrappers(entry) -> bool:
    """Whether a record is of the form the registration wrappers make, ``(what, stack,
    owner, handed)`` with the stack a list of ``(code, globals, offset)`` and ``handed`` a
    tuple, read by exact types (the ledger takes what any caller sends it, and a notebook's
    object here could run its code as the stack is judged)."""
    if type(entry) is not tuple or len(entry) != 4:
        return False
    what, stack, _, handed = entry
    return (
        type(what) is str
        and type(handed) is tuple
        and type(stack) is list
        and all(
            type(frame) is tuple
            and len(frame) == 3
            and type(frame[0]) is types.CodeType
            and issubclass(type(frame[1]), dict)
            and type(frame[2]) is int
            for frame in stack
        )
    )


def _name_of(mode) -> str:
    """A mode's class's name, read through ``type``'s own descriptors (a metaclass of the
    notebook's cannot run code here)."""
    cls = type(mode)
    try:
        parts = (_TYPE_MODULE(cls), _TYPE_QUALNAME(cls))
    except Exception:  # noqa: BLE001 - a name is only for the flag's text
        return "?"
    return ".".join(part if type(part) is str else "?" for part in parts)


_TYPE_MODULE = type.__dict__["__module__"].__get__
_TYPE_QUALNAME = type.__dict__["__qualname__"].__get__
