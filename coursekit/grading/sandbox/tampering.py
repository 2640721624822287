"""Seeing, from inside a hand-in's process, code that reaches into the grader's machinery.

A hand-in runs in the same process as the runner that calls its functions and records
their outputs, so code written against coursekit's grader can, with enough effort, change
what the runner records for its own functions. This module cannot prevent that; it makes
it visible, with instruments installed before the first cell runs:

- an audit hook (PEP 578; it cannot be removed from Python) that reports, the moment they
  happen, what reaches into the running program from the notebook's own code (``gc``,
  frames, tracing, ``ctypes``, code made from bytes or under a library's file name, class
  attributes of coursekit, torch or numpy where the interpreter audits their setting: not
  Python 3.11, where only the seal sees them; torch._dynamo's frame hooks set), and, whoever
  does it, changes to the code or defaults of library functions that existed before the
  hand-in and code compiled under a library file's name with other text. Whose code
  raised an event is decided by :mod:`coursekit.grading.sandbox.provenance`, from code
  objects and file text, never from the file name a code object claims;
- tripwires on coursekit's own answers (the library function of a question's name, the
  check's ``reference()``): a call from the notebook's code while the tests run is reported.

:mod:`coursekit.grading.sandbox.harness_seal` records and compares what the harness can reach.
Reports go out at once, as frames on the grader's channel, so a hand-in cannot take one back.
No instrument is complete (a hand-in can still obtain a frame in ways Python does not audit,
such as a signal handler's argument): a flag is a reason for an instructor to read a
notebook, and no flag is no proof.
"""

from __future__ import annotations

import functools
import sys
import types
from collections.abc import Callable

from coursekit.grading.sandbox import frame_hook_guard

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
MAX_REPORTS = 20
# what library code that calls each of those by name has in its code's names (``_getframe``,
# ``getframe``...), and those a thread's start makes for threading's hooks
_ALWAYS_SHORT = {event: event.rpartition(".")[2].lstrip("_") for event in _ALWAYS}
_THREAD_HOOKS = frozenset({"settrace", "setprofile"})


def _path_text(path) -> str:
    """An ``open`` event's path as text: Python hands it over as ``str`` or ``bytes`` (a
    path object already turned into one); anything else came from a hand-made
    ``sys.audit`` and is not read (its ``__str__`` would run inside the hook)."""
    if type(path) is bytes:
        return path.decode("utf-8", "replace")
    return path if type(path) is str else ""


def _reopens_a_descriptor(path) -> bool:
    """``/proc/<pid>/fd/N`` or ``/dev/fd/N``: a new handle on an open file, such as the
    grader's channel, that the seccomp filter's pin on its numbers does not cover."""
    text = _path_text(path)
    return text.startswith("/dev/fd/") or (text.startswith("/proc/") and "/fd/" in text)


def _resets_the_peak(path) -> bool:
    """``/proc/.../clear_refs``: writing 5 there resets the high-water resident size that a
    memory test reads (:mod:`coursekit.checks.memory_peak`; its child is also made
    non-dumpable, which leaves the file to root alone)."""
    text = _path_text(path)
    return text.startswith("/proc/") and text.rstrip("/").endswith("/clear_refs")


def install_audit_hook(
    report: Callable[[str], None], trusted: tuple[str, ...], provenance, mirrors: tuple = ()
) -> None:
    """Report (at most :data:`MAX_REPORTS` distinct) suspicious events of notebook code.

    ``provenance`` (:class:`coursekit.grading.sandbox.provenance.Provenance`) says which code is the
    libraries' own from what a hand-in cannot forge: code compiled under ``torch.__file__``,
    or made from bytes, is still the notebook's. An event that reaches into the running
    program (frames, ``gc``, ``ctypes``, tracing, new audit hooks, code made from bytes or
    under a library file's name, class attributes of coursekit, torch or numpy, a frame hook
    of torch._dynamo's) counts when the code that raised it is the notebook's, looking past
    the library modules that pass a caller's request on or hand frames back to it
    (:data:`HELPER_MODULES`). Changing the code, defaults or keyword defaults of a library
    function that existed at the seal counts whoever does it (of one a library made since,
    only the notebook's change), and so does compiling code under a library file's name
    with other text than the file's; a frame hook that is not the libraries' own code counts
    whoever sets it.

    Whose code raised an event is judged by frame: library code running in a library
    module's namespace (:meth:`Provenance.is_library_frame`), so library code run with the
    notebook's globals is the notebook's. The import system's runs of a module's code are
    passed to ``provenance`` and to each of ``mirrors`` (other records of library code), so
    that a module imported later counts as a library's. A new audit hook from the notebook's
    code is reported and refused (an audit hook sees every object the events carry).
    """
    getframe = sys._getframe
    import _thread
    import gc
    import os

    get_ident = _thread.get_ident
    gc_enabled, gc_disable, gc_enable = gc.isenabled, gc.disable, gc.enable
    is_library = provenance.is_library
    is_library_frame = provenance.is_library_frame
    noters = tuple(p.note_exec for p in (provenance, *mirrors))
    trusted_file = provenance.is_trusted_file
    source_matches = provenance.source_matches
    existed_at_seal = provenance.existed_at_seal
    is_a_file = os.path.isfile
    helpers = frozenset(map(id, _helper_codes()))  # the codes are held: ids stay theirs
    depth: dict[int, int] = {}  # thread -> how many of this hook's calls it is inside
    reading: set[int] = set()  # threads in the hook's own sys._getframe
    sent: set[str] = set()
    debug = os.environ.get("COURSEKIT_AUDIT_DEBUG") == "1"

    def own_frame(depth: int):
        """``sys._getframe(depth)`` for the hook's own reading: the ``sys._getframe`` event
        that raises is passed over. gc is off meanwhile: making a frame object allocates,
        and a collection then could run a notebook's finalizer inside the mark."""
        me = get_ident()
        collecting = gc_enabled()
        try:
            gc_disable()
            reading.add(me)
            return getframe(depth + 1)
        finally:
            reading.discard(me)
            if collecting:
                gc_enable()

    def by_notebook(depth: int) -> bool:
        """Whether the code that raised the event (past helpers) is the notebook's."""
        frame = own_frame(depth)
        while frame is not None and (
            id(frame.f_code) in helpers  # by identity: equal code elsewhere is not theirs
            or (_names_text(frame.f_code, "<frozen importlib") and is_library(frame.f_code))
        ):
            frame = frame.f_back
        return frame is not None and not is_library_frame(frame)

    tripwire_codes = _TRIPWIRE_CODES

    def handed_by_notebook(depth: int, short: str) -> bool:
        """For an event that hands over frames or objects (:data:`_ALWAYS`, and frame
        attributes read), judged as :func:`by_notebook` is, except that library code that
        does not name the function or attribute (``short``) where it stands (the expression
        of the instruction that raised it: :func:`_named_at`) was handed it
        (``functools.cached_property(sys._getframe)``, ``ExitStack().callback(sys.setprofile,
        f)``, ``string.Formatter().get_field("0.gi_frame", ...)``, ``map(sys._getframe, ...)``
        iterated by library code): its callers decide, down to a frame of the notebook's
        (True) or library code that names it. A thread's start that installs a function
        ``threading.settrace`` or ``setprofile`` was handed counts, whatever it is. Past a
        helper of :data:`HELPER_MODULES` (a traceback walker's generator, iterated where it
        is not named), the helper is judged the same way: library code that names the
        helper it called (by the helper's own name, or the name its module gives it) where
        it stands passes; library code that does not was handed it
        (``ExitStack().callback(inspect.currentframe)``), and its callers decide."""
        frame = own_frame(depth)
        helper = None  # the code of the last helper passed, while no caller has named it
        while frame is not None:
            code = frame.f_code
            if id(code) in helpers or (_names_text(code, "<frozen importlib") and is_library(code)):
                frame, helper = frame.f_back, code
                continue
            if not is_library_frame(frame):
                return True
            if helper is not None:  # the helper's caller, or a library caller below it
                if any(_named_at(code, frame.f_lasti, n) for n in _helper_names(helper)):
                    return False
                frame = frame.f_back
                continue
            if id(code) in tripwire_codes or _named_at(code, frame.f_lasti, short):
                # a thread's start installs what threading.settrace/setprofile were handed:
                # a library's bound method (a Queue's put) keeps every frame it is given
                return code.co_name == "_bootstrap_inner" and short in _THREAD_HOOKS
            frame = frame.f_back
        return False

    def classify(event: str, args: tuple) -> tuple[str | None, bool]:
        """(what to report, whether only when the notebook's code raised it)."""
        if event in _ALWAYS or event.startswith("ctypes."):
            what = f"it called {event}" if not event.startswith("ctypes.") else "it used ctypes"
            return what, True
        if (
            event == "object.__getattr__"
            and len(args) == 2
            and type(args[1]) is str
            and args[1] in _FRAME_ATTRIBUTES
        ):
            return f"it read a {args[1]} (a frame of the running program)", True
        if event == "object.__setattr__" and len(args) == 3:
            # read without running any method of the target's (a notebook's __getattribute__
            # would run inside this hook): a function's own fields, a class's own dict
            target, name = args[0], args[1]
            if name in _CODE_ATTRIBUTES and type(target) is types.FunctionType:
                if is_library(target.__code__):
                    # a function of the libraries' that existed before any hand-in code:
                    # whoever changes it (a library helper the notebook calls, too); one a
                    # library made since (networkx's argmap compiles its own, transformers
                    # copies its methods and sets their defaults): only the notebook's own
                    # change counts
                    return (
                        f"it changed {name} of {target.__module__}.{target.__qualname__}",
                        not existed_at_seal(target),
                    )
                return None, True
            owner = type(target)
            if issubclass(owner, type):  # Python 3.12 audits a class's attributes set
                module = _module_of(target)
                if module.startswith(_WATCHED_PACKAGES):
                    return f"it changed {module}.{_qualname_of(target)}.{name}", True
            module = _module_of(owner)
            if name == "__class__" and module.startswith(_WATCHED_PACKAGES):
                return f"it changed the class of a {module}.{_qualname_of(owner)}", True
            return None, True
        if event == "compile" and len(args) == 2 and trusted_file(args[1]):
            # a name that is no file (inductor's "...codegen.py:codegen(...)") makes no code
            # the libraries': Provenance has no text to match it with
            if not source_matches(args[0], args[1]) and is_a_file(args[1]):
                return f"it compiled code under a library's file name ({args[1]})", False
            return None, True
        if event == "code.__new__" and len(args) >= 2 and trusted_file(args[1]):
            return f"it made a code object under a library's file name ({args[1]})", True
        if event in _CODE_FROM_BYTES:
            if _from_a_trusted_pyc(own_frame(2), args, trusted_file):  # 0 classify, 1 hook
                return None, True
            return f"it made code from bytes ({event})", True
        if event == _FRAME_HOOK and len(args) == 2:
            return _frame_hook(args[0], args[1], provenance)
        if event == "os.exec":
            return "it replaced its process with another program (os.exec)", True
        if event == "open" and args and _reopens_a_descriptor(args[0]):
            return "it opened an open file again through /proc or /dev/fd", True
        if event == "open" and args and _resets_the_peak(args[0]):
            return "it opened clear_refs, which resets the peak memory the kernel counts", True
        return None, True

    def hook(event: str, args: tuple) -> None:
        if event == "object.__getattr__":
            # nearly every event: a function's __code__ or defaults read (the seal's own
            # check reads thousands), a frame's f_code; only frame attributes count
            if len(args) != 2 or type(args[1]) is not str or args[1] not in _FRAME_ATTRIBUTES:
                return
        elif event not in _EVENTS and not event.startswith("ctypes."):
            return
        if event == "exec":  # 0 this hook, 1 the code that called exec
            try:
                for note in noters:
                    note(own_frame(1), args[0] if args else None)
            except Exception:  # noqa: BLE001 - never fail an import over a record of it
                pass
            return
        if event == "sys.addaudithook":  # whoever adds it: a library can be handed it too
            if "it added an audit hook (refused)" not in sent:
                sent.add("it added an audit hook (refused)")
                report("it added an audit hook (refused)")
            raise RuntimeError("no audit hooks in a hand-in")  # Python refuses the new hook
        me = get_ident()
        if me in reading and event == "sys._getframe":
            return  # the hook's own (own_frame)
        level = depth.get(me, 0)
        if level > _MOST_NESTING or len(sent) >= MAX_REPORTS:
            return  # the check below reading a file: the hook's own work
        depth[me] = level + 1
        try:
            if level == _MOST_NESTING:
                # The hook's own work raises events two levels down at most (a file opened
                # under a compile); deeper, code ran inside the hook that the hook did not
                # mean to run (a method of an object it read), raised levels down to escape
                # it. Judged without classifying, which could run that code again.
                if by_notebook(2) and _RAN_INSIDE not in sent:
                    sent.add(_RAN_INSIDE)
                    report(_RAN_INSIDE)
                return
            what, only_notebook = classify(event, args)
            # frames: 0 by_notebook, 1 this hook, 2 the code that raised the event
            short = _ALWAYS_SHORT.get(event)
            if event == "object.__getattr__":
                short = args[1]  # a frame attribute (classify has said so)
            if (
                what
                and what not in sent
                and (
                    not only_notebook or (handed_by_notebook(2, short) if short else by_notebook(2))
                )
            ):
                sent.add(what)
                if debug:
                    _print_chain(what, own_frame(1))
                report(what)
        finally:
            depth[me] = level

    sys.addaudithook(hook)


# Library modules whose functions pass their caller's request on (inspect.currentframe,
# ctypes' wrappers, code and codeop's compile) or hand frames back to it (traceback's
# walkers, logging.currentframe, IPython's frame helpers, the debuggers): an event raised
# inside them is judged by the code that called them. A library function elsewhere that
# hands a frame back is not known here: its caller goes unflagged (a limit, documented).
HELPER_MODULES = (
    "inspect",
    "ctypes",
    "traceback.walk_tb",
    "traceback.walk_stack",
    "traceback._walk_tb_with_full_positions",
    "logging.currentframe",
    "code",
    "codeop",
    "importlib",
    "importlib.util",
    "importlib.abc",
    "importlib.machinery",
    "pdb",
    "bdb",
    "profile",  # Profile.runcall installs its caller's dispatcher as the profile function
    "cProfile",
    "trace",  # Trace.runfunc installs its caller's globaltrace as the trace function
    "asyncio.base_tasks",  # Task.get_stack() hands back the coroutines' frames
    "IPython.core.ultratb",  # its records hand back a traceback's frames
    # the ``open`` of a shell's namespace, which passes every call on to io.open: the file
    # opened is the cell's request (``/proc/self/fd/N``, ``clear_refs``)
    "IPython.core.interactiveshell._modified_open",
    "cgitb",
    "faulthandler",
    "tracemalloc",
    "IPython.utils.frame",
    "IPython.core.debugger",
    "stack_data",
    "executing",
    "coursekit.grading.sandbox.frame_hook_guard",  # judged by whoever set the frame hook
    # createResolutionCallbackFromFrame(n) hands back a lookup in the locals of the frame n
    # levels up: its caller is judged (torch.jit.script, when it scripts)
    "torch._jit_internal.createResolutionCallbackFromFrame",
    # each hands its caller a frame of the running program (found by review: a frame that
    # led down to the runner's own)
    "torch.fx.experimental.symbolic_shapes.ShapeEnv._get_user_frame",
    "jupyter_core.utils._get_frame",
)


def _helper_codes() -> frozenset:
    """The code objects of :data:`HELPER_MODULES`' functions (and their classes' methods),
    taken once, in the warm parent (:func:`warm_up`), before any hand-in code runs."""
    global _HELPERS
    if _HELPERS is not None:
        return _HELPERS
    import importlib

    codes: set = set()
    names: dict[int, set] = {}
    seen: set[int] = set()
    for name in HELPER_MODULES:
        try:
            module = importlib.import_module(name)
            stack = list(vars(module).values())
        except ImportError:  # a function of a module (or a class's), or a module not here
            module, parts = None, name.split(".")
            for cut in range(len(parts) - 1, 0, -1):
                try:
                    module = importlib.import_module(".".join(parts[:cut]))
                except ImportError:
                    continue
                break
            if module is None:
                continue
            item = module
            for attribute in parts[cut:]:
                item = getattr(item, attribute, None)
            stack = [item]
        home = getattr(module, "__file__", None)
        while stack:
            item = stack.pop()
            if id(item) in seen:
                continue
            seen.add(id(item))
            if isinstance(item, type) and str(getattr(item, "__module__", "")) == name:
                stack += list(vars(item).values())
                continue
            item = getattr(item, "__func__", item)
            code = getattr(item, "__code__", None)
            if isinstance(code, types.CodeType) and code.co_filename == home:  # not imported
                named = getattr(item, "__name__", None)
                if type(named) is str and named != "<lambda>":
                    names.setdefault(id(code), set()).add(named)
                nested = [code]
                while nested:
                    one = nested.pop()
                    codes.add(one)
                    if one.co_name != "<lambda>" and not one.co_name.startswith("<"):
                        names.setdefault(id(one), set()).add(one.co_name)
                    nested += [c for c in one.co_consts if isinstance(c, types.CodeType)]
        for attribute, value in list(vars(module).items()):  # the names a module gives them
            if type(value) is types.FunctionType and value.__code__ in codes:
                names.setdefault(id(value.__code__), set()).add(attribute)
    _HELPERS = frozenset(codes)
    global _HELPER_NAMES
    _HELPER_NAMES = types.MappingProxyType({k: frozenset(v) for k, v in names.items()})
    return _HELPERS


_HELPERS: frozenset | None = None
# id of a helper's code -> the names a caller calls it by (its own, its module's for it):
# read-only, made with _HELPERS (whose codes are held, so no id is reused)
_HELPER_NAMES: types.MappingProxyType = types.MappingProxyType({})


def _helper_names(code) -> frozenset:
    return _HELPER_NAMES.get(id(code), frozenset())


def _from_a_trusted_pyc(frame, args: tuple, trusted_file) -> bool:
    """Whether ``marshal.loads`` is importlib reading a trusted ``.pyc`` file's own bytes.

    ``frame`` raised the event: importlib's ``_compile_bytecode``, whose ``bytecode_path``
    names the file; the bytes must be that file's (past its 16-byte header), as on disk."""
    if frame is None or frame.f_code.co_name != "_compile_bytecode" or not args:
        return False
    if type(args[0]) is not bytes or not _names_text(frame.f_code, "<frozen importlib"):
        return False
    path = frame.f_locals.get("bytecode_path")
    if not isinstance(path, str) or not trusted_file(path):
        return False
    try:
        with open(path, "rb") as handle:
            on_disk = handle.read()
        return args[0] == on_disk[16:]
    except (OSError, TypeError, ValueError):
        return False


_NAMING = ("LOAD_ATTR", "LOAD_METHOD", "LOAD_GLOBAL", "LOAD_NAME", "LOAD_FAST", "LOAD_DEREF")
# code id -> (code, its loads (_loads_of), {(offset, short): whether named there})
_NAMERS: dict[int, tuple] = {}


def _named_at(code, offset: int, short: str) -> bool:
    """Whether the expression of ``code``'s instruction at ``offset`` (the one running: a
    C function called there raised the event) names ``short``: ``sys._getframe(1)`` does,
    ``for item in names`` (a ``map`` over ``sys._getframe`` iterated) and ``getattr(obj,
    name)`` do not. Read from the loads of a name whose source positions lie within that
    instruction's (found once per code object, which is held so that no id is reused)."""
    known = _NAMERS.get(id(code))
    if known is None or known[0] is not code:
        known = _NAMERS[id(code)] = (code, _loads_of(code), {})
    answers = known[2]  # by (offset, short): the hook asks again at every call of a site
    answer = answers.get((offset, short))
    if answer is None:
        answer = answers[(offset, short)] = _names_within(known[1], offset, short)
    return answer


def _names_within(loads: tuple, offset: int, short: str) -> bool:
    positions = loads[0]
    if not 0 <= offset // 2 < len(positions):
        return False
    where = positions[offset // 2]
    if where[0] is None:
        return False
    start, end = (where[0], where[2] or 0), (where[1] or where[0], where[3] or 0)
    return any(short in name and start <= first and last <= end for first, last, name in loads[1])


def _loads_of(code) -> tuple[list, list]:
    """(the source position of each code unit, (first, last, name) of each load of a name).
    Python 3.11's bytecode read directly (``dis`` took ten times as long, and the hook
    asks for this where the grader's own instruments run, at every module call); other
    versions through ``dis``."""
    positions = list(code.co_positions())
    loads = []
    if sys.version_info[:2] == (3, 11):
        import opcode

        ops = {opcode.opmap[name]: name for name in _NAMING}
        raw, extended = code.co_code, 0
        for index in range(0, len(raw), 2):
            op, arg = raw[index], raw[index + 1] | extended
            if op == opcode.EXTENDED_ARG:
                extended = arg << 8
                continue
            extended = 0
            name = ops.get(op)
            if name is None:
                continue
            if name == "LOAD_GLOBAL":
                text = code.co_names[arg >> 1]
            elif name in ("LOAD_FAST", "LOAD_DEREF"):
                text = code._varname_from_oparg(arg)
            else:
                text = code.co_names[arg]
            loads.append((positions[index // 2], text))
    else:
        import dis

        loads = [
            (
                (
                    i.positions.lineno,
                    i.positions.end_lineno,
                    i.positions.col_offset,
                    i.positions.end_col_offset,
                ),
                i.argval,
            )
            for i in dis.get_instructions(code)
            if i.opname in _NAMING and i.positions is not None and type(i.argval) is str
        ]
    spans = [
        ((at[0], at[2] or 0), (at[1] or at[0], at[3] or 0), text)
        for at, text in loads
        if at[0] is not None and type(text) is str
    ]
    return positions, spans


def _names_text(code, prefix: str) -> bool:
    """Whether ``code``'s file name starts with ``prefix``; only an exact ``str`` is read (a
    code object made with ``replace`` may carry a subclass whose ``startswith`` is the
    notebook's)."""
    filename = code.co_filename
    return type(filename) is str and filename.startswith(prefix)


def _print_chain(what: str, frame) -> None:
    """For developers (COURSEKIT_AUDIT_DEBUG=1): the stack behind a flag, on the output."""
    lines = []
    while frame is not None and len(lines) < 30:
        lines.append(f"  {frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}")
        frame = frame.f_back
    print(f"AUDIT {what}\n" + "\n".join(lines))


_WATCHED_PACKAGES = ("coursekit", "torch", "numpy")
_MOST_NESTING = 3  # levels of the hook inside itself that are classified (see the hook)
_RAN_INSIDE = "it ran code of its own inside the grader's audit hook"
_TYPE_MODULE = type.__dict__["__module__"]
_TYPE_QUALNAME = type.__dict__["__qualname__"]


def _module_of(cls) -> str:
    """A class's module, read from its own dict (no metaclass's code runs); "" if not text."""
    try:
        module = _TYPE_MODULE.__get__(cls)
    except Exception:  # noqa: BLE001 - a class without one
        return ""
    return module if type(module) is str else ""


def _qualname_of(cls) -> str:
    return _TYPE_QUALNAME.__get__(cls)


_FRAME_HOOK = frame_hook_guard.EVENT
_CODE_FROM_BYTES = frozenset({"marshal.loads", "marshal.load"})
_EVENTS = frozenset(
    {
        *_ALWAYS,
        *_CODE_FROM_BYTES,
        "object.__getattr__",
        "object.__setattr__",
        "compile",
        "code.__new__",
        "os.exec",
        "open",
        "exec",
        "sys.addaudithook",
        _FRAME_HOOK,
    }
)


def _frame_hook(setter: str, callback, provenance) -> tuple[str | None, bool]:
    """torch._dynamo's frame hook being set (:mod:`coursekit.grading.sandbox.frame_hook_guard`):
    a callback that is not torch's own machinery counts whoever sets it (library code that
    keeps what it is handed, ``frames.append``, included); any callback set by the
    notebook's own code counts too (torch.compile sets its own from torch's code)."""
    if not callable(callback):
        return None, True  # None or False: the hook turned off, or set to run only
    what = f"it set torch._dynamo's {setter} callback, which is handed every frame"
    if not _torchs_own(callback, provenance):
        return f"{what}, to code of its own", False
    return what, True


def _torchs_own(callback, provenance) -> bool:
    """Whether ``callback`` is torch's machinery: a function of torch's files, in torch's
    own globals, or an object (or a method bound to one) of a class of torch's, all it holds
    library code too (dynamo's ``ConvertFrame`` wrappers; one built around a notebook's
    function would hand it every frame). Dynamo's hold their backends and graphs deep: they
    are walked :data:`FRAME_HOOK_DEPTH` levels beyond provenance's usual depth."""
    home = _torch_home()
    if not home:
        return False
    target = callback  # exact types throughout: isinstance believes a spoofed __class__
    if type(callback) is types.MethodType:
        target = callback.__func__
        if not _torch_class(type(callback.__self__), provenance):
            return False
    if type(target) is types.FunctionType:
        return (
            target.__code__.co_filename.startswith(home + "/")
            and provenance.is_library(target.__code__)
            and provenance.is_library_globals(target.__globals__)
            and provenance.is_library_callable(callback, deeper=FRAME_HOOK_DEPTH)
        )
    if type(target) in (types.BuiltinFunctionType, types.MethodWrapperType):
        return False  # a builtin's method (a list's append) keeps what it is handed
    return _torch_class(type(target), provenance) and provenance.is_library_callable(
        callback, deeper=FRAME_HOOK_DEPTH
    )


FRAME_HOOK_DEPTH = 4  # dynamo's eager and inductor callbacks pass at 4, not at 0 (measured)


def _torch_home() -> str:
    """torch's folder, read from the module's own dict: ``sys.modules["torch"]`` may be
    anything a hand-in put there, whose ``__file__`` a property of its own would give."""
    torch = dict.get(sys.modules, "torch") if type(sys.modules) is dict else None
    if type(torch) is not types.ModuleType:
        return ""
    path = dict.get(_MODULE_DICT(torch), "__file__")
    return path.rpartition("/")[0] if type(path) is str else ""


_MODULE_DICT = types.ModuleType.__dict__["__dict__"].__get__


def _torch_class(cls: type, provenance) -> bool:
    return _module_of(cls).split(".")[0] == "torch" and provenance.is_library_callable(cls)


def warm_up() -> None:
    """Let torch make the changes it makes to itself on first use, before :func:`snapshot`.

    Creating an optimizer imports ``torch._dynamo``, which wraps ``torch.manual_seed``, and
    wraps its class's ``step`` in a profiling hook (once per class).
    """
    import torch

    from coursekit.checks import tamper_evident

    _helper_codes()
    # the loads of the code that calls sys._getframe at every module call of a check's (its
    # instruments' poke): read once here, not again in each hand-in's process
    _named_at(tamper_evident.poke.__code__, 0, "getframe")
    parameter = torch.nn.Parameter(torch.zeros(1))
    for name in dir(torch.optim):
        cls = getattr(torch.optim, name)
        if isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer):
            try:
                cls([parameter], lr=0.01)
            except Exception:  # an optimizer that wants other arguments: nothing to warm
                continue


def install_tripwires(questions: dict, provenance, root=None):
    """Wrap coursekit's own answers to each question: the library function of the same name
    (``coursekit.training.train_accumulated``...), those a question names in its
    ``library_answers`` (the same answer under another name: ``coursekit.real_model.tuning.tune``;
    an earlier module's answer that answers this one too: ``coursekit.training.train_accumulated``
    with a scheduler; a right answer a check keeps for its own use: a memory test's warm-up)
    and the check's ``reference()``. One answer to several questions is reported under each,
    and the runner counts the one being tested. Returns the judge's ``send``
    (:func:`_judge_calls`): the runner hands it its record with ``("reporter", record)``
    before any hand-in code runs, and ``("ping",)`` answers ``(None, True)`` while the
    judge is whole.

    A call from the notebook's code to one of them while the notebook's code is anywhere on
    the stack is reported (``record((question, where))``; the runner counts it only where
    the answer is one of the assignment's own questions, during the tests): its function
    hands in coursekit's answer, whatever calls it directly (``map``, ``functools.reduce``,
    ``multiprocessing.pool.starmapstar``, a standard-library function compiled again with
    the notebook's globals). So is a call whose direct caller is not library code that names
    the answer: a library caller that never names it (``itertools.starmap``, a hook, a
    ``partial``) was handed it. The one call that passes is the libraries' own: library code
    that names the answer (a coursekit function whose code calls it by one of its names),
    with no frame of the notebook's below it. Frames are judged by code and globals
    (:meth:`coursekit.grading.sandbox.provenance.Provenance.is_library_frame`), never by the
    file name a code object claims.

    Why it is built this way: anything a tripwire's closure held could be read, and a
    closure cell rewritten, with no step Python audits; a hand-in once swapped the reporter
    for a no-op and put it back within one call. A tripwire holds what it needs as a
    constant of its own code object, which cannot be changed (replacing the code is
    audited): the judge and the tripwire's index, not the answer. The judge keeps the
    answers, the record and the provenance in a generator's frame, reached only through
    ``gi_frame`` or ``gc``, which the audit hook reports; its code runs over private globals.
    A reference that a module also holds under its own name is watched there too. ``root``:
    the code of the first frame of the stack the libraries' own path runs on (by default the
    main thread's; a thread of the notebook's starts elsewhere). Installed in the warm
    parent, before the harness is sealed (:mod:`coursekit.grading.sandbox.harness_seal`),
    so the wrappers are
    what the seal records."""
    import builtins

    private = dict(globals())  # the judge looks up no name a hand-in can rebind
    private["__builtins__"] = dict(vars(builtins))
    make = types.FunctionType(_judge_calls.__code__, private, "_judge_calls")
    parts: list = []  # (question, where, names, answer) of each tripwire: the judge's alone
    if root is None:  # the main thread's first frame: the runner's too, forked from here
        import threading

        root = sys._current_frames()[threading.main_thread().ident]
        while root.f_back is not None:
            root = root.f_back
    judging = make(provenance.is_library_frame, sys._getframe, root, parts, _MOST_FRAMES, READ_OUT)
    next(judging)
    judge = judging.send
    wrappers: dict[int, tuple[int, Callable]] = {}  # id of an answer -> its part, tripwire
    originals: dict[int, Callable] = {}  # id of a tripwire -> the answer it watches

    def wrap(function, question: str, where: str, names: frozenset = frozenset()):
        function = originals.get(id(function), function)  # wrapped already: the answer
        if id(function) in wrappers:  # one answer to several questions: each is reported
            index, tripwire = wrappers[id(function)]
            questions, first, known, *rest = parts[index]
            if question not in questions:
                questions = (*questions, question)
            parts[index] = (questions, first, known | names, *rest)
            return tripwire
        tripwire = _made_tripwire(judge, len(parts), function)
        wrappers[id(function)] = (len(parts), tripwire)
        originals[id(tripwire)] = function
        parts.append(((question,), where, names, function, tripwire.__code__))
        _hold_original(function, where)  # see _held_answer
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
                names = frozenset({question_name, function.__name__})
                setattr(module, question_name, wrap(function, question_name, where, names))
        for dotted in getattr(question, "library_answers", ()):  # the answer by another name
            owner, _, attribute = dotted.rpartition(".")
            function = vars(sys.modules.get(owner, types)).get(attribute)
            if not isinstance(function, types.FunctionType):
                continue
            function = originals.get(id(function), function)
            bound = [
                (module, name)
                for _, module in modules
                for name, value in list(vars(module).items())
                if value is function or value is wrappers.get(id(function), (0, function))[1]
            ]
            names = {attribute, question_name, *(name for _, name in bound)}
            if owner.startswith("coursekit.checks."):  # a check's own: its warm-up's name
                names |= _CALLED_AS
            names = frozenset(names)
            for module, name in bound:
                setattr(module, name, wrap(function, question_name, dotted, names))
        try:
            reference = question.reference()
        except Exception:  # a question without a reference here: nothing to wrap
            continue
        if callable(reference) and id(getattr(reference, "__code__", None)) in _TRIPWIRE_CODES:
            continue  # a tripwire already (the module's own function, wrapped above)
        if callable(reference):
            wrapped = wrap(reference, question_name, f"the check's reference for {question_name}")
            question.reference = lambda wrapped=wrapped: wrapped
            for _, module in modules:  # the same function under its own name, watched too
                for name, value in list(vars(module).items()):
                    if value is reference:
                        setattr(module, name, wrapped)
    # an answer a library function took as a default or closed over when it was defined
    # (``train_recipe(window_fn=recipe_window)``): the tripwire instead, and the parameter's
    # name is one the answer is called by (found by review: the default was the unwatched
    # answer, there for any cell to read)

    def rewired(value, name: str):
        if id(value) not in wrappers:
            return value
        index, tripwire = wrappers[id(value)]
        questions, first, known, *rest = parts[index]
        parts[index] = (questions, first, known | {name}, *rest)
        return tripwire

    for function in _functions_of(module for _, module in modules):
        code = function.__code__
        if function.__defaults__:
            positional = code.co_varnames[: code.co_argcount]
            named = positional[len(positional) - len(function.__defaults__) :]
            new = tuple(map(rewired, function.__defaults__, named))
            if any(a is not b for a, b in zip(new, function.__defaults__, strict=True)):
                function.__defaults__ = new
        for key, value in list((function.__kwdefaults__ or {}).items()):
            function.__kwdefaults__[key] = rewired(value, key)
        for name, cell in zip(code.co_freevars, function.__closure__ or (), strict=True):
            try:
                cell.cell_contents = rewired(cell.cell_contents, name)
            except ValueError:  # an empty cell
                continue
    return judge


def _functions_of(modules):
    """The functions of these modules (theirs, not imported) and of the classes they define."""
    for module in modules:
        for value in list(vars(module).values()):
            if getattr(value, "__module__", None) != module.__name__:
                continue
            if type(value) is types.FunctionType:
                yield value
            elif isinstance(value, type):
                for member in list(vars(value).values()):
                    member = getattr(member, "__func__", member)  # staticmethod, classmethod
                    if type(member) is types.FunctionType:
                        yield member


def _tripwire(*args, **kwargs):
    """A call to coursekit's answer: judged, then made (see install_tripwires). The tuple
    below is a placeholder, replaced in each tripwire's code by its own parts."""
    judge, index = ("judge", "index")
    raised, answer = judge(("call", index))
    if raised is not None:  # a timer's or a signal's, met in the judge: raised here
        raise raised
    return answer(*args, **kwargs)


_PLACEHOLDER = ("judge", "index")


def _made_tripwire(judge, index: int, function):
    """A tripwire around ``function``: :func:`_tripwire`'s code with its parts as a constant
    (no closure, no global looked up, and not the answer itself: the judge hands that back
    once it has judged the call), named and documented as the answer it watches."""
    code = _tripwire.__code__
    parts = (judge, index)
    consts = tuple(parts if c == _PLACEHOLDER else c for c in code.co_consts)
    tripwire = types.FunctionType(code.replace(co_consts=consts), _tripwire.__globals__)
    functools.update_wrapper(tripwire, function)
    del tripwire.__wrapped__  # no plain path back to the unwatched function
    global _TRIPWIRE_CODES
    _TRIPWIRE_CODES = frozenset({*_TRIPWIRE_CODES, id(tripwire.__code__)})
    return tripwire


def _judge_calls(is_library_frame, getframe, root, parts, most_frames, read_out=None):
    """The tripwires' judge, as a generator whose frame alone holds the answers, the runner's
    record and the provenance (see install_tripwires). It yields ``(raised, value)``.

    Sent ``("call", index)`` by the tripwire of ``parts[index]``: unless library code that
    names the answer called that tripwire, with only library frames below down to the
    runner's first (``root``, a frame, or for a test the code of one: on a thread's own
    stack, all library code, nothing says who handed it the call), it hands ``(question,
    where)`` to the record; then it yields what the record answered (an exception met
    there, to be raised by the tripwire) and the answer to call. The judge finds that
    caller itself: whoever else sends it (a hand-in that read the judge out of a tripwire's
    constants) is reported (``where``: :data:`READ_OUT`) and handed no answer. Sent
    ``("reporter", record)``: takes
    the record, the first time only. Sent ``("ping",)``: yields whether a record is set.
    Anything else is passed over. An exception met here (a timer's, one thrown in) is handed
    back, and the judge goes on. Only ints and exact strings are read from a message: no
    method of the notebook's runs here."""
    record = None
    answer = (None, None)
    while True:
        try:
            while True:  # within the try: a signal met at a jump back is caught too
                message = yield answer
                answer = (None, None)
                if type(message) is not tuple or not message or type(message[0]) is not str:
                    continue
                kind = message[0]
                if kind == "ping" and len(message) == 1:
                    answer = (None, record is not None)
                    continue
                if kind == "reporter" and len(message) == 2 and record is None:
                    record = message[1]
                    continue
                if kind != "call" or len(message) != 2 or type(message[1]) is not int:
                    continue
                index = message[1]
                if not 0 <= index < len(parts):
                    continue
                questions, where, names, function, tripwire = parts[index]
                sender = getframe(1)  # 0 this generator, 1 whoever sent the message
                if sender.f_code is not tripwire:
                    # the judge read out of a tripwire's constants: the answer is handed to
                    # no one else (found by review: a cell took it out, unwatched, while no
                    # question was tested), and the reading is reported, tested or not
                    raised = None if record is None else record((questions[0], read_out))
                    answer = (raised, None)
                    continue
                passes = False
                if names:
                    # library code that names the answer called the tripwire, with nothing
                    # but library frames below, down to the runner's first
                    frame = sender.f_back
                    code = frame.f_code if frame is not None else None
                    named = (
                        code is not None
                        and is_library_frame(frame)
                        and not (
                            names.isdisjoint(code.co_names)
                            and names.isdisjoint(code.co_varnames)
                            and names.isdisjoint(code.co_freevars)
                        )
                    )
                    for _ in range(most_frames if named else 0):
                        if frame.f_back is None:
                            passes = frame is root or frame.f_code is root
                            break
                        frame = frame.f_back
                        if not is_library_frame(frame):
                            break
                raised = None
                for question in () if passes or record is None else questions:
                    raised = record((question, where)) or raised
                answer = (raised, function)
        except GeneratorExit:
            raise
        except BaseException as error:  # noqa: BLE001 - a timer's CellTimeout, a throw():
            # handed back without a way into this frame (BaseException's own method: no
            # __setattr__ of a notebook's class runs here), and the judge goes on
            answer = (BaseException.with_traceback(error, None), None)


# what runs first, read through each type's own C descriptor (a tuple: nothing can be
# added to it while a private copy holds it)
_WRAPPED_BY = (
    (functools.partial, functools.partial.__dict__["func"].__get__),
    (types.MethodType, types.MethodType.__dict__["__func__"].__get__),
    (staticmethod, staticmethod.__dict__["__func__"].__get__),
    (classmethod, classmethod.__dict__["__func__"].__get__),
)


def coursekit_function(fn, provenance) -> str | None:
    """``module.name`` when ``fn`` is one of coursekit's own functions (not the notebook's),
    or holds one of coursekit's answers: a hand-in whose answer *is* coursekit's
    implementation, imported under its name, or reached through what it holds (a
    ``partial``'s function or arguments, a bound method's function or object, a closure
    cell, a default, a wrapped function; to :data:`_MOST_DEPTH` levels)."""
    target = fn  # exact types: isinstance believes a spoofed __class__
    for _ in range(_MOST_DEPTH):  # what runs first: through partials and bound methods
        kind = type(target)
        read = next((r for k, r in _WRAPPED_BY if issubclass(kind, k)), None)
        if read is None:
            break
        target = read(target)  # the C slot itself: a subclass's property does not run
    if type(target) is types.FunctionType:
        target = target.__dict__.get("__wrapped__", target)
    if type(target) is types.FunctionType:
        module, name = target.__module__, target.__qualname__
        if type(module) is str and module.startswith("coursekit"):
            if provenance.is_library(target.__code__):
                return f"{module}.{name if type(name) is str else '?'}"
    return _held_answer(fn, provenance)


_MOST_DEPTH = 8
# the ``where`` of a report made when the judge is sent a call by other code than a tripwire's
# (read out of its constants): counted whether a question is tested or not (runner.counted)
READ_OUT = "read out of its tripwire"
# the name a check's own code calls an answer of its question by, besides the answer's own:
# the memory test's warm-up (coursekit.checks.window_memory.measurement) runs a right window
# handed to it as ``warm_up_with`` (given to the checks' own answers alone)
_CALLED_AS = frozenset({"warm_up_with"})
_MOST_FRAMES = 2000
_MOST_VISITS = 20_000  # objects _held_answer reads, at most, for one function
# id -> where, of each answer a tripwire wraps and of its code object. Read-only, and rebound
# as a whole when tripwires are installed (in the warm parent, before any hand-in exists), so
# the runner's private copy of this module keeps the one it was made with.
_ORIGINALS: types.MappingProxyType = types.MappingProxyType({})
# ids of the tripwires' code objects (each its own: its constants are its parts), rebound as
# a whole like _ORIGINALS; the tripwires hold their codes, so no id is reused
_TRIPWIRE_CODES: frozenset = frozenset()


def _hold_original(function, where: str) -> None:
    """Record an answer a tripwire wraps: whoever holds it, or a function made over its code
    (``types.FunctionType(original.__code__, ...)``), holds coursekit's unwatched answer.
    The judge keeps the objects alive (no id is reused) where no hand-in reaches them."""
    global _ORIGINALS
    code = getattr(function, "__code__", None)
    known = dict(_ORIGINALS)
    known[id(function)] = where
    if isinstance(code, types.CodeType):
        known[id(code)] = where
    _ORIGINALS = types.MappingProxyType(known)


def _held_answer(fn, provenance=None) -> str | None:
    """``module.name`` of a tripwired answer of coursekit's that ``fn`` holds (see
    :func:`coursekit_function`), read without running any of the notebook's code.

    Besides a tripwire held in ``fn``'s parts, it looks for the unwatched answer a tripwire
    wraps (:data:`_ORIGINALS`; its judge hands it to any caller, who is reported), or a
    function made over that answer's code, anywhere the notebook's functions can reach it
    by the names their code uses: a global (the notebook's namespace), a builtin, an
    attribute of a module or class they name (``T._real`` as well as ``_real``), and what
    those hold. Library
    functions' globals are not walked: the libraries' own path to an answer is the tripwire,
    never the original. Limit: an original stashed under a name the code builds at run time
    (``globals()["_r" + "eal"]``, ``getattr(sys, ...)``) is not found."""
    wanted, originals = _TRIPWIRE_CODES, _ORIGINALS
    # (object, depth, names its code uses, held by fn itself rather than reached by a name)
    stack, seen = [(fn, 0, frozenset(), True)], set()
    visits = 0
    while stack and visits < _MOST_VISITS:
        item, depth, names, held = stack.pop()
        if id(item) in seen or depth > _MOST_DEPTH:
            continue
        seen.add(id(item))
        visits += 1
        if id(item) in originals:
            return originals[id(item)]
        parts: list = []
        if type(item) is types.FunctionType:
            code = item.__code__
            if id(code) in wanted:  # a tripwire: held, it is the answer; named, it is watched
                if held:
                    return f"{item.__module__}.{item.__qualname__}"
                continue  # an earlier module's answer imported by name: called, it reports
            if id(code) in originals:
                return originals[id(code)]
            if _coursekits(item) and provenance is not None and provenance.is_library(code):
                continue  # coursekit's own may hold its answers (see _coursekits)
            parts += [*(item.__defaults__ or ()), *(item.__kwdefaults__ or {}).values()]
            for cell in item.__closure__ or ():
                try:
                    parts.append(cell.cell_contents)
                except ValueError:  # an empty cell
                    continue
            parts += list(item.__dict__.values())
            if not _is_library_function(item, provenance):
                names = _names_in(code)
                namespace = item.__globals__
                if type(namespace) is dict:  # the names its code uses, not the others'
                    named = [dict.get(namespace, name) for name in names]
                    builtins = dict.get(namespace, "__builtins__")
                    builtins = (
                        vars(builtins) if isinstance(builtins, types.ModuleType) else builtins
                    )
                    if type(builtins) is dict:
                        named += [dict.get(builtins, name) for name in names]
                    stack += [(part, depth + 1, names, False) for part in named if part is not None]
        elif isinstance(item, functools.partial):
            parts += [item.func, *item.args, *(item.keywords or {}).values()]
        elif isinstance(item, types.MethodType | staticmethod | classmethod):
            parts += [item.__func__, getattr(item, "__self__", None)]
        elif type(item) in (tuple, list):
            parts += list(item)[:64]
        elif type(item) is dict:
            parts += list(dict.values(item))[:64]
        elif isinstance(item, types.ModuleType | type):
            try:
                attributes = object.__getattribute__(item, "__dict__")
            except (AttributeError, TypeError):
                attributes = None
            if isinstance(attributes, dict | types.MappingProxyType):
                named = [attributes.get(name) for name in names if name in attributes]
                if isinstance(item, type) and attributes.get("__module__") == "__main__":
                    named += list(attributes.values())[:64]  # a class the notebook made
                stack += [(part, depth + 1, names, False) for part in named if part is not None]
        elif callable(item) and not _coursekits(type(item)):
            try:
                attributes = object.__getattribute__(item, "__dict__")
            except (AttributeError, TypeError):
                attributes = None
            if type(attributes) is dict:
                parts += list(dict.values(attributes))[:64]
        stack += [(part, depth + 1, names, held) for part in parts if part is not None]
    return None


def _coursekits(item) -> bool:
    """A function or class of coursekit's own: it may hold an answer it wraps or checks
    against (a check's reference), which is not the notebook holding it; not looked into."""
    try:
        return str(object.__getattribute__(item, "__module__")).startswith("coursekit")
    except (AttributeError, TypeError):
        return False


def _is_library_function(function, provenance) -> bool:
    """A function whose code and globals are a library's (its globals are not walked)."""
    if provenance is None:
        return False
    try:
        return bool(
            provenance.is_library(function.__code__)
            and provenance.is_library_globals(function.__globals__)
        )
    except Exception:  # noqa: BLE001 - judged as the notebook's
        return False


def _names_in(code, depth: int = 0) -> frozenset:
    """The global and attribute names ``code`` and the code nested in it use."""
    names = set(code.co_names)
    if depth < _MOST_DEPTH:
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                names |= _names_in(const, depth + 1)
    return frozenset(names)


def private_copy(module, modules_frozen: bool = False) -> types.SimpleNamespace:
    """The module's functions, each re-made over a private copy of the module's globals and
    of the builtins. A hand-in that later rebinds a name in the module (or in ``builtins``)
    changes what other code sees, not what these copies run; only the copies' own
    ``__globals__`` reach the private dict, and getting at them takes a frame or ``gc``,
    which the audit hook reports first. ``modules_frozen``: the modules it names are copied
    too, as they are now (``types.FunctionType`` rebound for the length of one call had
    blinded the audit hook's check of library code changed); for a module whose code never
    needs a module itself (this one)."""
    import builtins

    namespace = dict(vars(module))
    namespace["__builtins__"] = dict(vars(builtins))
    if modules_frozen:
        for name, value in list(namespace.items()):
            if isinstance(value, types.ModuleType):
                namespace[name] = types.SimpleNamespace(**vars(value))  # sys.modules: live
    for name, value in list(namespace.items()):
        if isinstance(value, types.FunctionType) and value.__module__ == module.__name__:
            namespace[name] = types.FunctionType(
                value.__code__, namespace, value.__name__, value.__defaults__, value.__closure__
            )
            namespace[name].__kwdefaults__ = value.__kwdefaults__
    return types.SimpleNamespace(**namespace)
