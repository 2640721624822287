"""Seeing, from inside a hand-in's process, code that reaches into the grader's machinery.

A hand-in runs in the same process as the runner that calls its functions and records
their outputs, so code written against coursekit's grader can, with enough effort, change
what the runner records for its own functions. This module cannot prevent that; it makes
it visible, with two instruments installed before the first cell runs:

- an audit hook (PEP 578; it cannot be removed from Python) that reports, the moment they
  happen, calls *from the notebook's own code* to ``gc.get_objects``/``get_referrers``/
  ``get_referents``, ``sys._getframe`` and ``sys._current_frames`` (directly or through
  ``inspect``), reads of ``tb_frame``/``gi_frame``/``cr_frame``/``ag_frame``,
  ``sys.settrace``/``setprofile``, any use of ``ctypes``, and changes to the code, defaults
  of coursekit's or torch's functions;
- a snapshot of coursekit's modules, torch's main modules and a few standard ones
  (builtins, json, math...): their functions, classes and the classes' methods. The runner
  compares it after the cells and after the tests, and reports what was replaced.

Reports go out at once, as frames on the grader's channel, so a hand-in cannot take one back.
Neither instrument is complete (a hand-in can still obtain a frame in ways Python does not
audit, such as a signal handler's argument): a flag is a reason for an instructor to read a
notebook, and no flag is no proof.
"""

from __future__ import annotations

import functools
import sys
import types
from collections.abc import Callable

_FRAME_ATTRIBUTES = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})
_CODE_ATTRIBUTES = frozenset({"__code__", "__defaults__", "__kwdefaults__"})
_ALWAYS = frozenset(
    {
        "gc.get_objects",
        "gc.get_referrers",
        "gc.get_referents",
        "sys._getframe",
        "sys._current_frames",
        "sys.settrace",
        "sys.setprofile",
    }
)
# Standard-library helpers that hand their caller's request on: look past them.
_HELPER_FILES = ("/inspect.py", "/ctypes/__init__.py")
_WATCHED_MODULES = (
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
)
MAX_REPORTS = 20


def _reopens_a_descriptor(path) -> bool:
    """``/proc/<pid>/fd/N`` or ``/dev/fd/N``: a new handle on an open file, such as the
    grader's channel, that the seccomp filter's pin on its numbers does not cover."""
    text = path.decode("utf-8", "replace") if isinstance(path, bytes) else str(path)
    return text.startswith("/dev/fd/") or (text.startswith("/proc/") and "/fd/" in text)


def install_audit_hook(report: Callable[[str], None], trusted: tuple[str, ...]) -> None:
    """Report (at most :data:`MAX_REPORTS` distinct) suspicious events of notebook code.

    ``trusted``: prefixes of file names that are not the hand-in's (Python, its packages,
    coursekit). Code from anywhere else, cells included, is the notebook's.
    """
    getframe = sys._getframe
    import _thread

    get_ident = _thread.get_ident
    busy: set[int] = set()
    sent: set[str] = set()

    def is_notebook_code(depth: int) -> bool:
        frame = getframe(depth)
        while frame is not None and frame.f_code.co_filename.endswith(_HELPER_FILES):
            frame = frame.f_back
        if frame is None:
            return False
        name = frame.f_code.co_filename
        return name == "<string>" or _notebook_file(name, trusted)

    def hook(event: str, args: tuple) -> None:
        if event in _ALWAYS or event.startswith("ctypes."):
            what = f"it called {event}" if not event.startswith("ctypes.") else "it used ctypes"
        elif event == "os.exec":
            what = "it replaced its process with another program (os.exec)"
        elif event == "open" and args and _reopens_a_descriptor(args[0]):
            what = "it opened an open file again through /proc or /dev/fd"
        elif event == "object.__getattr__" and len(args) == 2 and args[1] in _FRAME_ATTRIBUTES:
            what = f"it read a {args[1]} (a frame of the running program)"
        elif event == "object.__setattr__" and len(args) == 3 and args[1] in _CODE_ATTRIBUTES:
            module = getattr(args[0], "__module__", None) or ""
            if not module.startswith(("coursekit", "torch")):
                return
            what = f"it changed {args[1]} of {module}.{getattr(args[0], '__qualname__', '?')}"
        else:
            return
        me = get_ident()
        if me in busy or len(sent) >= MAX_REPORTS or what in sent:
            return
        busy.add(me)
        try:
            # frames: 0 is_notebook_code, 1 this hook, 2 the code that raised the event
            if is_notebook_code(2):
                sent.add(what)
                report(what)
        finally:
            busy.discard(me)

    sys.addaudithook(hook)


def snapshot() -> tuple:
    """What :func:`changes` compares against: (where, namespace, key, object) entries, and
    (where, namespace, None, names) for namespaces where a new name would shadow another.

    ``namespace`` is the live mapping (a module's or question's ``__dict__``, a class's
    ``vars``) that held ``object`` under ``key``; the tuple keeps every object alive, so a
    replaced one cannot be mistaken for a new one at the same address.
    """
    entries = [("sys.modules", sys.modules, name, sys.modules[name]) for name in _watched_names()]
    classes_seen: set[int] = set()  # and registries: each is recorded once
    for module_name in _watched_names():
        module = sys.modules[module_name]
        ours = module_name.startswith("coursekit")
        namespace = vars(module)
        if ours:  # a new global there shadows a builtin for coursekit's own code
            entries.append((module_name, namespace, None, frozenset(namespace)))
        for name, value in list(namespace.items()):
            if not ours and (name.startswith("_") or not callable(value)):
                continue
            entries.append((f"{module_name}.{name}", namespace, name, value))
            if isinstance(value, type) and _same_package(value, module_name):
                if id(value) in classes_seen:
                    continue
                classes_seen.add(id(value))
                members = vars(value)
                entries.append((f"{module_name}.{name}", members, None, frozenset(members)))
                for attribute, member in list(members.items()):
                    if (
                        ours
                        or (callable(member) or isinstance(member, _DESCRIPTORS))
                        and (not attribute.startswith("__") or attribute in _DUNDERS)
                    ):
                        entries.append(
                            (f"{module_name}.{name}.{attribute}", members, attribute, member)
                        )
        registry = namespace.get("QUESTIONS") if ours else None
        if isinstance(registry, dict) and id(registry) not in classes_seen:
            classes_seen.add(id(registry))
            for key, question in list(registry.items()):
                entries.append((f"{module_name}.QUESTIONS[{key!r}]", registry, key, question))
                state = vars(question)
                entries.append((f"QUESTIONS[{key!r}]", state, None, frozenset(state)))
                for attribute, member in list(state.items()):
                    entries.append((f"QUESTIONS[{key!r}].{attribute}", state, attribute, member))
    return tuple(entries)


_DUNDERS = ("__init__", "__call__", "__getattr__", "__getattribute__", "__setattr__")
_DESCRIPTORS = (staticmethod, classmethod, property)
_MISSING = object()


def _watched_names() -> list[str]:
    ours = [n for n in sys.modules if n == "coursekit" or n.startswith("coursekit.")]
    return sorted({*ours, *(m for m in _WATCHED_MODULES if m in sys.modules)})


def _same_package(cls: type, module_name: str) -> bool:
    return str(getattr(cls, "__module__", "")).split(".")[0] == module_name.split(".")[0]


def warm_up() -> None:
    """Let torch make the changes it makes to itself on first use, before :func:`snapshot`.

    Creating an optimizer imports ``torch._dynamo``, which wraps ``torch.manual_seed``, and
    wraps its class's ``step`` in a profiling hook (once per class).
    """
    import torch

    parameter = torch.nn.Parameter(torch.zeros(1))
    for name in dir(torch.optim):
        cls = getattr(torch.optim, name)
        if isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer):
            try:
                cls([parameter], lr=0.01)
            except Exception:  # an optimizer that wants other arguments: nothing to warm
                continue


def changes(before: tuple, trusted: tuple[str, ...] = ()) -> list[str]:
    """Where an entry of ``before`` no longer holds the same object (replaced or deleted);
    names added where they shadow (a new module is an import, and a name coursekit's own
    lazy ``__getattr__`` filled in is its export); and, in coursekit modules imported since
    ``before``, functions whose code is not from a ``trusted`` file."""
    found = []
    for where, namespace, key, value in before:
        ours = where.startswith(("coursekit", "QUESTIONS", "sys.modules"))
        if key is not None:
            now = namespace.get(key, _MISSING)
            if now is not value and (ours or _by_notebook(now, trusted)):
                found.append(where)
            continue
        for added in sorted(set(namespace) - value, key=str):
            now = namespace.get(added)
            if not _expected_addition(namespace, added) and (ours or _by_notebook(now, trusted)):
                found.append(f"{where}.{added}")
    if trusted:
        known = {key for where, _, key, _ in before if where == "sys.modules"}
        for name in [n for n in _watched_names() if n not in known and n.startswith("coursekit")]:
            found += _foreign_code(name, trusted)
    return found


def _by_notebook(value, trusted: tuple[str, ...]) -> bool:
    """Could this replacement in torch or the standard library be the notebook's doing?
    Libraries patch torch too (Lightning wraps ``torch.compile`` on import), so only a
    function from the notebook's code, or something that is no function at all, counts."""
    if not trusted:
        return True
    if not callable(value) and not hasattr(type(value), "__get__"):
        return True  # data where there was a function
    return any(
        code.co_filename == "<string>" or _notebook_file(code.co_filename, trusted)
        for code in _codes_of(value)
    )


def _codes_of(value) -> list:
    """The code a callable runs: its own, a method's or ``partial``'s target's, and, for an
    object of a class that is not a builtin, its class's methods (a callable object of a
    class the notebook defined is the notebook's doing)."""
    items = [value]
    for attribute in ("__func__", "func", "__wrapped__"):
        inner = getattr(value, attribute, None)
        if callable(inner):
            items.append(inner)
    plain = (types.FunctionType, types.MethodType, types.BuiltinFunctionType, type)
    if not isinstance(value, plain) and type(value).__module__ not in ("builtins", "functools"):
        items += [m for m in vars(type(value)).values() if isinstance(m, types.FunctionType)]
    return [item.__code__ for item in items if hasattr(item, "__code__")]


def _notebook_file(filename: str, trusted: tuple[str, ...]) -> bool:
    if filename.startswith("<"):
        return filename.startswith("<ipython-input")
    return not filename.startswith(trusted)


def _expected_addition(namespace, name) -> bool:
    value = namespace.get(name)
    if isinstance(value, type(sys)):
        return True
    exports = namespace.get("_EXPORTS") if "__path__" in namespace else None
    if isinstance(exports, dict) and isinstance(exports.get(name), str):
        source = sys.modules.get(exports[name])
        return source is not None and vars(source).get(name, _MISSING) is value
    return False


def _foreign_code(module_name: str, trusted: tuple[str, ...]) -> list[str]:
    """``module.name`` (or ``module.Class.name``) for functions defined in a notebook cell or
    a file outside ``trusted``. (Code made by ``exec``, such as a dataclass's ``__init__``,
    is named ``<string>``; a file name is the code's own claim, so this is a heuristic.)"""
    found = []
    for name, value in list(vars(sys.modules[module_name]).items()):
        members = list(vars(value).items()) if isinstance(value, type) else []
        for label, item in [(name, value), *((f"{name}.{m}", v) for m, v in members)]:
            code = getattr(item, "__code__", None)
            filename = getattr(code, "co_filename", None)
            if isinstance(filename, str) and _notebook_file(filename, trusted):
                found.append(f"{module_name}.{label}")
    return found


def install_tripwires(questions: dict, report: Callable[[str], None], trusted: tuple[str, ...]):
    """Wrap coursekit's own answers to each question: the library function of the same name
    (``coursekit.training.train_accumulated``...) and the check's ``reference()``. Once the
    returned ``arm()`` is called (the tests begin), a call from the notebook's code to one of
    them is reported: its function hands in coursekit's answer. Calls from coursekit's own
    code, and calls while the cells run (demonstrations), are not. Call before
    :func:`snapshot`, so the wrappers are what it records."""

    getframe = sys._getframe
    armed: list[bool] = []
    wrappers: dict[int, Callable] = {}

    def wrap(function, question: str, where: str):
        if id(function) in wrappers:
            return wrappers[id(function)]

        @functools.wraps(function)
        def tripwire(*args, **kwargs):
            if armed:
                caller = getframe(1).f_code.co_filename
                if caller == "<string>" or _notebook_file(caller, trusted):
                    report(f"its {question} called coursekit's own answer ({where})")
            return function(*args, **kwargs)

        del tripwire.__wrapped__  # no plain path back to the unwatched function
        wrappers[id(function)] = tripwire
        return tripwire

    skip = ("coursekit.grading", "coursekit.authoring")
    modules = [
        (name, module)
        for name, module in list(sys.modules.items())
        if (name == "coursekit" or name.startswith("coursekit.")) and not name.startswith(skip)
    ]
    for question_name, question in questions.items():
        for _, module in modules:
            function = vars(module).get(question_name)
            if isinstance(function, types.FunctionType) and str(function.__module__).startswith(
                "coursekit"
            ):
                where = f"{function.__module__}.{question_name}"
                setattr(module, question_name, wrap(function, question_name, where))
        try:
            reference = question.reference()
        except Exception:  # a question without a reference here: nothing to wrap
            continue
        if callable(reference):
            wrapped = wrap(reference, question_name, f"the check's reference for {question_name}")
            question.reference = lambda wrapped=wrapped: wrapped

    def arm() -> None:
        if not armed:
            armed.append(True)

    return arm


def coursekit_function(fn, trusted: tuple[str, ...]) -> str | None:
    """``module.name`` when ``fn`` is one of coursekit's own functions (not the notebook's):
    a hand-in whose answer *is* coursekit's implementation, imported under its name."""
    target = fn
    while isinstance(target, functools.partial):  # partial(coursekit.train_accumulated)
        target = target.func
    target = getattr(target, "__wrapped__", target)
    code = getattr(target, "__code__", None)
    module = str(getattr(target, "__module__", ""))
    if code is None or not module.startswith("coursekit"):
        return None
    if code.co_filename == "<string>" or _notebook_file(code.co_filename, trusted):
        return None
    return f"{module}.{getattr(target, '__qualname__', '?')}"


def private_copy(module) -> types.SimpleNamespace:
    """The module's functions, each re-made over a private copy of the module's globals and
    of the builtins. A hand-in that later rebinds a name in the module (or in ``builtins``)
    changes what other code sees, not what these copies run; only the copies' own
    ``__globals__`` reach the private dict, and getting at them takes a frame or ``gc``,
    which the audit hook reports first."""
    import builtins

    namespace = dict(vars(module))
    namespace["__builtins__"] = dict(vars(builtins))
    for name, value in list(namespace.items()):
        if isinstance(value, types.FunctionType) and value.__module__ == module.__name__:
            namespace[name] = types.FunctionType(
                value.__code__, namespace, value.__name__, value.__defaults__, value.__closure__
            )
            namespace[name].__kwdefaults__ = value.__kwdefaults__
    return types.SimpleNamespace(**namespace)
