"""Instrument records a student's function cannot rewrite, and hooks it cannot drop, unseen.

A check's instruments hang on the objects the student's function is handed (a model's forward
hooks, a parameter's gradient hooks, an optimizer's step hooks and methods), so the function
can reach them: a hook's ``__self__`` or ``__closure__`` leads to whatever it writes into.
Nothing inside a process is out of the function's reach, so what the instruments record is
made *tamper-evident* instead, and a check scores on it only when :meth:`Seal.verdict` says
it is intact:

- every hook is a closure over a :class:`Ledger`'s parts alone, never over the instrument
  that reads it; the instrument, which keeps the ledger's parts and each hook as installed,
  is reached only through the check's own frame (which the grader's audit hook watches);
- a ledger keeps each event twice: in a list that is read, and in a BLAKE2 digest that can be
  fed more but never rewound, so a record rewritten, shortened or swapped no longer matches;
- an event counts only when torch made the call (the module call, the autograd engine, the
  optimizer's step): a function that calls a hook itself adds nothing;
- after the call every hook must still be where it was put, the same function with the same
  closure, in the same hook dict of the same owner.

A hook removed, replaced or emptied, or a record rewritten, is ``changed``; the instruments'
users add what they can cross-check (samples never seen by a forward pass, a gradient that no
autograd pass brought) as ``bypassed``. Either costs the points the instrument protects
(:func:`judge_instruments`). The grader judges the verdict in its own process, from codes it
knows, never from text the hand-in's process wrote.
"""

from __future__ import annotations

import hashlib
import sys
import types

import torch
from torch import nn

from coursekit.checks.question import Failure

INTACT = "intact"
#: What a verdict may say, and what the grader tells the student for each.
VERDICTS = {
    "changed": (
        "Your function changed, removed or called itself a hook the check put on the model, "
        "a parameter or the optimizer (or rewrote what it recorded), so the check cannot see "
        "what your code did"
    ),
    "forward_unseen": (
        "Some of the samples your function was given never went through a forward pass of "
        "the model it was given (model(inputs)): the check cannot see how they were computed "
        "(a copy of the model, the layers' weights used by hand, or hooks switched off)"
    ),
    "gradient_unseen": (
        "The model's parameters have a gradient that no backward pass through the model "
        "brought (it was set by hand, or computed on a copy of the model)"
    ),
    "step_unseen": (
        "The weights (or the schedule) changed without a call of the optimizer's step() "
        "(or the scheduler's step()) that the check could see"
    ),
}


def _exact(value) -> bool:
    """A plain event value whose ``repr`` is what it is (no subclass can pass for it)."""
    kind = type(value)
    if kind is tuple:
        return all(_exact(item) for item in value)
    return kind is int or kind is float or kind is str or kind is bool or value is None


class Ledger:
    """An append-only record: ``record(event)`` appends a plain tuple to :attr:`events` and
    feeds its ``repr`` to a digest. :meth:`intact` says whether the list still matches."""

    def __init__(self):
        self.events: list[tuple] = []
        self._digest = hashlib.blake2b(digest_size=16)
        self.record = _recorder(self.events.append, self._digest.update)
        self._parts = (self.events, self._digest, self.record, _parts_of(self.record))

    def intact(self) -> bool:
        events, digest, record, parts = self._parts
        if self.events is not events or self.record is not record:
            return False
        if not _same(_parts_of(record), parts) or not all(_exact(e) for e in events):
            return False
        fresh = hashlib.blake2b(digest_size=16)
        for event in events:
            fresh.update(repr(event).encode())
        return fresh.digest() == digest.digest()


def _recorder(append, update):
    encode = str.encode

    def record(event: tuple) -> None:
        append(event)
        update(encode(repr(event)))

    return record


def _parts_of(fn, depth: int = 0) -> tuple:
    """What a function runs: its code, defaults and closure's contents, by identity, and
    the same of each function in its closure (a measure a hook calls), three levels deep."""
    parts = [fn.__code__, fn.__defaults__, fn.__kwdefaults__, fn.__globals__]
    for cell in fn.__closure__ or ():
        contents = cell.cell_contents
        parts.append(contents)
        if isinstance(contents, types.FunctionType) and depth < 3:
            parts += _parts_of(contents, depth + 1)
    return tuple(parts)


def _same(now: tuple, then: tuple) -> bool:
    return len(now) == len(then) and all(a is b for a, b in zip(now, then, strict=True))


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


def called_by(codes: frozenset):
    """A test, taken now, of whether a hook's caller (two frames up) runs one of ``codes``."""
    getframe = sys._getframe

    def by_torch() -> bool:
        return getframe(2).f_code in codes

    return by_torch


def in_autograd():
    """A test, taken now, of whether the autograd engine is running a node (a tensor hook
    called by a backward pass, not by the student's code)."""
    current = torch._C._current_autograd_node

    def by_engine() -> bool:
        return current() is not None

    return by_engine


class Seal:
    """The hooks and methods an instrument installed, and its ledgers, as they were.

    :meth:`hook` records a hook by its handle (the dict it lives in, its key, its owner's
    attribute that holds the dict); :meth:`method` a callable set as an instance attribute
    (``optimizer.zero_grad = counted``); :meth:`verdict` compares them all with what is
    there now.
    """

    def __init__(self):
        self._hooks: list[tuple] = []
        self._methods: list[tuple] = []
        self._ledgers: list[Ledger] = []

    def ledger(self) -> Ledger:
        made = Ledger()
        self._ledgers.append(made)
        return made

    def hook(self, owner, attribute: str, handle, fn) -> None:
        hooks = handle.hooks_dict_ref()
        self._hooks.append((owner, attribute, hooks, handle.id, fn, _parts_of(fn)))

    def method(self, owner, name: str, fn) -> None:
        self._methods.append((owner, name, fn, _parts_of(fn)))

    def intact(self) -> bool:
        for owner, attribute, hooks, key, fn, parts in self._hooks:
            if getattr(owner, attribute, None) is not hooks or hooks.get(key) is not fn:
                return False
            if not _same(_parts_of(fn), parts):
                return False
        for owner, name, fn, parts in self._methods:
            if vars(owner).get(name) is not fn or not _same(_parts_of(fn), parts):
                return False
        return all(ledger.intact() for ledger in self._ledgers)

    def verdict(self, bypassed: str | None = None) -> str:
        """``"intact"``, ``"changed"``, or ``bypassed`` (a code of :data:`VERDICTS`) when the
        caller's own cross-check found one."""
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
    if verdict == INTACT or (not bypass and verdict in VERDICTS and verdict != "changed"):
        return
    reason = VERDICTS.get(verdict) if isinstance(verdict, str) else None
    if reason is None:
        reason = "The check's record of what your function did is missing"
    where = f" {setting}" if setting else ""
    raise Failure(
        f"{reason}{where}. The check cannot give these points without seeing the work: call "
        "the model you are given on each micro-batch, backward() on its loss, and leave the "
        "hooks on the model, its parameters and the optimizer as they are.",
        "instrument_bypassed"
        if verdict in VERDICTS and verdict != "changed"
        else "instrument_changed",
    )
