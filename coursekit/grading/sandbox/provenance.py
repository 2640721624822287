"""Whose code is this? Decided from what a hand-in cannot forge.

A code object names its own file (``co_filename``), and a hand-in can give its code any name:
``compile(source, torch.__file__, "exec")``, ``code.replace(co_filename=...)`` or
``marshal.loads`` of bytes it made. So a file name alone never makes code the libraries'.
Here a code object counts as library code only when

- it existed before any hand-in code ran (:meth:`Provenance.seal`, in the warm parent, keeps
  every code object reachable from a function alive and known by identity), or
- it is, field for field (bytecode, constants, names, line table), code compiled from the text
  of a file under a trusted folder (Python, site-packages, coursekit) as that file is on
  disk, which the hand-in can read but not write: a module imported later, honestly.

Code equal to the library's behaves as the library's, whoever made the object; code is not
all a function runs, though. :meth:`Provenance.is_library_callable` judges everything a callable
can run: its code, its globals (a library module's own namespace, known by identity:
:meth:`Provenance.is_library_globals`), its closure cells, defaults and keyword defaults, a
``functools.partial``'s function, arguments and keywords, a bound method's ``__self__`` and
``__func__``, ``__wrapped__``, and a callable object's class, recursively (to
:data:`MAX_DEPTH`, each object once). :meth:`Provenance.is_library_frame` judges a running
frame the same way: library code running in a library module's namespace. So
``types.FunctionType(torch_function.__code__, notebook_dict)`` is the notebook's, and so is a
``partial`` of a library function bound to a notebook lambda, and anything that holds or
hands on a library function that runs what it is given (``partial(eval, "...")``,
``partial(operator.call, exec, "...")``: :data:`_C_RUNNERS`, :data:`_PYTHON_RUNNERS`).

A namespace is a library module's when it was one before any hand-in code ran (recorded by
:meth:`Provenance.seal` and :meth:`Provenance.trust`), when it is a private copy the grader made
(:meth:`Provenance.trust_globals`), or when the import system executed a library file's own code
into it (:meth:`Provenance.note_exec`, fed by the audit hook). Data a library function is bound
to (a partial's number, a default) is judged by who made the function only where a replacement
is judged (``strict``): a library may wrap its own functions, a notebook may not pass off a
library function with other defaults as that function. A library module's namespace that a
notebook changes afterwards is still that module's: the seal watches those the harness uses.
"""

from __future__ import annotations

import collections
import functools
import gc
import sys
import types
import weakref

_CODE = types.CodeType
_MODULE = types.ModuleType
_MOST_FILE_BYTES = 8 * 2**20  # larger "sources" are not Python files of a library
MAX_DEPTH = 8  # how deep is_library_callable looks inside a callable
_BUILTIN_CALLABLES = (
    types.BuiltinFunctionType,
    types.MethodWrapperType,
    types.WrapperDescriptorType,
    types.MethodDescriptorType,
    types.ClassMethodDescriptorType,
)


def _ids(*kinds) -> frozenset:
    """Types, by identity: ``kind in {...}`` would hash ``kind``, and so run a notebook
    metaclass's ``__hash__``; an ``int`` id hashes as C does."""
    return frozenset(map(id, kinds))


# Data no code of the notebook's runs in (exact types: a subclass's methods are its own).
_PLAIN = _ids(str, bytes, int, float, complex, bool, type(None), type(...))
# C descriptors of a class's own slots and methods: they run only C.
_INERT = _ids(
    types.GetSetDescriptorType,
    types.MemberDescriptorType,
    types.MethodDescriptorType,
    types.WrapperDescriptorType,
    types.ClassMethodDescriptorType,
)
_BUILTIN = _ids(*_BUILTIN_CALLABLES)  # none of these types can be subclassed
_EXACT = _ids(
    types.FunctionType,
    types.MethodType,
    functools.partial,
    staticmethod,
    classmethod,
    property,
    type,
    *_BUILTIN_CALLABLES,
)
_UNSEEABLE = _ids(weakref.ProxyType, weakref.CallableProxyType)  # their referent is hidden
_HOLDS_KINDS = (  # the C types of containers, and how to read what one holds without its code
    (dict, lambda value: [*dict.keys(value), *dict.values(value)]),
    (list, list.copy),
    (tuple, lambda value: tuple.__getitem__(value, slice(None))),
    (set, lambda value: list(set.__iter__(value))),
    (frozenset, lambda value: list(frozenset.__iter__(value))),
    (collections.deque, lambda value: list(collections.deque.__iter__(value))),
)
_HOLDERS = _ids(*(base for base, _ in _HOLDS_KINDS))  # their items are read as items
_DEFAULT_FACTORY = collections.defaultdict.__dict__["default_factory"].__get__
# what a partial, a static or class method, or a property runs, read through the base type's
# own C slot: a subclass that passes can still shadow ``func`` or ``fget`` with a property
_PARTIAL_PARTS = tuple(functools.partial.__dict__[n].__get__ for n in ("func", "args", "keywords"))
_WRAPPED_FUNC = (
    (staticmethod, staticmethod.__dict__["__func__"].__get__),
    (classmethod, classmethod.__dict__["__func__"].__get__),
)
_PROPERTY_PARTS = tuple(property.__dict__[n].__get__ for n in ("fget", "fset", "fdel"))
_DICT_SLOT = types.GetSetDescriptorType
_DESCRIPTORS = (property, staticmethod, classmethod)
MOST_ITEMS = 4096  # a container larger than this is not judged, and so not the libraries'
_MRO = type.__dict__["__mro__"].__get__  # not a metaclass's __mro__ or __dict__
_CLASS_DICT = type.__dict__["__dict__"].__get__
_MODULE_DICT = _MODULE.__dict__["__dict__"].__get__
_FLAGS = type.__dict__["__flags__"].__get__
_IMMUTABLE_TYPE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE: its dict cannot change once made
_PROXY_KEYS = types.MappingProxyType.keys  # a class's own dict, always a real one
_PROXY_VALUES = types.MappingProxyType.values
_PROXY_ITEMS = types.MappingProxyType.items
_REFERENTS = gc.get_referents
_CACHED = functools._lru_cache_wrapper  # functools.lru_cache's, functools.cache's


# Library functions that run what they are given as data: text or code (``eval``,
# ``exec``, ``runpy.run_path``, a profiler's or debugger's ``run``, ``typing``'s evaluation
# of annotations), pickled bytes, a module's name or file (``import_module``, a C extension
# loaded by ``_imp``). Handed text, they run code of the notebook's making as library code,
# and any library function that calls what it is given (``operator.call``, ``map`` and what
# iterates it, ``sys.call_tracing``, a ``__call__`` wrapper) can hand it over. So a runner
# is the notebook's wherever the walk meets it: called, bound, held or handed on
# (:func:`_is_code_runner`). A C function goes by its C name alone (fixed in C: its
# ``__module__`` can be rebound, and a copy of a module made again has other objects), a
# Python function by its code's file and qualified name (a library's code names its real
# file). A library that calls one of these on text of its own is not judged here: its
# module's namespace and functions are, not the builtins they call.
_C_RUNNERS = frozenset(  # a C function's or method's own name
    {
        "eval",  # builtins
        "exec",
        "__import__",
        "loads",  # _pickle, and an Unpickler's load (marshal's too: it only makes code)
        "load",
        "create_dynamic",  # _imp: a C extension loaded from a file
        "exec_dynamic",
        "exec_builtin",
        "create_builtin",
    }
)
_PYTHON_RUNNERS = frozenset(
    {
        ("importlib/__init__.py", "import_module"),
        ("importlib/__init__.py", "__import__"),
        ("importlib/__init__.py", "reload"),
        ("importlib/_bootstrap.py", "_gcd_import"),
        ("importlib/_bootstrap.py", "_find_and_load"),
        ("importlib/_bootstrap.py", "_load"),
        ("importlib/_bootstrap.py", "_exec"),
        ("importlib/_bootstrap.py", "_call_with_frames_removed"),
        ("importlib/_bootstrap.py", "_load_unlocked"),
        ("importlib/_bootstrap.py", "_load_module_shim"),
        ("importlib/_bootstrap_external.py", "_LoaderBasics.exec_module"),
        ("importlib/_bootstrap_external.py", "_LoaderBasics.load_module"),
        ("importlib/_bootstrap_external.py", "FileLoader.load_module"),
        ("imp.py", "load_source"),
        ("imp.py", "load_module"),
        ("imp.py", "load_compiled"),
        ("imp.py", "load_package"),
        ("torch/serialization.py", "load"),  # pickles, where weights_only is turned off
        ("torch/hub.py", "load"),  # a hubconf.py run
        ("numpy/lib/_npyio_impl.py", "load"),  # pickles, where allow_pickle is on
        ("numpy/lib/npyio.py", "load"),
        ("shelve.py", "Shelf.__getitem__"),  # pickles
        ("importlib/_bootstrap_external.py", "SourceLoader.get_code"),
        ("runpy.py", "run_path"),
        ("runpy.py", "run_module"),
        ("runpy.py", "_run_code"),
        ("runpy.py", "_run_module_code"),
        ("runpy.py", "_run_module_as_main"),
        ("pickle.py", "_loads"),
        ("pickle.py", "_load"),
        ("pickle.py", "_Unpickler.load"),
        ("timeit.py", "timeit"),
        ("timeit.py", "repeat"),
        ("timeit.py", "Timer.__init__"),
        ("cProfile.py", "run"),
        ("cProfile.py", "runctx"),
        ("cProfile.py", "Profile.run"),
        ("cProfile.py", "Profile.runctx"),
        ("profile.py", "run"),
        ("profile.py", "runctx"),
        ("profile.py", "Profile.run"),
        ("profile.py", "Profile.runctx"),
        ("pdb.py", "run"),
        ("pdb.py", "runeval"),
        ("pdb.py", "runctx"),
        ("bdb.py", "Bdb.run"),
        ("bdb.py", "Bdb.runeval"),
        ("bdb.py", "Bdb.runctx"),
        ("trace.py", "Trace.run"),
        ("trace.py", "Trace.runctx"),
        ("doctest.py", "run_docstring_examples"),
        ("code.py", "interact"),
        ("code.py", "InteractiveInterpreter.runsource"),
        ("code.py", "InteractiveInterpreter.runcode"),
        ("code.py", "InteractiveConsole.push"),
        ("typing.py", "get_type_hints"),  # a string annotation is evaluated
        ("typing.py", "_eval_type"),
        ("typing.py", "ForwardRef._evaluate"),
        ("inspect.py", "get_annotations"),
        ("pydoc.py", "locate"),  # a name imported
        ("pkgutil.py", "resolve_name"),
        ("config.py", "dictConfig"),  # logging.config: factories named by their import path
        ("config.py", "fileConfig"),
        ("config.py", "BaseConfigurator.resolve"),
        ("config.py", "DictConfigurator.configure"),
    }
)
_BUILTIN_NAME = types.BuiltinFunctionType.__dict__["__name__"].__get__
_FUNCTION_CODE = types.FunctionType.__dict__["__code__"].__get__


def _is_code_runner(value) -> bool:
    """Whether ``value`` is one of the library functions above, as a function or a C
    function or method (a partial, bound method or ``__call__`` wrapper of one is walked to
    it). Read through C's own slots; a file or name that is not an exact ``str`` counts as
    one (no code of a notebook's runs here, and it is not a library's)."""
    kind = type(value)
    if kind is types.BuiltinFunctionType:
        return _BUILTIN_NAME(value) in _C_RUNNERS  # an exact str, made from C's own name
    if kind is not types.FunctionType:
        return False
    code = _FUNCTION_CODE(value)
    if type(code) is not _CODE:
        return True
    path, qualname = code.co_filename, code.co_qualname
    if type(path) is not str or type(qualname) is not str:
        return True
    if path.startswith("<frozen ") and path.endswith(">"):  # runpy, importlib's, in 3.11
        path = path[8:-1].replace(".", "/") + ".py"
    folder_and_file = "/".join(path.rsplit("/", 2)[-2:])
    file = folder_and_file.rsplit("/", 1)[-1]
    return (file, qualname) in _PYTHON_RUNNERS or (folder_and_file, qualname) in _PYTHON_RUNNERS


class Provenance:
    """Library code or not, for code objects, by identity or by recompiling its file."""

    def __init__(self, trusted: tuple[str, ...] = ()):
        self.trusted = tuple(trusted)
        self._known: dict[int, _CODE] = {}
        self._verified: dict[int, _CODE] = {}  # found to be a library file's code since
        self._by_file: dict[str, frozenset] = {}
        self._globals: dict[int, dict] = {}  # library namespaces, by identity
        self._pending: dict[int, tuple] = {}  # namespace id -> (namespace, code) to verify
        self._defaults: dict[int, list] = {}  # code id -> [(defaults, kwdefaults)] at seal
        self._functions: list = []  # every function at seal
        self._function_ids: frozenset = frozenset()
        self._also: list = []  # made since the seal by the grader, counted as at it
        self._also_ids: frozenset = frozenset()

    def seal(self) -> int:
        """Record every code object now reachable from a function (nested code included),
        before any hand-in code runs; returns how many. They are held, so no id is reused."""
        functions = [obj for obj in gc.get_objects() if type(obj) is types.FunctionType]
        self._functions = functions  # held: no id of theirs is reused
        self._function_ids = frozenset(map(id, functions))
        for function in functions:
            key = id(function.__code__)
            variants = self._defaults.setdefault(key, [])
            if len(variants) < 4:
                variants.append((function.__defaults__, function.__kwdefaults__))
        self._note_modules()
        stack = [function.__code__ for function in functions]
        while stack:
            code = stack.pop()
            if id(code) not in self._known:
                self._known[id(code)] = code
                stack += [c for c in code.co_consts if type(c) is _CODE]
        return len(self._known)

    def existed_at_seal(self, function) -> bool:
        """Whether ``function`` existed when :meth:`seal` ran (before any hand-in code): one
        the import of a library makes later, or a copy a library makes of another, did not."""
        return id(function) in self._function_ids or id(function) in self._also_ids

    def seal_also(self, functions) -> None:
        """Count ``functions`` (made since the seal, by the grader: the runner's private
        copies, its timers' handler) as having existed at it: a change of their code or
        defaults is then flagged whoever makes it (a library helper handed them too)."""
        kept = [f for f in functions if type(f) is types.FunctionType]
        self._also = [*self._also, *kept]  # held: no id of theirs is reused
        self._also_ids = self._also_ids | frozenset(map(id, kept))

    def forget_globals(self, namespace) -> None:
        """``namespace`` is not a library module's, whatever registered it (IPython puts
        the notebook's own namespace in ``sys.modules`` as ``__main__``)."""
        if self._globals.get(id(namespace)) is namespace:
            del self._globals[id(namespace)]
        self._pending.pop(id(namespace), None)

    def share_known(self, other: Provenance) -> None:
        """Take a copy of ``other``'s record (two instruments, neither reaching the other's)."""
        self._known = dict(other._known)
        self._globals = {**other._globals, **self._globals}  # its own private copy's kept
        self._defaults = dict(other._defaults)

    def trust(self, prefixes: tuple[str, ...]) -> None:
        """The folders whose files count as the libraries' (set in the hand-in's process,
        before any hand-in code runs: the modules loaded by then are the libraries')."""
        self.trusted = tuple(prefixes)
        self._note_modules()

    def trust_globals(self, namespace: dict) -> None:
        """A namespace the grader made for library code (a private copy of a module's)."""
        self._globals[id(namespace)] = namespace

    def _note_modules(self) -> None:
        for module in list(sys.modules.values()):
            namespace = getattr(module, "__dict__", None)
            if type(namespace) is dict:
                self._globals[id(namespace)] = namespace

    def note_exec(self, frame, code) -> None:
        """The audit hook's ``exec`` event, raised in ``frame``: when it is the import
        system's own call that runs a module's code (``_call_with_frames_removed``, known
        code), the namespace it runs in will count as a library module's once ``code`` is
        found to be library code (checked when first asked: imports stay cheap)."""
        if frame is None or frame.f_code.co_name != "_call_with_frames_removed":
            return
        if type(code) is not _CODE or not self.is_library(frame.f_code):
            return
        loader = frame.f_back  # a loader's exec_module, itself the libraries' code
        if loader is None or loader.f_code.co_name != "exec_module":
            return
        if not self.is_library(loader.f_code):
            return
        arguments = frame.f_locals.get("args")
        if type(arguments) is tuple and len(arguments) >= 2 and arguments[0] is code:
            namespace = arguments[1]
            # the namespace of a module being imported (importlib puts it in sys.modules
            # first): not a dict of the notebook's handed to the import machinery
            name = dict.get(namespace, "__name__") if type(namespace) is dict else None
            module = sys.modules.get(name) if type(name) is str else None
            if getattr(module, "__dict__", None) is not namespace:
                return
            if self.is_trusted_file(code.co_filename):
                self._pending[id(namespace)] = (namespace, code)

    def is_library_globals(self, namespace) -> bool:
        """Whether ``namespace`` is a library module's own (see the module's docstring)."""
        key = id(namespace)
        if self._globals.get(key) is namespace:
            return True
        pending = self._pending.get(key)
        if pending is None or pending[0] is not namespace:
            return False
        del self._pending[key]
        if not self.is_library(pending[1]):
            return False
        self._globals[key] = namespace
        return True

    def is_library_frame(self, frame) -> bool:
        """A running frame is the libraries' when its code is and its globals are."""
        return self.is_library(frame.f_code) and self.is_library_globals(frame.f_globals)

    def is_library_callable(self, value, strict: bool = False, deeper: int = 0) -> bool:
        """Whether everything ``value`` can run is the libraries' own (see the module's
        docstring). ``strict``: also refuse a ``partial`` with bound arguments, and a
        function whose code is known but whose defaults are not one of the library's own.
        ``deeper``: levels to look beyond :data:`MAX_DEPTH` (torch._dynamo's frame callbacks
        hold their backends and graphs 9 to 12 levels down)."""
        try:
            return self._callable(value, strict, -deeper, set())
        except Exception:  # noqa: BLE001 - too deep to judge (RecursionError), or raised by
            return False  # what it holds: not judged the libraries'

    # Every walk below reads an object's real type (``type(value)``), never ``__class__``,
    # which a class of the notebook's can set to anything (``isinstance`` believes it);
    # compares types by identity (hashing one runs its metaclass's ``__hash__``); and reads
    # a class's members, an object's ``__dict__`` and a container's items through the C
    # slots of ``type``, ``object`` and the container's base type, which no subclass or
    # metaclass can shadow. Each judgement is a conjunction, so an object met again counts
    # as passed. ``depth`` counts the objects passed through (a container costs nothing);
    # a class is judged to its own depth, wherever the walk met it.

    def _callable(self, value, strict: bool, depth: int, seen: set) -> bool:
        if id(value) in seen or value is None:
            return True
        if depth > MAX_DEPTH:
            return False
        seen.add(id(value))
        if _is_code_runner(value):
            return False  # runs what it is given: see _PYTHON_RUNNERS
        deeper = depth + 1
        kind = type(value)
        if id(kind) not in _EXACT and not self._class(kind, deeper, seen):
            return False  # a subclass (of partial, property...) of the notebook's
        if kind is types.FunctionType:
            return self._function(value, strict, deeper, seen)
        if kind is types.MethodType:
            return self._callable(value.__func__, strict, deeper, seen) and self._part(
                value.__self__, strict, deeper, seen
            )
        if issubclass(kind, functools.partial):
            func, args, keywords = (read(value) for read in _PARTIAL_PARTS)
            if strict and (args or keywords):
                return False
            attributes = _instance_dict(value, kind)  # None: a __dict__ of its class's making
            parts = (func, args, keywords, attributes)
            return attributes is not None and all(
                self._part(p, strict, deeper, seen) for p in parts
            )
        if id(kind) in _BUILTIN:
            owner = getattr(value, "__self__", None)  # a C type's own attribute
            return owner is None or self._part(owner, strict, deeper, seen)
        for base, read in _WRAPPED_FUNC:
            if issubclass(kind, base):
                attributes = _instance_dict(value, kind)  # its __wrapped__, and the rest
                return (
                    attributes is not None
                    and self._callable(read(value), strict, deeper, seen)
                    and self._part(attributes, strict, deeper, seen)
                )
        if issubclass(kind, property):
            parts = [read(value) for read in _PROPERTY_PARTS]
            return all(self._callable(p, strict, deeper, seen) for p in parts)
        if issubclass(kind, type):
            return self._class(value, deeper, seen)
        return self._object(value, strict, depth, seen)  # its __dict__ counts the level

    def _part(self, value, strict: bool, depth: int, seen: set) -> bool:
        """A bound argument, default, closure cell, attribute, ``__self__`` or class
        member: callables, descriptors and modules are judged, containers item by item (keys
        too), and any other object by its class and what it holds. Past :data:`MAX_DEPTH`,
        or past :data:`MOST_ITEMS` items, nothing more is judged, and so nothing passes."""
        kind = type(value)
        if id(kind) in _PLAIN or id(kind) in _INERT:
            return True
        if kind is _CODE:
            return True  # code is judged where it runs: a function's, a generator's
        if kind is _MODULE:
            return self._module(value, strict, depth, seen)
        if callable(value) or issubclass(kind, _DESCRIPTORS):
            return self._callable(value, strict, depth, seen)
        if id(value) in seen:
            return True
        seen.add(id(value))
        return self._object(value, strict, depth, seen)

    def _module(self, module, strict: bool, depth: int, seen: set) -> bool:
        """A module (of exactly that type) is the libraries' when its namespace is a library
        module's own; one a notebook made is judged by what it holds."""
        try:
            namespace = _MODULE_DICT(module)
        except (AttributeError, TypeError):
            return True  # no namespace: nothing of its own to run
        if self.is_library_globals(namespace) or id(namespace) in seen:
            return True
        seen.add(id(namespace))
        if not _plain_dict(namespace):
            return False
        return self._items(dict.values(namespace), strict, depth + 1, seen)

    def _items(self, items, strict: bool, depth: int, seen: set) -> bool:
        items = list(items)
        if not items:
            return True
        if depth > MAX_DEPTH or len(items) > MOST_ITEMS:
            return False
        return all(self._part(item, strict, depth, seen) for item in items)

    def is_library_object(self, value) -> bool:
        """Whether an object that is not called (an import finder, a partial's argument) is
        the libraries' own: its class's code, and all it holds."""
        try:
            return self._part(value, False, 0, set())
        except Exception:  # noqa: BLE001 - too deep to judge (RecursionError), or raised by
            return False  # what it holds: not judged the libraries'

    def _object(self, value, strict: bool, depth: int, seen: set) -> bool:
        """An object: its class is a library's, and what it holds (attributes such as
        ``forward``, hooks, ``__wrapped__``; in its ``__dict__``, its slots, the items of a
        container it is, or, for an object of a C type, whatever the type says it holds)
        is the libraries' too. Read only once the class has passed."""
        kind = type(value)
        if not self._class(kind, depth, seen):
            return False
        if issubclass(kind, _MODULE):
            return self._module(value, strict, depth, seen)
        if id(kind) in _UNSEEABLE:
            return False
        immutable = _FLAGS(kind) & _IMMUTABLE_TYPE
        for base, read in _HOLDS_KINDS:
            if issubclass(kind, base):
                if not self._items(read(value), strict, depth, seen):
                    return False
                if issubclass(kind, collections.defaultdict):
                    factory = _DEFAULT_FACTORY(value)
                    if not self._part(factory, strict, depth + 1, seen):
                        return False
                if kind is base:
                    return True  # a list, a dict: its items are all it holds
                break
        if immutable:
            # a C type's object: what its type's traversal names (a map's function, a
            # generator's code and locals, a cache's wrapped function)
            return self._held(value, strict, depth, seen)
        if _of_a_c_type(kind) and not self._held(value, strict, depth, seen):
            return False  # a subclass of map, starmap...: what its C part holds
        if not self._held_in_slots(value, kind, strict, depth, seen):
            return False
        attributes = _instance_dict(value, kind)
        if attributes is None or not _plain_dict(attributes):
            return False  # a __dict__ of the class's own making, or a name of the notebook's
        return self._items(dict.values(attributes), strict, depth + 1, seen)

    def _held(self, value, strict: bool, depth: int, seen: set) -> bool:
        """What ``value``'s C type says it holds (``gc.get_referents``): code among it must be
        the libraries', the rest is judged as parts."""
        held = _REFERENTS(value)
        if type(value) is _CACHED:
            held = _cached_function(held) + [_instance_dict(value, _CACHED)]
        held = [item for item in held if item is not type(value)]
        for item in held:
            if type(item) is _CODE and not self.is_library(item):
                return False
        return self._items(held, strict, depth + 1, seen)

    def _held_in_slots(self, value, kind, strict: bool, depth: int, seen: set) -> bool:
        for klass in _MRO(kind):
            for member in list(_PROXY_VALUES(_CLASS_DICT(klass))):
                if type(member) is types.MemberDescriptorType:  # a slot's value
                    try:
                        held = member.__get__(value, kind)
                    except (AttributeError, TypeError):
                        continue
                    if not self._part(held, strict, depth + 1, seen):
                        return False
        return True

    def _function(self, function, strict: bool, depth: int, seen: set) -> bool:
        code = function.__code__
        if not self.is_library(code) or not self.is_library_globals(function.__globals__):
            return False
        # exact types only: Python calls a function with the C items of a tuple subclass
        # as defaults or closure, while iterating it here would run its own __iter__
        defaults, keywords = function.__defaults__, function.__kwdefaults__
        closure, attributes = function.__closure__, function.__dict__
        if not (
            type(defaults) in (tuple, type(None))
            and type(closure) in (tuple, type(None))
            and _plain_dict(keywords, none=True)
            and _plain_dict(attributes)
        ):
            return False
        if strict:
            variants = self._defaults.get(id(code)) if self._known.get(id(code)) is code else None
            if variants and not any(
                _same(defaults, d) and _same_dict(keywords, k) for d, k in variants
            ):
                return False
        parts = [*(defaults or ()), *dict.values(keywords or {})]
        for cell in closure or ():
            try:
                parts.append(cell.cell_contents)
            except ValueError:  # an empty cell
                continue
        parts += list(dict.values(attributes))  # __wrapped__, and any a caller looks up
        return all(self._part(p, strict, depth, seen) for p in parts)

    def _class(self, cls, depth: int = 0, seen: set | None = None) -> bool:
        """A class is the libraries' when every member it or a base holds is, and so is its
        metaclass: not only its functions (closure and all: torch wraps a mode's
        ``__torch_dispatch__`` in a function of its own that holds the notebook's), but
        anything Python may call, bind or hand on (a ``partial`` as ``__call__``, a
        descriptor, a notebook's function under ``__class__``). Its data (a table, a
        pattern, annotations) is not judged, as a library module's globals are not: the
        seal watches the tables the harness reads.
        Judged each time: a hand-in may add a member later. A class is judged once per walk,
        to its own depth, wherever the walk met it: what a class holds does not depend on
        how far down an object of it sits. A type C made immutable holds what C put there."""
        seen = set() if seen is None else seen
        key = (id(cls), "class")
        if key in seen:
            return True
        seen.add(key)
        if _FLAGS(cls) & _IMMUTABLE_TYPE:
            return True
        metaclass = type(cls)
        if metaclass is not type and not self._class(metaclass, depth, seen):
            return False
        for klass in _MRO(cls):
            if _FLAGS(klass) & _IMMUTABLE_TYPE:
                continue
            namespace = _CLASS_DICT(klass)
            if not all(type(name) is str for name in _PROXY_KEYS(namespace)):
                return False  # a name of a str subclass: looking a member up runs its __eq__
            for member in list(_PROXY_VALUES(namespace)):
                kind = type(member)
                if id(kind) in _PLAIN or id(kind) in _INERT or id(member) in seen:
                    continue
                if kind is types.FunctionType:
                    seen.add(id(member))
                    if not self._function(member, False, 1, seen):
                        return False
                elif not (callable(member) or _is_descriptor(kind)):
                    continue  # data, as a module's globals are: Python runs none of it
                elif not self._part(member, False, 1, seen):
                    return False
        return True

    def is_library(self, code) -> bool:
        """Whether ``code`` is the libraries' own (see the module's docstring)."""
        if type(code) is not _CODE:
            return False
        if self._known.get(id(code)) is code or self._verified.get(id(code)) is code:
            return True
        filename = code.co_filename
        if type(filename) is not str or not self.trusted or not filename.startswith(self.trusted):
            return False  # a str subclass's startswith would be the notebook's
        if "/../" in filename or "/./" in filename or "//" in filename:
            return False  # under a trusted folder by name only (site-packages/../../tmp/x.py)
        if not _plain_code(code):
            return False  # comparing it would hash what it holds: a notebook's __hash__
        if code not in self._codes_in(filename):
            return False
        self._verified[id(code)] = code  # held: its id is not reused; code never changes
        return True

    def source_matches(self, source, filename: str) -> bool:
        """Whether ``source`` (str or bytes) is the text of ``filename`` on disk."""
        data = _read(filename)
        if data is None:
            return False
        if type(source) is str:  # exact types only: a subclass's __eq__ is the notebook's
            try:
                return source == data.decode("utf-8")
            except UnicodeDecodeError:
                return False
        return type(source) is bytes and source == data

    def is_trusted_file(self, filename) -> bool:
        return type(filename) is str and bool(self.trusted) and filename.startswith(self.trusted)

    def _codes_in(self, filename: str) -> frozenset:
        found = self._by_file.get(filename)
        if found is None:
            found = frozenset()
            data = _read(filename)
            if data is not None:
                try:
                    top = compile(data, filename, "exec", dont_inherit=True)
                except (SyntaxError, ValueError):
                    top = None
                found = frozenset(_nested(top)) if top is not None else frozenset()
            self._by_file[filename] = found
        return found


def _of_a_c_type(kind) -> bool:
    """Whether a class (a Python one) is based on a C type other than ``object``, whose
    part of its objects neither ``__dict__`` nor slots show (a ``map``'s function)."""
    return any(
        klass is not object and _FLAGS(klass) & _IMMUTABLE_TYPE and id(klass) not in _HOLDERS
        for klass in _MRO(kind)[1:]
    )


def _is_descriptor(kind) -> bool:
    """Whether objects of class ``kind`` take part in attribute lookup (``__get__``,
    ``__set__`` or ``__delete__``), or may: a name that is not exactly ``str`` may stand
    for one (Python finds ``__get__`` under a subclass's equal key). Names are compared one
    by one, as exact ``str`` (a dict lookup would call a planted key's ``__eq__``)."""
    for klass in _MRO(kind):
        for name in list(_PROXY_KEYS(_CLASS_DICT(klass))):
            if type(name) is not str or name in _DESCRIPTOR_METHODS:
                return True
    return False


_DESCRIPTOR_METHODS = ("__get__", "__set__", "__delete__")  # a tuple: compared with ==


def _plain_dict(value, none: bool = False) -> bool:
    """An exact ``dict`` whose keys are all exact ``str`` (``None`` too, where ``none``): a
    subclass's methods, or a key's ``__eq__`` met in a lookup, would be the notebook's."""
    if value is None:
        return none
    return type(value) is dict and all(type(key) is str for key in list(dict.keys(value)))


def _plain_code(code) -> bool:
    """Whether ``code`` (and the code nested in it) holds only Python's own types where
    comparing or hashing it reads: ``code.replace`` takes any constant, a ``str`` subclass
    as a name and a ``bytes`` subclass as a table, whose ``__eq__`` or ``__hash__`` would
    then run as the code is compared."""
    stack = [code]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is _CODE:
            texts = (item.co_name, item.co_qualname, item.co_filename)
            tables = (item.co_code, item.co_linetable, item.co_exceptiontable)
            if any(type(text) is not str for text in texts) or any(
                type(table) is not bytes for table in tables
            ):
                return False
            for names in (item.co_names, item.co_varnames, item.co_freevars, item.co_cellvars):
                if type(names) is not tuple or any(type(name) is not str for name in names):
                    return False
            stack += item.co_consts
        elif kind is tuple or kind is frozenset:
            stack += list(item)
        elif id(kind) not in _PLAIN and kind is not slice:
            return False
    return True


def _cached_function(held: list) -> list:
    """Of what an ``lru_cache`` wrapper holds, what it runs: its function, not the keys and
    results in its cache (data it hands back, and, in typing's caches, thousands of
    objects). CPython 3.11 visits, last: the cache, the function, a marker, two types and
    the wrapper's ``__dict__``; on another layout, all of it is judged."""
    if sys.version_info[:2] == (3, 11) and len(held) >= 6 and type(held[-6]) is dict:
        return [held[-5]]
    return list(held)


def _instance_dict(value, kind) -> dict | None:
    """``value``'s ``__dict__``, read through the C slot that holds it, found in the first
    class of its MRO that names one ({} where none does); None where that class's
    ``__dict__`` is not C's own slot (a property of a class's making) or does not fit, or
    a class's names are not all exact ``str``. Names compared one by one, never looked up."""
    for klass in _MRO(kind):
        slot = None
        for name, member in list(_PROXY_ITEMS(_CLASS_DICT(klass))):
            if type(name) is not str:
                return None
            if name == "__dict__":
                slot = member
        if slot is None:
            continue
        if type(slot) is not _DICT_SLOT:
            return None
        try:
            held = slot.__get__(value, kind)
        except (AttributeError, TypeError):
            return None
        return held if type(held) is dict else None
    return {}


def _same(a, b) -> bool:
    if a is b:
        return True
    if a is None or b is None or len(a) != len(b):
        return False
    return all(x is y for x, y in zip(a, b, strict=True))


def _same_dict(a, b) -> bool:
    """Whether two keyword-default dicts hold the same values under the same names, read
    as items: only exact ``str`` names count (a key of the notebook's, even in a library
    function's own dict, is never hashed or compared: found by review)."""
    if a is b:
        return True
    if type(a) is not dict or type(b) is not dict or len(a) != len(b):
        return False
    items, then = list(dict.items(a)), list(dict.items(b))
    if not all(type(k) is str for k, _ in items) or not all(type(k) is str for k, _ in then):
        return False
    then = dict(then)  # (exact str keys: hashed and compared in C)
    return all(k in then and then[k] is v for k, v in items)


def _nested(code: _CODE) -> list[_CODE]:
    found, stack = [], [code]
    while stack:
        item = stack.pop()
        found.append(item)
        stack += [c for c in item.co_consts if type(c) is _CODE]
    return found


def _read(filename: str) -> bytes | None:
    try:
        with open(filename, "rb") as handle:
            data = handle.read(_MOST_FILE_BYTES + 1)
    except (OSError, ValueError):  # ValueError: a name with a NUL byte, made to fail here
        return None
    return data if len(data) <= _MOST_FILE_BYTES else None


def made_private(record: Provenance) -> Provenance:
    """``record``, its class replaced by a private copy whose methods run over a private copy
    of this module's globals, the modules they name frozen as they are now.

    Why: the instruments judge by calling ``record``'s methods, looked up through its class
    at every call, and their helpers by name in this module. A hand-in can import this module
    and patch ``Provenance.is_library`` (a class attribute, whose setting Python 3.11 does not
    audit), a helper, or ``types.FunctionType``, use the blinded instruments, and put it all
    back within one call, so the seal never sees it. The copy is reached only through
    ``record`` itself, which the instruments keep where no hand-in code reaches without an
    audited step (a generator's frame, the audit hook's closure). Done in the warm parent,
    before the seal, so the copies are library code."""
    import builtins

    namespace = dict(globals())
    namespace["__builtins__"] = dict(vars(builtins))
    for name, value in list(namespace.items()):
        if isinstance(value, _MODULE) and name != "__builtins__":
            namespace[name] = types.SimpleNamespace(**vars(value))  # sys.modules: the live dict

    def remade(function):
        copy = types.FunctionType(
            function.__code__, namespace, function.__name__, function.__defaults__
        )
        copy.__kwdefaults__ = function.__kwdefaults__
        copy.__qualname__ = function.__qualname__
        return copy

    for name, value in list(namespace.items()):
        if type(value) is types.FunctionType and value.__module__ == __name__:
            namespace[name] = remade(value)
    body = {
        name: remade(value) if type(value) is types.FunctionType else value
        for name, value in vars(Provenance).items()
        if name not in ("__dict__", "__weakref__")
    }
    private = type("Provenance", (), body)
    namespace["Provenance"] = private
    record.__class__ = private
    record.trust_globals(namespace)  # the copies are library code running in it
    return record
