"""Instruments the checks attach to a student's model and optimizer, and output readers.

A check learns what the code did (how many forward samples at once, how many backward
passes, steps and ``zero_grad`` calls) without trusting anything the code returns, so a
verdict can say "right gradient, but one backward for the whole window".
"""

from __future__ import annotations

import torch
from torch import nn

from coursekit.checks.question import Failure
from coursekit.checks.tamper_evident import (
    INTACT,
    MODULE_CALL,
    OPTIMIZER_STEP,
    Seal,
    called_by,
)


def tensor_list(tensor: torch.Tensor | None) -> list[float] | None:
    """A tensor as a plain list (JSON travels between the hand-in and the grader)."""
    return None if tensor is None else tensor.double().flatten().tolist()


class Watch:
    """Records what a student's code did to a model: forward sizes, backward passes, steps.

    Forward sizes are seen at the model and at its first leaf module, so a forward through
    ``model.forward(x)``, which skips the model's own hooks, is still seen (only the largest
    size is used). The record is tamper-evident (:mod:`coursekit.checks.tamper_evident`): its
    hooks close over a ledger, not over this object, count only calls torch makes, and
    :meth:`verdict` says whether they are still in place and the record unchanged.
    """

    def __init__(self, model: nn.Module):
        self.seal = Seal()
        ledger = self.seal.ledger()
        self._events = ledger.events
        self.start = weights_of(model)
        forward = _forward_recorder(ledger.record, "model")
        self.seal.hook(
            model,
            "_forward_pre_hooks",
            model.register_forward_pre_hook(forward, with_kwargs=True),
            forward,
        )
        first_leaf = next((m for m in model.modules() if not list(m.children())), model)
        if first_leaf is not model:
            leaf = _forward_recorder(ledger.record, "leaf")
            self.seal.hook(
                first_leaf,
                "_forward_pre_hooks",
                first_leaf.register_forward_pre_hook(leaf, with_kwargs=True),
                leaf,
            )
        parameter = next((p for p in model.parameters() if p.requires_grad), None)
        self._parameter = parameter
        if parameter is not None:
            backward = _autograd_recorder(ledger.record, "backward", parameter)
            handle = parameter.register_post_accumulate_grad_hook(backward)
            self.seal.hook(parameter, "_post_accumulate_grad_hooks", handle, backward)
            gradient = _autograd_recorder(ledger.record, "gradient", parameter)
            handle = parameter.register_hook(gradient)
            self.seal.hook(parameter, "_backward_hooks", handle, gradient)

    @property
    def forward_sizes(self) -> list[int]:
        """The first argument's length at every forward pass (at the model and its first
        leaf), in order."""
        return [event[1] for event in self._events if event[0] in ("model", "leaf")]

    @property
    def backward_passes(self) -> int:
        """Backward passes that accumulated into the model's first trained parameter."""
        return sum(event[0] == "backward" for event in self._events)

    def verdict(self, samples: int | None = None) -> str:
        """``"intact"``, ``"changed"`` (a hook gone or replaced, the record rewritten) or a
        bypass: fewer than ``samples`` samples went through forward passes of the model, or
        its first parameter has a gradient that no autograd pass brought."""
        if not self.seal.intact():
            return "changed"
        if samples is not None:
            seen = {"model": 0, "leaf": 0}
            for event in self._events:
                if event[0] in seen:
                    seen[event[0]] += event[1]
            if max(seen.values()) < samples:
                return "forward_unseen"
        parameter = self._parameter
        passes = sum(event[0] in ("backward", "gradient") for event in self._events)
        grad = None if parameter is None else parameter.grad
        if passes == 0 and torch.is_tensor(grad) and bool(grad.detach().ne(0).any()):
            return "gradient_unseen"
        return INTACT


def _forward_recorder(record, tag: str):
    """A forward pre-hook that records the first argument's length, when the module call
    makes it (a direct call of the hook records nothing)."""
    by_torch, is_tensor = called_by(MODULE_CALL), torch.is_tensor

    def forward_seen(_module, args, kwargs) -> None:
        if not by_torch():
            return
        first = args[0] if args else next(iter(kwargs.values()), None)
        if is_tensor(first) and first.dim() > 0:
            record((tag, int(first.shape[0])))

    return forward_seen


def _autograd_recorder(record, tag: str, parameter: torch.Tensor):
    """A hook on ``parameter`` that records one event per autograd pass reaching it, when
    the engine runs it for that parameter (a direct call records nothing)."""
    current = torch._C._current_autograd_node

    def autograd_seen(*_args) -> None:
        node = current()
        if node is not None and getattr(node, "variable", None) is parameter:
            record((tag,))

    return autograd_seen


class GradientPasses:
    """Counts the autograd passes that reach the model's first trained parameter.

    A tensor hook fires for ``backward()`` and for ``torch.autograd.grad`` alike, so a loop
    that computes each micro-batch's gradient with ``torch.autograd.grad`` and sets ``.grad``
    itself is judged like one that calls ``backward()``: what matters is one pass per
    micro-batch (one graph alive at a time), not which call makes it. Tamper-evident, as
    :class:`Watch` is.
    """

    def __init__(self, model: nn.Module):
        self.seal = Seal()
        ledger = self.seal.ledger()
        self._events = ledger.events
        parameter = next(p for p in model.parameters() if p.requires_grad)
        seen = _autograd_recorder(ledger.record, "gradient", parameter)
        self.seal.hook(parameter, "_backward_hooks", parameter.register_hook(seen), seen)

    @property
    def count(self) -> int:
        return len(self._events)

    def verdict(self) -> str:
        return self.seal.verdict()


class Probes:
    """A question's own tamper-evident hooks: each records one plain value (a float, a str or
    None) per call torch makes, in a list of one-item tuples it returns.

    Example: ``norms = Probes().on_step(optimizer, lambda: grad_norm(parameters))``.
    """

    def __init__(self):
        self.seal = Seal()

    def on_step(self, optimizer: torch.optim.Optimizer, measure) -> list[tuple]:
        """``measure()`` at every ``optimizer.step()``, before the step."""
        ledger = self.seal.ledger()
        probe = _probe(ledger.record, measure, called_by(OPTIMIZER_STEP))
        handle = optimizer.register_step_pre_hook(probe)
        self.seal.hook(optimizer, "_optimizer_step_pre_hooks", handle, probe)
        return ledger.events

    def on_forward(self, module: nn.Module, measure) -> list[tuple]:
        """``measure()`` at every forward pass of ``module``, before it runs."""
        ledger = self.seal.ledger()
        probe = _probe(ledger.record, measure, called_by(MODULE_CALL))
        self.seal.hook(module, "_forward_pre_hooks", module.register_forward_pre_hook(probe), probe)
        return ledger.events

    def verdict(self) -> str:
        return self.seal.verdict()


def _probe(record, measure, by_torch):
    def probe(*_args) -> None:
        if by_torch():
            record((measure(),))

    return probe


def weights_of(model: nn.Module) -> list[float]:
    """Every weight of ``model``, in order, as one plain list."""
    return torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()


SINGLE_BACKWARD = (
    "call backward() once per micro-batch. Adding the micro-batches' losses and calling "
    "backward() once keeps every micro-batch's graph, and its activations, alive until then: "
    "the memory accumulation is meant to save."
)


class StepCounter:
    """Counts optimizer.step() and zero_grad() calls (the optimizer's or the model's), and
    records the learning rate each step used. Tamper-evident, as :class:`Watch` is."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer):
        self.seal = Seal()
        ledger = self.seal.ledger()
        self._events = ledger.events
        step = _step_recorder(ledger.record)
        handle = optimizer.register_step_pre_hook(step)
        self.seal.hook(optimizer, "_optimizer_step_pre_hooks", handle, step)
        for owner in (optimizer, model):
            counted = _counted(owner.zero_grad, ledger.record, "zero_grad")
            owner.zero_grad = counted
            self.seal.method(owner, "zero_grad", counted)

    @property
    def steps(self) -> int:
        return sum(event[0] == "step" for event in self._events)

    @property
    def zero_grads(self) -> int:
        return sum(event[0] == "zero_grad" for event in self._events)

    @property
    def lrs(self) -> list[float]:
        return [event[1] for event in self._events if event[0] == "step"]

    def verdict(self) -> str:
        return self.seal.verdict()


def _step_recorder(record):
    """An optimizer step pre-hook that records the learning rate, when the optimizer's step
    wrapper calls it."""
    by_torch = called_by(OPTIMIZER_STEP)

    def step_seen(optimizer, *_args) -> None:
        if by_torch():
            record(("step", float(optimizer.param_groups[0]["lr"])))

    return step_seen


def _counted(original, record, tag: str):
    """``original`` that records ``(tag,)`` at each call (set as an instance attribute)."""

    def counted(*args, **kwargs):
        record((tag,))
        return original(*args, **kwargs)

    return counted


class SchedulerSteps:
    """Counts ``scheduler.step()`` calls: stepped per micro-batch or never is a named mistake.

    A step taken past the counter (the class's ``step`` called directly) still moves the
    scheduler's ``last_epoch``: :meth:`verdict` says ``step_unseen`` when the two disagree.
    """

    def __init__(self, scheduler: torch.optim.lr_scheduler.LRScheduler):
        self.seal = Seal()
        ledger = self.seal.ledger()
        self._events = ledger.events
        self._scheduler, self._start = scheduler, scheduler.last_epoch
        counted = _counted(scheduler.step, ledger.record, "scheduler_step")
        scheduler.step = counted
        self.seal.method(scheduler, "step", counted)

    @property
    def count(self) -> int:
        return len(self._events)

    def verdict(self) -> str:
        epoch = self._scheduler.last_epoch
        moved = epoch - self._start if type(epoch) is int else None
        return self.seal.verdict(None if moved == self.count else "step_unseen")


def as_floats(values) -> list[float] | str:
    """Returned losses as floats; the type's name when they are not a sequence of numbers."""
    try:
        return [float(v.detach() if torch.is_tensor(v) else v) for v in values]
    except (TypeError, ValueError, RuntimeError, OverflowError):
        return type(values).__name__


def as_float(value) -> float | str:
    """A returned loss as a float (a tensor is read, not kept); its repr when it is no number."""
    try:
        return float(value.detach() if torch.is_tensor(value) else value)
    except (TypeError, ValueError, RuntimeError, OverflowError):  # 10**400 overflows a float
        return repr(value)[:200]


def keeps_graph(values) -> bool:
    """Whether any returned value is a tensor that still holds its autograd graph."""
    try:
        return any(torch.is_tensor(v) and v.requires_grad for v in values)
    except TypeError:
        return False


def judge_micro_batches_and_weights(
    outputs: dict, micro_batch_size: int, setting: str, unit: str = "samples", hint: str = ""
) -> None:
    """The first verdicts of every window check, from the instruments' records.

    Raises :class:`Failure` when a forward pass ran on more than one micro-batch at once
    (the memory accumulation saves is gone) or when the weights moved (a window only adds
    gradients up; the loop steps).
    """
    largest = outputs.get("largest_forward")
    if isinstance(largest, int) and largest > micro_batch_size:
        raise Failure(
            f"A forward pass ran on {largest} {unit} at once, more than a micro-batch of "
            f"{micro_batch_size} {setting}: run the model on one micro-batch at a time, which "
            f"is what keeps the memory small.{hint}",
            "whole_batch_forward",
        )
    if outputs.get("weights_moved") is True:
        raise Failure(
            "Your function changed the weights: it should only leave the gradients in .grad; "
            "stepping the optimizer is the training loop's job.",
            "stepped_in_window",
        )


def require_gradient(outputs: dict) -> None:
    """A Failure when the student's function left no gradient at all."""
    if outputs.get("grad") is None:
        raise Failure(
            "No parameter has a gradient after your function: call backward() on each "
            "micro-batch's scaled loss, and do not clear the gradients at the end.",
            "no_backward",
        )
