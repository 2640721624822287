"""Who registered what with torch's dispatcher: ``torch.library`` kernels and operators.

A notebook can register a kernel of its own for one of torch's operators
(``torch.library.Library("aten", "IMPL").impl("mul.Tensor", ...)``) and every later
multiplication, the hidden tests' included, runs it; nothing the harness seal records is
replaced. Torch registers kernels too, lazily, as its modules are imported. :func:`watch`
(in the warm parent, before any hand-in code) wraps torch's Python ways in (below) and
records, for each registration that passes them, the stack that made it;
:func:`by_notebook` says whether the notebook's code did; :func:`take_back` undoes it.
:mod:`coursekit.grading.sandbox.global_state` calls both before and after each test.

The ways in wrapped are ``torch._C._dispatch_library`` (a new handle), the registration
methods of the handle's class, ``torch._C._DispatchModule`` (``impl``, ``define``,
``fallback``...), which the registrations of every handle pass, those of a handle torch made
itself (a ``Library``'s own ``.m``) included, and ``torch.library.Library``'s methods (also
for the registrations torch keeps in Python: fake kernels, torch_dispatch rules). The C
functions the wrappers replaced are not in their closures but in the frame of a generator
(:func:`_keeper`), which reads who called a wrapper itself (a request sent to it by other
code is judged as that code's) and lets no exception out, so no traceback leads into its
frame: only an audited step (``gi_frame``, ``gc``) reaches it. A registration made through
a library function that names the call it makes is judged the library's
(:func:`by_notebook`): torch registers lazily, from its own functions the notebook calls;
one made by library code handed the call, or handed a function of the notebook's code to
run, is the notebook's (``global_state._check_library``).

So the dispatcher itself is read too: :func:`dispatcher_snapshot` (in the warm parent,
after every import) keeps each operator's registrations as torch prints them, with the
backend fallbacks, and :func:`dispatcher_changes` (before the first test and after the
last) names every operator that existed then whose kernels differ now, however the change
was made. The reading before the first test, where that is a memory test, is begun while
its fork measures (:func:`read_until`, from the runner). Operators added since (a library
imported later defines its own) are not compared: nothing the tests run calls them.
"""

from __future__ import annotations

import sys
import threading
import time
import types

from coursekit.grading.sandbox.tampering import _named_at


def _ledger(finalizing=sys.is_finalizing):
    """The record of registrations, in this generator's frame alone: no list of it is held
    anywhere a notebook's code can reach without an audited step (``gi_frame``), so what was
    recorded can be neither rewritten nor taken off, and ``close()`` does not end it (found
    by review: it ended the record with no audited step) but at the interpreter's own
    shutdown. Sent ``("add", item)``: appends it.
    Sent ``("since", n)``: answers ``(the records from the n-th on, as a tuple, the count)``.
    It yields ``(raised, answer)``: an exception met here (a timer's, one thrown in) is
    handed back, to be raised by the caller, and the record goes on. Only an exact ``str``
    and ``int`` are read from a message: no method of the notebook's runs here."""
    items: list = []
    answer = (None, None)
    while True:
        try:
            while True:  # within the try: a signal met at a jump back is caught too
                message = yield answer
                answer = (None, None)
                if type(message) is not tuple or len(message) != 2:
                    continue
                kind, value = message
                if type(kind) is not str:
                    continue
                if kind == "add":
                    items.append(value)
                elif kind == "since" and type(value) is int:
                    answer = (None, (tuple(items[value:]), len(items)))
        except GeneratorExit:
            if finalizing():
                raise
            answer = (None, None)  # close() raises RuntimeError to its caller; this goes on
        except BaseException as error:  # noqa: BLE001 - a timer's, a throw(): handed back
            answer = (BaseException.with_traceback(error, None), None)


_RECORDING = _ledger()
next(_RECORDING)
# What :func:`watch` records, each ``(what, stack, owner, the callables it was handed)``: the
# stack from the registering
# call down, as (code, globals) pairs, until the import system's call that runs a module's
# code; the owner, what take_back undoes (the Library, or the dispatcher's handle). The
# ledger's ``send``: read it with :func:`records_since`.
RECORD = _RECORDING.send
del _RECORDING


def records_since(ledger, seen: int) -> tuple[tuple, int]:
    """``(the records from the seen-th on, how many there are)`` of ``ledger`` (:data:`RECORD`)."""
    raised, answer = ledger(("since", seen))
    if raised is not None:
        raise raised
    return answer


def _recorder(ledger):
    """``record(item)``: appends ``item`` to ``ledger``; an exception the ledger met is
    raised here."""

    def record(item) -> None:
        raised, _ = ledger(("add", item))
        if raised is not None:
            raise raised

    return record


_WATCHERS: set = set()  # ids of the wrappers made (each registrar is wrapped once)
_IMPORTING = "_call_with_frames_removed"
_NEW_LIBRARY = "a library of operators"
_REGISTRARS = ("torch.library", "torch._library", "torch._ops")
# the handle's registration methods (``reset`` removes, and take_back calls it)
_HANDLE_METHODS = (
    "def_",
    "def_legacy",
    "def_name_t_t",
    "def_schema_t_t",
    "define",
    "fallback",
    "fallback_fallthrough",
    "impl",
    "impl_t_t",
    "impl_with_aoti_compile",
    "register_ad_inplace_or_view_fallback",
)
# frames recorded, to the import system's call or the stack's end: all of them (found by
# review: a registration 70 frames under nested sched.run calls lost the notebook's frame
# at a cut of 64; a cut judged the notebook's flagged torch's own under a deep compile)
_STACK_DEPTH = 100_000
# the names a frame calls torch's API by (the wrapped functions' own, and Library's)
_API_NAMES = (
    *_HANDLE_METHODS,
    "_dispatch_library",
    "_register_fake",
    "_register_torch_dispatch_rule",
)
_NAMED_AT = _named_at  # whether a frame's running instruction names a function (tampering)
_WRAPPER_CODES: frozenset = frozenset()  # the code of watch()'s wrappers, set by watch()
# what a thread runs its target or a timer its function from (taken at import: no hand-in yet)
_THREAD_RUNS = frozenset({threading.Thread.run.__code__, threading.Timer.run.__code__})
_HANDLE = _LIBRARY = type(None)  # torch._C._DispatchModule and torch.library.Library
_LIBRARY_DICT = None  # a Library's own __dict__ (the C getset: no property of a subclass)
_RESET = None  # torch's own handle reset, taken by watch()


def registrars() -> list:
    """(owner, attribute name) of each of torch's ways to register with its dispatcher."""
    import torch.library

    names = ("define", "impl", "fallback", "_register_fake", "_register_torch_dispatch_rule")
    handle = torch._C._DispatchModule
    watched = [(torch._C, "_dispatch_library")]
    watched += [(handle, name) for name in _HANDLE_METHODS if name in vars(handle)]
    return watched + [(torch.library.Library, name) for name in names]


def _keeper(originals: list, record, getframe, stack_of, wrapper=None):
    """The functions the wrappers replaced, held in this generator's frame only: each
    request ``(index, label, args, kwargs)`` calls ``originals[index]``, records the
    registration and answers ``(True, result)``, or ``(False, the exception)``.

    Who registered is read here, not taken from the request: the stack below the caller of
    ``send`` (below the wrapper, when ``wrapper``'s code made the request; anyone else who
    reached ``send`` through a wrapper's closure is at the stack's top, and judged as it
    is). No exception but ``close()``'s leaves this frame: each is handed to the caller
    with its traceback dropped, by ``BaseException``'s own method (a traceback through this
    frame would lead to what it holds, and ending the keeper would end every registration,
    the notebook's own too). Only an exact
    ``str`` is read as the name registered: a subclass's methods would run the notebook's
    code here."""
    answer = None
    while True:
        try:
            while True:  # within the try: a signal met at a jump back is caught too
                request = yield answer
                answer = (False, None)
                if type(request) is not tuple or len(request) != 4:
                    continue
                index, label, args, kwargs = request
                sender = getframe(1)
                stack = stack_of(sender.f_back if sender.f_code is wrapper else sender)
                try:
                    result = originals[index](*args, **kwargs)
                except BaseException as error:  # noqa: BLE001 - handed on, raised there
                    answer = (False, BaseException.with_traceback(error, None))
                    continue
                detail = args[1] if len(args) > 1 and type(args[1]) is str else ""
                owner = result if label == _NEW_LIBRARY else (args[0] if args else None)
                answer = (True, result)
                what = f"{label} {detail.strip()[:60]}".strip()
                record((what, stack, owner, _callables_in(args, kwargs)))
        except GeneratorExit:  # closed, it ends every registration, the notebook's own too
            raise
        except BaseException as error:  # noqa: BLE001 - a timer's, a throw(): handed on
            answer = (False, BaseException.with_traceback(error, None))


def _bind_destroy_steps(library_module) -> None:
    """What :func:`take_back` reads, bound while no hand-in exists: torch's registration
    handle class and its dict getset, ``torch.library``'s dict and its cache clearer."""
    global _ON_DESTROY, _LIBRARY_MODULE_DICT
    import torch
    import torch._library.utils as library_utils
    import torch._ops

    _OPS[0], _OPS_CLASS[0] = torch.ops, type(torch.ops)
    _NAMESPACE_CLASS[0] = torch._ops._OpNamespace

    kind = library_utils.RegistrationHandle
    slot = next(
        vars(klass)["__dict__"].__get__
        for klass in kind.__mro__
        if type(vars(klass).get("__dict__")) is types.GetSetDescriptorType
    )
    namespace = vars(library_module)

    steps = _deregister_steps()

    def on_destroy(handle, provenance):
        """What destroying ``handle`` does, as a call that runs none of the notebook's
        code, where ``handle`` is exactly torch's class and its ``_on_destroy`` one of the
        deregister functions torch makes (known by their code), closing over objects of
        torch's own classes; else None (left, flagged all the same). Torch's function is
        not called: it works over state a cell can change (a holder's ``kernels`` made a
        list of its own, an element with an ``__eq__``: found by review); its effect is
        made here, over exact types, by identity."""
        if type(handle) is not kind or provenance is None:
            return None
        state = slot(handle)
        if type(state) is not dict or _odd_keys(state):
            return None
        call = dict.get(state, "_on_destroy")  # (its keys exactly str: looked up in C)
        if type(call) is not types.FunctionType:
            return None
        step = next((make for code, make in steps if _CODE_OF(call) is code), None)
        if step is None:
            return None
        cells = {}
        names = _CODE_OF(call).co_freevars
        for name, cell in zip(names, _CLOSURE_OF(call) or (), strict=False):
            try:
                cells[name] = _CELL_CONTENTS(cell)
            except ValueError:  # an empty cell
                return None
        return step(cells, provenance)

    def module_dict():
        return namespace if not _odd_keys(namespace) else None

    _ON_DESTROY, _LIBRARY_MODULE_DICT = on_destroy, module_dict


def watch() -> None:
    """Wrap torch's ways to register with its dispatcher (see the module's docstring) so
    that each call records who made it. Run once, in the warm parent, before the seal and
    before any hand-in code. A registration is the notebook's when the nearest frame below
    it that is not library code called torch's registration API itself; one made while a
    module is imported, or by torch's own lazy set-up, is the library's (judged by
    :func:`by_notebook`, in :func:`coursekit.grading.sandbox.global_state.restore`, where
    provenance is known)."""
    global _HANDLE, _LIBRARY, _LIBRARY_DICT, _RESET, _WRAPPER_CODES
    import torch.library

    _HANDLE, _LIBRARY = torch._C._DispatchModule, torch.library.Library
    _RESET = vars(_HANDLE)["reset"]
    _bind_destroy_steps(torch.library)
    _LIBRARY_DICT = next(
        vars(klass)["__dict__"].__get__
        for klass in _LIBRARY.__mro__
        if type(vars(klass).get("__dict__")) is types.GetSetDescriptorType
    )
    getframe, record = sys._getframe, _recorder(RECORD)
    originals: list = []
    one_at_a_time = threading.RLock()
    send = None  # the keeper's, below

    def through_the_keeper(index: int, label: str):
        """For torch's C functions: the function itself is held by the keeper only, which
        reads who called this wrapper."""

        def registering(*args, **kwargs):
            with one_at_a_time:  # (a generator runs one request at a time)
                done, result = send((index, label, args, kwargs))
            if not done:
                raise result
            return result

        return registering

    keeper = _keeper(originals, record, getframe, _stack_of, through_the_keeper(0, "").__code__)
    next(keeper)
    send = keeper.send

    def around(function, label: str):
        """For ``Library``'s Python methods, which register through a handle's methods (each
        wrapped): calling the original gains nothing, so the closure may hold it."""

        def registering(*args, **kwargs):
            stack = _stack_of(getframe(1))
            result = function(*args, **kwargs)
            owner = args[0] if args else None
            detail = args[1] if len(args) > 1 and type(args[1]) is str else ""
            what = f"{label} {detail.strip()[:60]}".strip()
            record((what, stack, owner, _callables_in(args, kwargs)))
            return result

        return registering

    _WRAPPER_CODES = frozenset({through_the_keeper(0, "").__code__, around(len, "").__code__})
    for owner, name in registrars():
        current = vars(owner).get(name)
        if current is None or id(current) in _WATCHERS:
            continue
        if name == "_dispatch_library":
            label = _NEW_LIBRARY
        else:
            label = f"{getattr(owner, '__name__', '?').lstrip('_')}.{name}"
        if isinstance(current, types.FunctionType):
            wrapper = around(current, label)
        else:
            originals.append(current)
            wrapper = through_the_keeper(len(originals) - 1, label)
        _WATCHERS.add(id(wrapper))
        setattr(owner, name, wrapper)


def _callables_in(args: tuple, kwargs: dict) -> tuple:
    """What a registration was handed to run (a kernel, a fake kernel, a dispatch rule's
    class), past its ``self``: ``callable`` reads type slots in C, no method runs."""
    return tuple(item for item in (*args[1:], *kwargs.values()) if callable(item))


def _stack_of(frame) -> list:
    """``(code, globals, the offset of the instruction running)`` of ``frame`` and those
    below it, to the import system's call that runs a module's code (what
    :func:`by_notebook` judges)."""
    stack = []
    while frame is not None and len(stack) < _STACK_DEPTH:
        stack.append((frame.f_code, frame.f_globals, frame.f_lasti))
        if frame.f_code.co_name == _IMPORTING:
            break
        frame = frame.f_back
    return stack


def by_notebook(stack: list, provenance) -> bool:
    """Whether a recorded registration is the notebook's (see :func:`watch`): the nearest
    frame of the notebook's below it called torch's registration API itself, or handed it
    to library code that calls what it is given without naming it, down to the API
    (``weakref.finalize(x, lib.impl, ...)()``, a ``Thread``'s ``run``, an ``ExitStack``
    callback: found by review). A library frame that names the function it calls there
    chose that call: a registration below it is the library's (torch's own, made lazily
    from its functions the notebook calls). In a thread with no frame of the notebook's,
    the thread's target is judged so, as handed by whoever made the thread
    (``Thread(target=lib.impl, ...)``). (A registration handed the notebook's code to run
    is the notebook's whatever its stack: ``global_state._check_library``.)"""
    for index, (code, namespace, _) in enumerate(stack):
        name = code.co_name  # (exact str only: a subclass's __eq__ would be the notebook's)
        if type(name) is str and name == _IMPORTING and provenance.is_library(code):
            return False
        if provenance.is_library(code) and provenance.is_library_globals(namespace):
            continue
        return index == 0 or _handed_down(stack, index)
    if len(stack) >= _STACK_DEPTH:  # (deeper than Python lets a stack grow: not torch's)
        return True
    runs = [index for index, (code, *_) in enumerate(stack) if code in _THREAD_RUNS]
    return bool(runs) and _handed_down(stack, runs[-1])


def _handed_down(stack: list, caller: int) -> bool:
    """Whether the library frames between the notebook's frame at ``caller`` and the
    registration reach torch's registration API without one of them naming the function
    it calls (each handed what it calls, by the notebook or by the frame before it). The
    API is a registrar module's frame, or one of :func:`watch`'s wrappers, which a frame
    calls by the API's names."""
    for index in range(caller - 1, -1, -1):
        code, namespace, offset = stack[index]
        if code in _WRAPPER_CODES or _registrar_module(namespace):
            return True
        # the names this frame calls its callee by: the next frame's function's, or the
        # API's (the next frame is a wrapper, or, last, the wrapper was not recorded)
        inner = stack[index - 1][0] if index > 0 else None
        callees = _API_NAMES if inner is None or inner in _WRAPPER_CODES else (inner.co_name,)
        if any(type(callee) is str and _NAMED_AT(code, offset, callee) for callee in callees):
            return False
    return True  # (the last frame called the API, not naming it: a wrapper unrecorded)


def _registrar_module(namespace) -> bool:
    """Whether a frame's globals are a module of torch's registration API: its name read
    as an item, as it is, exact ``str`` only (a key of the notebook's in that module is
    never compared, and a str subclass's methods would be the notebook's); a name that is
    not a ``str`` counts as the API's (the registration, as the notebook's)."""
    items = list(dict.items(namespace)) if type(namespace) is dict else []
    name = next((v for k, v in items if type(k) is str and k == "__name__"), "")
    return type(name) is not str or str.startswith(name, _REGISTRARS)


def the_notebooks_own(owner, records: tuple, provenance) -> bool:
    """Whether ``owner`` (what a registration was made on) is the notebook's to take back
    whole: a ``Library`` object (torch's own ``Library`` objects register through their
    handle, and are not handed out), or a dispatcher handle whose making was recorded as the
    notebook's. A handle torch made (a ``Library``'s own ``.m``) holds torch's kernels too."""
    handle = owner
    if issubclass(type(owner), _LIBRARY):  # (type's own check: no __class__ of a notebook's)
        held = _LIBRARY_DICT(owner)  # read as items: a key of the notebook's is not compared
        items = list(dict.items(held)) if type(held) is dict else []
        handle = next((v for k, v in items if type(k) is str and k == "m"), None)
    if not issubclass(type(handle), _HANDLE):
        return True  # nothing torch made (a Library destroyed, or no handle at all)
    return any(
        type(label) is str
        and label.startswith(_NEW_LIBRARY)
        and made is handle
        and by_notebook(stack, provenance)
        for label, stack, made, _ in records
    )


def take_back(owner, held: list | None = None, provenance=None) -> None:
    """Undo a notebook's registrations: what torch's own ``Library._destroy`` does, done
    here over exact types only, or the dispatcher's handle it holds reset (either removes
    every kernel and operator it registered). ``_destroy`` itself would run Python over
    the notebook's objects: a handle of its own in ``_registration_handles`` (its
    ``destroy``), an ``_on_destroy`` it set, items of ``_op_impls`` (hashed), a key in the
    ``Library``'s dict whose hash is ``"m"``'s (found by review). So the dict is read as
    items, only exact ``str`` keys; torch's handle is reset; each registration handle of
    torch's own class whose ``_on_destroy`` is a library's function (``provenance``) is
    destroyed (that function then runs over torch's registries, which hold the notebook's
    kernels); the other objects are left where they are (flagged all the same) and what
    is taken off is put in ``held``, so that none of it is finalized here. An owner of
    another class (a notebook's object passed as a Library's ``self``) is left."""
    held = [] if held is None else held
    kind = type(owner)
    try:
        if kind is _HANDLE:
            _RESET(owner)
        elif issubclass(kind, _LIBRARY):
            attributes = _LIBRARY_DICT(owner)
            if type(attributes) is dict:
                _destroy_as_torch_does(attributes, kind is _LIBRARY, held, provenance)
    except Exception:  # noqa: BLE001 - already destroyed: flagged all the same
        return


def _destroy_as_torch_does(attributes: dict, whole: bool, held: list, provenance) -> None:
    """``Library._destroy``'s steps (torch 2.x), each over objects of torch's own types.
    For a subclass's ``Library`` (``whole`` false), its handle alone: none of its code."""
    items = {k: v for k, v in list(dict.items(attributes)) if type(k) is str}
    handle = items.get("m")
    if type(handle) is _HANDLE:
        _RESET(handle)
    if not whole:
        return
    held.append(list(dict.items(attributes)))
    if len(items) != len(attributes):  # a key of the notebook's: the dict as names only
        dict.clear(attributes)
        dict.update(attributes, items)
    attributes["m"] = None
    handles = items.get("_registration_handles")
    if type(handles) is list:
        kept = []
        for one in list.copy(handles):
            destroy = _ON_DESTROY(one, provenance)
            if destroy is None:
                kept.append(one)
            else:
                destroy()
        held.append(list.copy(handles))
        list.__setitem__(handles, slice(None), kept)
    impls, defs = items.get("_op_impls"), items.get("_op_defs")
    module = _LIBRARY_MODULE_DICT()
    known = module.get("_impls") if module is not None else None
    if _strings(impls) and type(known) is set:
        set.difference_update(known, impls)
    if _strings(defs):
        _clear_ops_cache(set.copy(defs), held)


def _clear_ops_cache(defs: set, held: list) -> None:
    """What ``torch.library._clear_torch_ops_cache`` does (an operator taken back must not
    stay cached as ``torch.ops.ns.name``), read through the C slots of torch's own module
    classes only: that function's ``getattr``, ``vars`` and ``delattr`` ran the methods of
    whatever a cell had put at ``torch.ops.ns`` (found by review)."""
    ops = _OPS[0]
    if type(ops) is not _OPS_CLASS[0]:
        return
    namespaces = _MODULE_DICT(ops)
    for qualname in defs:
        space, _, rest = qualname.partition("::")
        name = rest.split(".")[0]
        if _odd_keys(namespaces):
            return
        namespace = dict.get(namespaces, space)
        if type(namespace) is not _NAMESPACE_CLASS[0]:
            continue
        members = _MODULE_DICT(namespace)
        if _odd_keys(members) or name not in members:
            continue
        held.append(dict.pop(members, name))
        listed = dict.get(members, "_dir")
        if type(listed) is list and all(type(item) is str for item in list.copy(listed)):
            if name in listed:
                list.remove(listed, name)


def _odd_keys(held: dict) -> bool:
    return any(type(key) is not str for key in list(held))


def _deregister_steps() -> list:
    """``(code, make)`` for each deregister function torch's registries make (this torch's
    codes, found in their makers' constants): ``make(cells, provenance)`` gives a call
    that does what that function does, over exact types, or None."""
    import torch._library.fake_impl as fake_impl
    import torch._library.simple_registry as simple_registry

    def inner(function, name):
        return next(
            (
                c
                for c in function.__code__.co_consts
                if type(c) is types.CodeType and c.co_name == name
            ),
            None,
        )

    found = []
    code = inner(fake_impl.FakeImplHolder.register, "deregister_fake_kernel")
    if code is not None:
        found.append((code, _remove_fake_kernel))
    holder = getattr(simple_registry, "GenericTorchDispatchRuleHolder", None)
    code = inner(holder.register, "deregister") if holder is not None else None
    if code is not None:
        found.append((code, _remove_dispatch_rule))
    return found


def _attributes_of(value) -> dict | None:
    """An object's ``__dict__`` through ``object``'s own C slot, when all its keys are
    exactly ``str``; else None."""
    try:
        held = _OBJECT_DICT(value, "__dict__")
    except (AttributeError, TypeError):
        return None
    if type(held) is not dict or _odd_keys(held):
        return None
    return held


def _remove_fake_kernel(cells: dict, provenance):
    """``self.kernels.remove(kernel)``, by identity, over a plain list of the holder."""
    holder, kernel = cells.get("self"), cells.get("kernel")
    held = _attributes_of(holder) if provenance.is_library_callable(type(holder)) else None
    kernels = dict.get(held, "kernels") if held is not None else None
    if type(kernels) is not list:
        return None

    def remove():
        for at, item in enumerate(list.copy(kernels)):
            if item is kernel:
                list.__delitem__(kernels, at)
                return

    return remove


def _remove_dispatch_rule(cells: dict, provenance):
    """``del self._data[torch_dispatch_class]``, where every key is a class whose
    metaclass is ``type`` itself (hashed and compared by identity, in C)."""
    holder, rule = cells.get("self"), cells.get("torch_dispatch_class")
    held = _attributes_of(holder) if provenance.is_library_callable(type(holder)) else None
    table = dict.get(held, "_data") if held is not None else None
    if type(table) is not dict or any(type(k) is not type for k in list(table)):
        return None
    if type(rule) is not type:
        return None
    return lambda: dict.pop(table, rule, None)


def _strings(value) -> bool:
    """A plain set of exact ``str`` (what ``Library`` keeps its operators' names in)."""
    return type(value) is set and all(type(item) is str for item in set.copy(value))


_CODE_OF = types.FunctionType.__dict__["__code__"].__get__
_GLOBALS_OF = types.FunctionType.__dict__["__globals__"].__get__


def _ON_DESTROY(handle, provenance):  # noqa: N802 - a constant's reading, set by watch()
    return None


def _LIBRARY_MODULE_DICT():  # noqa: N802 - set by watch()
    return None


_CLOSURE_OF = types.FunctionType.__dict__["__closure__"].__get__
_OBJECT_DICT = object.__getattribute__  # (called with "__dict__": object's own lookup)
_CELL_CONTENTS = types.CellType.__dict__["cell_contents"].__get__
_MODULE_DICT = types.ModuleType.__dict__["__dict__"].__get__
# torch.ops and its classes, taken by watch() (before any hand-in code)
_OPS: list = [None]
_OPS_CLASS: list = [None]
_NAMESPACE_CLASS: list = [None]


def dispatcher_snapshot() -> tuple:
    """Every operator's registrations and the backend fallbacks as they are now, with the
    torch functions that read them, bound now (a hand-in that rebinds them later changes
    nothing :func:`dispatcher_changes` calls). About 50 ms: taken once, in the warm parent."""
    import torch

    C = torch._C
    dump, has_fallback = C._dispatch_dump, C._dispatch_has_backend_fallback
    names = tuple(C._dispatch_get_all_op_names())
    keys = tuple(key for key in C.DispatchKey.__members__.values() if _answers(has_fallback, key))
    # a digest each (Python's keyed string hash: a change cannot be made to collide unseen)
    digests = tuple(map(hash, map(dump, names)))
    return dump, has_fallback, names, keys, digests, tuple(map(has_fallback, keys))


def _answers(has_fallback, key) -> bool:
    try:
        has_fallback(key)
    except Exception:  # noqa: BLE001 - an alias key, which holds no fallback of its own
        return False
    return True


GONE = -1  # the digest of an operator that no longer exists (``hash`` never gives -1)
PART = 256  # operators read in one step: a few milliseconds


def read_part(snapshot: tuple, first: int, end: int) -> list[int]:
    """The digests of the snapshot's operators from ``first`` to ``end`` as they are now,
    read in one step: torch's functions called from C (``map``), so no other thread runs
    Python until it is done (the memory test reads while its fork measures:
    :func:`read_fallbacks` and this, with the GIL held). :data:`GONE` for an operator that
    no longer exists."""
    dump, _, names, _, _, _ = snapshot
    part = names[first:end]
    try:
        return list(map(hash, map(dump, part)))
    except Exception:  # noqa: BLE001 - an operator taken away since (its library destroyed)
        digests = []
        for name in part:
            try:
                digests.append(hash(dump(name)))
            except Exception:  # noqa: BLE001
                digests.append(GONE)
        return digests


def read_fallbacks(snapshot: tuple) -> list[bool]:
    """Which of the snapshot's dispatch keys hold a backend fallback now, in one step."""
    _, has_fallback, _, keys, _, _ = snapshot
    return list(map(has_fallback, keys))


_CLOCK = time.monotonic  # (the runner calls a private copy: this module's names, as now)


def read_until(snapshot: tuple, until: float) -> tuple:
    """A reading begun, for :func:`dispatcher_reading` to finish: the fallback marks, then
    the operators' digests, :data:`PART` at a time, each part begun only before the
    monotonic time ``until``. For the memory test's parent, which reads while its fork
    measures, with the GIL held (see :func:`read_part`). Never raises."""
    try:
        marks, digests, count = read_fallbacks(snapshot), [], len(snapshot[2])
        while len(digests) < count and _CLOCK() < until:
            digests += read_part(snapshot, len(digests), len(digests) + PART)
    except Exception:  # noqa: BLE001 - read whole, later
        return [], None
    return digests, marks


def dispatcher_reading(snapshot: tuple, digests: list | None = None, marks=None) -> tuple:
    """The dispatcher as it is now, in the snapshot's terms: ``(digests, fallback marks)``.
    ``digests``, ``marks``: a reading begun earlier (the first operators' digests, the
    marks), finished here."""
    digests = list(digests or ())
    count = len(snapshot[2])
    while len(digests) < count:
        digests += read_part(snapshot, len(digests), len(digests) + PART)
    return digests, (read_fallbacks(snapshot) if marks is None else marks)


def dispatcher_changes(snapshot: tuple, reading: tuple | None = None) -> list[str]:
    """The operators of ``snapshot`` whose kernels differ in ``reading`` (by default, read
    now: :func:`dispatcher_reading`), or that are gone, and the dispatch keys that gained a
    backend fallback, as flag texts (empty when none). About 50 ms to read: the runner
    reads before the first test (while the memory test's fork measures, where the first test
    is one) and after the last."""
    _, _, names, keys, kernels, fallbacks = snapshot
    digests, marks = dispatcher_reading(snapshot) if reading is None else reading
    changed = [name for name, was, now in zip(names, kernels, digests, strict=True) if was != now]
    found = []
    if changed:
        more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
        shown = ", ".join(changed[:3]) + more
        found.append(
            f"it changed the kernels torch runs for {shown} by a way torch.library's "
            "functions did not see (this cannot be taken back: the tests after it ran with "
            "them)"
        )
    added = [key for key, was, now in zip(keys, fallbacks, marks, strict=True) if now and not was]
    if added:
        shown = ", ".join(sorted(str(key).rsplit(".", 1)[-1] for key in added)[:3])
        found.append(
            f"it registered a fallback kernel for every operator at {shown} by a way "
            "torch.library's functions did not see (this cannot be taken back)"
        )
    return found
