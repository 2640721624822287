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
``partial`` of a library function bound to a notebook lambda.

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

import functools
import gc
import sys
import types

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
_EXACT = frozenset(
    {
        types.FunctionType,
        types.MethodType,
        functools.partial,
        staticmethod,
        classmethod,
        property,
        type,
        *_BUILTIN_CALLABLES,
    }
)


class Provenance:
    """Library code or not, for code objects, by identity or by recompiling its file."""

    def __init__(self, trusted: tuple[str, ...] = ()):
        self.trusted = tuple(trusted)
        self._known: dict[int, _CODE] = {}
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
        return self._callable(value, strict, -deeper, set())

    def _callable(self, value, strict: bool, depth: int, seen: set) -> bool:
        if id(value) in seen or value is None:
            return True
        if depth > MAX_DEPTH:
            return False
        seen.add(id(value))
        deeper = depth + 1
        if type(value) not in _EXACT and not self._class(type(value), deeper, seen):
            return False  # a subclass (of partial, property...) of the notebook's
        if isinstance(value, types.FunctionType):
            return self._function(value, strict, deeper, seen)
        if isinstance(value, types.MethodType):
            return self._callable(value.__func__, strict, deeper, seen) and self._bound(
                value.__self__, strict, deeper, seen
            )
        if isinstance(value, functools.partial):
            if strict and (value.args or value.keywords):
                return False
            parts = [value.func, *value.args, *(value.keywords or {}).values()]
            return all(self._part(p, strict, deeper, seen) for p in parts)
        if isinstance(value, _BUILTIN_CALLABLES):
            owner = getattr(value, "__self__", None)
            return owner is None or self._bound(owner, strict, deeper, seen)
        if isinstance(value, (staticmethod, classmethod)):
            return self._callable(value.__func__, strict, deeper, seen)
        if isinstance(value, property):
            parts = (value.fget, value.fset, value.fdel)
            return all(self._callable(p, strict, deeper, seen) for p in parts)
        if isinstance(value, type):
            return self._class(value, deeper, seen)
        return self._object(value, strict, deeper, seen)

    def _part(self, value, strict: bool, depth: int, seen: set) -> bool:
        """A bound argument, default, closure cell or attribute: callables (and those in
        plain tuples, lists and dicts) are judged, and any other object by its class."""
        if type(value) in (tuple, list) and depth <= MAX_DEPTH:
            return all(self._part(v, strict, depth + 1, seen) for v in value[:64])
        if type(value) is dict and depth <= MAX_DEPTH:
            items = list(dict.values(value))[:64]
            return all(self._part(v, strict, depth + 1, seen) for v in items)
        if isinstance(value, (_MODULE, str, bytes, int, float, complex, bool)):
            return True
        if callable(value):
            return self._callable(value, strict, depth, seen)
        # data of the notebook's own class still runs its code (``__setitem__``, ``__eq__``)
        return self._class(type(value), depth, seen)

    def is_library_object(self, value) -> bool:
        """Whether an object that is not called (an import finder, a partial's argument) is
        the libraries' own: its class's code, and the callables it holds."""
        if isinstance(value, _MODULE):
            return True
        return self._bound(value, False, 0, set())

    def _bound(self, owner, strict: bool, depth: int, seen: set) -> bool:
        """A method's ``__self__``: a module, a library class, or an object of one."""
        if isinstance(owner, _MODULE):
            return True
        if isinstance(owner, type):
            return self._class(owner, depth, seen)
        if id(owner) in seen:
            return True
        seen.add(id(owner))
        return self._object(owner, strict, depth, seen)

    def _object(self, value, strict: bool, depth: int, seen: set) -> bool:
        """An object: its class is a library's, and the callables it holds (attributes such
        as ``forward``, hooks, ``__wrapped__``) are the libraries' too."""
        if not self._class(type(value), depth, seen):
            return False
        try:
            attributes = object.__getattribute__(value, "__dict__")
        except (AttributeError, TypeError):
            return True
        if type(attributes) is not dict:
            return True
        return self._part(attributes, strict, depth, seen)

    def _function(self, function, strict: bool, depth: int, seen: set) -> bool:
        code = function.__code__
        if not self.is_library(code) or not self.is_library_globals(function.__globals__):
            return False
        if strict:
            variants = self._defaults.get(id(code)) if self._known.get(id(code)) is code else None
            if variants and not any(
                _same(function.__defaults__, d) and _same_dict(function.__kwdefaults__, k)
                for d, k in variants
            ):
                return False
        parts = [*(function.__defaults__ or ()), *(function.__kwdefaults__ or {}).values()]
        for cell in function.__closure__ or ():
            try:
                parts.append(cell.cell_contents)
            except ValueError:  # an empty cell
                continue
        wrapped = function.__dict__.get("__wrapped__")
        parts += [wrapped] if wrapped is not None else []
        return all(self._part(p, strict, depth, seen) for p in parts)

    def _class(self, cls, depth: int = 0, seen: set | None = None) -> bool:
        """A class is the libraries' when every function it or a base defines is, closure
        and all (torch wraps a mode's ``__torch_dispatch__`` in a function of its own that
        holds the notebook's); judged each time: a hand-in may add a method later."""
        seen = set() if seen is None else seen
        for klass in getattr(cls, "__mro__", (cls,)):
            for member in list(vars(klass).values()):
                inner = member.fget if isinstance(member, property) else member
                if isinstance(member, (staticmethod, classmethod)):
                    inner = member.__func__
                if type(inner) is types.FunctionType and id(inner) not in seen:
                    seen.add(id(inner))
                    if not self._function(inner, False, depth + 1, seen):
                        return False
        return True

    def is_library(self, code) -> bool:
        """Whether ``code`` is the libraries' own (see the module's docstring)."""
        if type(code) is not _CODE:
            return False
        if self._known.get(id(code)) is code:
            return True
        filename = code.co_filename
        if type(filename) is not str or not self.trusted or not filename.startswith(self.trusted):
            return False  # a str subclass's startswith would be the notebook's
        return code in self._codes_in(filename)

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


def _same(a, b) -> bool:
    if a is b:
        return True
    if a is None or b is None or len(a) != len(b):
        return False
    return all(x is y for x, y in zip(a, b, strict=True))


def _same_dict(a, b) -> bool:
    if a is b:
        return True
    if a is None or b is None or a.keys() != b.keys():
        return False
    return all(a[k] is b[k] for k in a)


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
    except OSError:
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
