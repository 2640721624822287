"""Instrument records a student's function cannot reach, and hooks it cannot drop, unseen.

A check's instruments hang on the objects the student's function is handed (a model's forward
hooks, a parameter's gradient hooks, an optimizer's step hooks and methods), so the function
can reach the hooks: a hook's ``__self__`` or ``__closure__`` leads to whatever it holds. So
the hooks hold nothing worth reaching:

- what an instrument records lives in a :class:`Sink`, which only the frame of
  :func:`watched` holds while the student's function runs (the check calls the function
  through it). A hook holds an opaque token and calls :func:`poke`, which walks up the stack
  to that frame and hands the sink the poke. Reaching the sink any other way takes frames,
  ``gc`` or ``ctypes``, which the grader's audit hook reports;
- a sink trusts nothing a poke says: it reads what it records from torch's live state (the
  module call in progress and its arguments, the autograd node running, the optimizer step in
  progress), so a hook called by the student's code, or a poke of its own, adds nothing, and
  the same call seen twice counts once;
- a :class:`Seal` keeps each hook and method as installed; after the call every one must
  still be in place, the same function with the same closure, in the same dict of the same
  owner, else the verdict is ``changed``.

The instruments add what they can cross-check (samples that no forward pass of the model
saw, a gradient that no autograd pass brought) as a bypass. A changed or bypassed instrument
costs the points it protects (:func:`judge_instruments`); the grader reads the verdict as one
of the codes it knows, in its own process. Nothing here is a wall (nothing in a process is):
each way around it is one the grader's audit hook reports.
"""

from __future__ import annotations

import sys
import types

import torch
from torch import nn

from coursekit.checks.question import Failure

INTACT = "intact"
#: What a verdict may say, and what the grader tells the student for each.
VERDICTS = {
    "changed": (
        "Your function changed or removed a hook the check put on the model, a parameter or "
        "the optimizer, so the check cannot see what your code did"
    ),
    "forward_unseen": (
        "Some of the samples your function was given never went through a forward pass of "
        "the model it was given (model(inputs)) that the check could see: a copy of the "
        "model, the layers' weights used by hand, or the check's hooks switched off"
    ),
    "gradient_unseen": (
        "The model's parameters have a gradient that no backward pass through the model "
        "brought (it was set by hand, or computed on a copy of the model)"
    ),
    "step_unseen": (
        "The schedule moved without a call of the scheduler's step() that the check could see"
    ),
}


def _codes_within(code: types.CodeType) -> frozenset:
    """``code`` and every code object nested in it (the functions it defines)."""
    found, stack = set(), [code]
    while stack:
        here = stack.pop()
        found.add(here)
        stack += [c for c in here.co_consts if isinstance(c, types.CodeType)]
    return frozenset(found)


#: The code that calls module hooks (``nn.Module._call_impl`` and its inner function).
MODULE_CALL = _codes_within(nn.Module._call_impl.__code__)
#: The code that calls optimizer step hooks (the wrapper ``Optimizer`` puts around step).
OPTIMIZER_STEP = _codes_within(torch.optim.Optimizer.profile_hook_step.__code__)


# ----------------------------------------------------------------------- sinks and pokes


def watched(instruments, fn, *args, **kwargs):
    """``fn(*args, **kwargs)``, with the instruments' sinks held by this frame alone: the
    hooks find them here, through :func:`poke`, and nowhere else."""
    sinks = {sink.token: sink for instrument in instruments for sink in instrument.sinks}  # noqa: F841 - read by poke(), through this frame
    return fn(*args, **kwargs)


# The hooks, poke() and the sinks look nothing up by a global name while they run: what they
# call is bound when they are made (a default argument, an attribute of a sink), so a
# notebook that rebinds a name here (or in torch) for the length of one call changes nothing.
# A hook's default arguments can be replaced only by setting __defaults__, which the
# grader's audit hook reports at once, and the seal sees after the call.


def poke(token, payload=(), _getframe=sys._getframe, _watched=watched.__code__) -> None:
    """Hand ``payload`` (a tuple) to the sink of ``token`` held by the running
    :func:`watched` call, if any (outside one, a hook records nothing). Never raises: a
    traceback would lead to the sink's frame."""
    frame = _getframe(1)
    while frame is not None and frame.f_code is not _watched:
        frame = frame.f_back
    if frame is None:
        return
    sink = frame.f_locals.get("sinks", {}).get(token)
    if sink is not None:
        try:
            sink.accept(*payload)
        except Exception:  # noqa: BLE001 - a bad payload is the poker's, and records nothing
            pass


class Sink:
    """Where one hook's events go; :meth:`accept` decides, from torch's live state, what a
    poke records. ``events`` is read after the call."""

    def __init__(self):
        self.token = object()
        self.events: list[tuple] = []
        self._last = None  # what the last event was taken from, so that it counts once
        # what accept() calls, bound now (see above)
        self._getframe, self._is_tensor = sys._getframe, torch.is_tensor
        self._node = torch._C._current_autograd_node
        self._task = torch._C._current_graph_task_id

    def accept(self, *payload) -> None:
        raise NotImplementedError

    def _once(self, source) -> bool:
        """Whether ``source`` (a call, a graph task) is new since the last event."""
        if source is self._last or (type(source) is int and source == self._last):
            return False
        self._last = source
        return True

    def _frame_of(self, codes: frozenset, owner):
        """The innermost running frame of ``codes`` whose ``self`` is ``owner``, or None."""
        frame = self._getframe(2)
        while frame is not None:
            if frame.f_code in codes and frame.f_locals.get("self") is owner:
                return frame
            frame = frame.f_back
        return None

    @staticmethod
    def _call_of(frame):
        """What tells one call of a function taking ``**kwargs`` from another: that dict,
        made afresh for each call (held by a sink, its identity cannot be reused). The frame
        itself is never held: after the call it would keep the call's locals, a graph among
        them."""
        keywords = frame.f_locals.get("kwargs")
        return keywords if type(keywords) is dict else object()


class ForwardSink(Sink):
    """The size (first argument's length) of each forward pass of ``module``, read from the
    module call in progress, as ``(tag, size)`` in ``events`` (a list several sinks may
    share, in the order things happened); with ``measure``, ``(measure(),)`` instead."""

    def __init__(self, module: nn.Module, measure=None, events=None, tag: str = ""):
        super().__init__()
        self.module, self.measure, self.tag, self._codes = module, measure, tag, MODULE_CALL
        if events is not None:
            self.events = events

    def accept(self, *_payload) -> None:
        frame = self._frame_of(self._codes, self.module)
        if frame is None:
            return
        call = self._call_of(frame)
        if self.measure is not None:
            if self._once(call):
                self.events.append((self.measure(),))
            return
        # the arguments the call holds now: a later pre-hook may change them, so the
        # forward hook looks again (the same call and size count once)
        arguments = frame.f_locals.get("args") or ()
        keywords = frame.f_locals.get("kwargs") or {}
        first = arguments[0] if arguments else next(iter(keywords.values()), None)
        size = int(first.shape[0]) if self._is_tensor(first) and first.dim() > 0 else 0
        last = self._last
        if last is None or last[0] is not call or last[1] != size:
            self._last = (call, size)
            self.events.append((self.tag, size))


class AutogradSink(Sink):
    """One event per autograd graph task that reaches ``parameter`` (the engine running its
    node); with ``keep``, the gradient handed to the hook too, as a detached copy."""

    def __init__(self, parameter: torch.Tensor, keep: bool = False):
        super().__init__()
        self.parameter, self.keep = parameter, keep

    def accept(self, *payload) -> None:
        node = self._node()
        if node is None or getattr(node, "variable", None) is not self.parameter:
            return
        task = self._task()
        gradient = payload[0] if payload else None
        if self.keep and not self._is_tensor(gradient):
            return
        if self._once(task):
            self.events.append((task, gradient.detach().clone()) if self.keep else (task,))


class StepSink(Sink):
    """``measure(optimizer)`` at each ``optimizer.step()``, read in the step in progress."""

    def __init__(self, optimizer: torch.optim.Optimizer, measure):
        super().__init__()
        self.optimizer, self.measure, self._codes = optimizer, measure, OPTIMIZER_STEP

    def accept(self, *_payload) -> None:
        frame = self._frame_of(self._codes, self.optimizer)
        if frame is not None and self._once(self._call_of(frame)):
            self.events.append((self.measure(self.optimizer),))


class CallSink(Sink):
    """One event per call of a method the check wrapped (:func:`counted`): the wrapper's own
    frame, calling the original method, must be on the stack."""

    def __init__(self, original):
        super().__init__()
        self.original, self._code = original, _COUNTED

    def accept(self, *_payload) -> None:
        frame = self._getframe(2)
        while frame is not None and frame.f_code is not self._code:
            frame = frame.f_back
        if frame is not None and frame.f_locals.get("_original") is self.original:
            if self._once(self._call_of(frame)):
                self.events.append(())


def counted(original, sink: CallSink):
    """``original`` that pokes ``sink`` at each call (set as an instance attribute)."""

    def counted_call(*args, _original=original, _token=sink.token, _send=poke, **kwargs):
        _send(_token)
        return _original(*args, **kwargs)

    return counted_call


_COUNTED = next(c for c in counted.__code__.co_consts if isinstance(c, types.CodeType))


def poker(token):
    """A hook that pokes ``token``'s sink with what torch passes it (one to three
    arguments: a module hook's, a tensor's, an optimizer step's)."""

    def hook(first=None, second=None, third=None, _token=token, _send=poke) -> None:
        _send(_token, (first, second, third))

    return hook


# ------------------------------------------------------------------------------ the seal


def _parts_of(fn, depth: int = 0) -> tuple:
    """What a function runs: its code, defaults and closure's contents, by identity, and
    the same of each function in its closure, three levels deep."""
    parts = [fn.__code__, fn.__defaults__, fn.__kwdefaults__, fn.__globals__]
    for cell in fn.__closure__ or ():
        contents = cell.cell_contents
        parts.append(contents)
        if isinstance(contents, types.FunctionType) and depth < 3:
            parts += _parts_of(contents, depth + 1)
    return tuple(parts)


def _same(now: tuple, then: tuple) -> bool:
    return len(now) == len(then) and all(a is b for a, b in zip(now, then, strict=True))


class Seal:
    """The hooks and methods an instrument installed, as they were.

    :meth:`hook` records a hook by its handle (the dict it lives in, its key) and the
    owner's attribute that holds the dict; :meth:`method` a callable set as an instance
    attribute (``optimizer.zero_grad = counted``); :meth:`intact` compares them with what is
    there now.
    """

    def __init__(self):
        self._hooks: list[tuple] = []
        self._methods: list[tuple] = []

    def hook(self, owner, attribute: str, handle, fn) -> None:
        hooks = handle.hooks_dict_ref()
        place = list(hooks).index(handle.id)  # a hook put before it could change what it sees
        self._hooks.append((owner, attribute, hooks, handle.id, fn, _parts_of(fn), place))

    def method(self, owner, name: str, fn) -> None:
        self._methods.append((owner, name, fn, _parts_of(fn)))

    def intact(self) -> bool:
        for owner, attribute, hooks, key, fn, parts, place in self._hooks:
            if getattr(owner, attribute, None) is not hooks or hooks.get(key) is not fn:
                return False
            if not _same(_parts_of(fn), parts) or list(hooks).index(key) > place:
                return False
        for owner, name, fn, parts in self._methods:
            if vars(owner).get(name) is not fn or not _same(_parts_of(fn), parts):
                return False
        return True

    def verdict(self, bypassed: str | None = None) -> str:
        """``"intact"``, ``"changed"``, or ``bypassed`` (a code of :data:`VERDICTS`) when the
        instrument's own cross-check found one."""
        if not self.intact():
            return "changed"
        return bypassed or INTACT


def combined(*verdicts: str) -> str:
    """One verdict for several instruments: the first that is not intact."""
    return next((v for v in verdicts if v != INTACT), INTACT)


def judge_instruments(outputs: dict, setting: str = "", bypass: bool = True) -> None:
    """Fail unless ``run`` found its instruments intact (a missing verdict fails too: the
    outputs come from the hand-in's process, and only a known code is read).

    With ``bypass=False`` only a changed (or missing) instrument fails: a judge calls it so
    first, and again with ``bypass=True`` where the answer is right, since a wrong answer
    (the first micro-batch alone) can leave samples unseen for a reason of its own.
    """
    verdict = outputs.get("instruments")
    bypassed = isinstance(verdict, str) and verdict in VERDICTS and verdict != "changed"
    if verdict == INTACT or (bypassed and not bypass):
        return
    reason = VERDICTS.get(verdict) if isinstance(verdict, str) else None
    if reason is None:
        reason = "The check's record of what your function did is missing"
    where = f" {setting}" if setting else ""
    raise Failure(
        f"{reason}{where}. The check cannot give these points without seeing the work: call "
        "the model you are given on each micro-batch, backward() on its loss, and leave the "
        "hooks on the model, its parameters and the optimizer as they are.",
        "instrument_bypassed" if bypassed else "instrument_changed",
    )
