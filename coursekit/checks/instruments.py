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
    AutogradSink,
    CallSink,
    ForwardSink,
    Seal,
    StepSink,
    counted,
    poker,
)


def tensor_list(tensor: torch.Tensor | None) -> list[float] | None:
    """A tensor as a plain list (JSON travels between the hand-in and the grader)."""
    return None if tensor is None else tensor.double().flatten().tolist()


class Watch:
    """Records what a student's code did to a model: forward sizes and backward passes.

    Forward sizes are seen at the model and at its first leaf module, so a forward through
    ``model.forward(x)``, which skips the model's own hooks, is still seen (only the largest
    size is used). What it records is out of the hooks' reach and read from torch's live
    state (:mod:`coursekit.checks.tamper_evident`): call the function through
    ``watched((watch, ...), fn, ...)``, then ask :meth:`verdict`.
    """

    def __init__(self, model: nn.Module):
        self.seal = Seal()
        self.start = weights_of(model)
        first_leaf = next((m for m in model.modules() if not list(m.children())), model)
        watched = [(model, "model")] + ([(first_leaf, "leaf")] if first_leaf is not model else [])
        self._sizes: list[tuple] = []  # (where, size), in the order the passes ran
        self._forwards = [ForwardSink(m, events=self._sizes, tag=tag) for m, tag in watched]
        for (module, _), sink in zip(watched, self._forwards, strict=True):
            before, after = poker(sink.token), poker(sink.token)
            handle = module.register_forward_pre_hook(before)
            self.seal.hook(module, "_forward_pre_hooks", handle, before)
            handle = module.register_forward_hook(after)
            self.seal.hook(module, "_forward_hooks", handle, after)
        self.sinks = list(self._forwards)
        parameter = next((p for p in model.parameters() if p.requires_grad), None)
        self._parameter, self._backward, self._gradient = parameter, None, None
        if parameter is not None:
            # the gradient hook keeps what each pass brings: .grad must be a multiple of it
            self._backward = AutogradSink(parameter)
            self._gradient = AutogradSink(parameter, keep=True)
            hook = poker(self._backward.token)
            handle = parameter.register_post_accumulate_grad_hook(hook)
            self.seal.hook(parameter, "_post_accumulate_grad_hooks", handle, hook)
            hook = poker(self._gradient.token)
            self.seal.hook(parameter, "_backward_hooks", parameter.register_hook(hook), hook)
            self.sinks += [self._backward, self._gradient]

    @property
    def forward_sizes(self) -> list[int]:
        """The first argument's length at every forward pass seen (at the model, then at its
        first leaf)."""
        return [size for _, size in self._sizes]

    @property
    def backward_passes(self) -> int:
        """Backward passes that accumulated into the model's first trained parameter (each
        autograd graph task once, however often a hook was made to run in it)."""
        return len(self._backward.events) if self._backward is not None else 0

    def verdict(self, samples: int | None = None) -> str:
        """``"intact"``, ``"changed"`` (a hook gone or replaced) or a bypass: fewer than
        ``samples`` samples went through forward passes of the model (or of its first leaf),
        or its first parameter has a gradient that no autograd pass brought."""
        if not self.seal.intact():
            return "changed"
        if samples is not None:
            seen = {"model": 0, "leaf": 0}
            for where, size in self._sizes:
                seen[where] += size
            if max(seen.values()) < samples:
                return "forward_unseen"
        passes = 0 if self._backward is None else len(self._backward.events)
        passes += 0 if self._gradient is None else len(self._gradient.events)
        grad = None if self._parameter is None else self._parameter.grad
        if torch.is_tensor(grad) and bool(grad.detach().ne(0).any()):
            brought = [g for _, g in self._gradient.events]
            if passes == 0 or not _multiple_of_sum(grad.detach(), brought):
                return "gradient_unseen"
        return INTACT


def _multiple_of_sum(grad: torch.Tensor, brought: list[torch.Tensor]) -> bool:
    """Whether ``grad`` is a scalar multiple of the sum of what the autograd passes brought
    (a loop may scale ``.grad`` once at the end; what another way set is not a multiple)."""
    if not brought:
        return False
    total = torch.stack([g.to(torch.float64) for g in brought]).sum(0).flatten()
    actual = grad.to(torch.float64).flatten()
    if total.shape != actual.shape:
        return False
    scale = float(actual @ total) / max(float(total @ total), 1e-300)
    gap = float((actual - scale * total).abs().max()) / max(float(actual.abs().max()), 1e-300)
    return scale != 0.0 and gap <= 1e-4


class GradientPasses:
    """Counts the autograd passes that reach the model's first trained parameter.

    A tensor hook fires for ``backward()`` and for ``torch.autograd.grad`` alike, so a loop
    that computes each micro-batch's gradient with ``torch.autograd.grad`` and sets ``.grad``
    itself is judged like one that calls ``backward()``: what matters is one pass per
    micro-batch (one graph alive at a time), not which call makes it. Out of reach and
    verified, as :class:`Watch` is.
    """

    def __init__(self, model: nn.Module):
        self.seal = Seal()
        parameter = next(p for p in model.parameters() if p.requires_grad)
        self._sink = AutogradSink(parameter)
        self.sinks = [self._sink]
        hook = poker(self._sink.token)
        self.seal.hook(parameter, "_backward_hooks", parameter.register_hook(hook), hook)

    @property
    def count(self) -> int:
        """Autograd passes (graph tasks) that reached the parameter."""
        return len(self._sink.events)

    def verdict(self) -> str:
        return self.seal.verdict()


class Probes:
    """A question's own hooks, out of reach and verified as :class:`Watch`'s are: each
    records one plain value per call torch makes, in a list of one-item tuples.

    Example: ``norms = Probes().on_step(optimizer, lambda optimizer: grad_norm(...))``.
    """

    def __init__(self):
        self.seal = Seal()
        self.sinks: list = []

    def on_step(self, optimizer: torch.optim.Optimizer, measure) -> list[tuple]:
        """``measure(optimizer)`` at every ``optimizer.step()``, before the step."""
        sink = StepSink(optimizer, measure)
        hook = poker(sink.token)
        handle = optimizer.register_step_pre_hook(hook)
        self.seal.hook(optimizer, "_optimizer_step_pre_hooks", handle, hook)
        self.sinks.append(sink)
        return sink.events

    def on_forward(self, module: nn.Module, measure) -> list[tuple]:
        """``measure()`` at every forward pass of ``module``, before it runs."""
        sink = ForwardSink(module, measure)
        hook = poker(sink.token)
        self.seal.hook(module, "_forward_pre_hooks", module.register_forward_pre_hook(hook), hook)
        self.sinks.append(sink)
        return sink.events

    def verdict(self) -> str:
        return self.seal.verdict()


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
    records the learning rate each step used. Out of reach and verified, as :class:`Watch`
    is."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer):
        self.seal = Seal()
        self._steps = StepSink(optimizer, lambda opt: float(opt.param_groups[0]["lr"]))
        hook = poker(self._steps.token)
        handle = optimizer.register_step_pre_hook(hook)
        self.seal.hook(optimizer, "_optimizer_step_pre_hooks", handle, hook)
        self.sinks = [self._steps]
        for owner in (optimizer, model):
            sink = CallSink(owner.zero_grad)
            wrapper = counted(sink.original, sink)
            owner.zero_grad = wrapper
            self.seal.method(owner, "zero_grad", wrapper)
            self.sinks.append(sink)

    @property
    def steps(self) -> int:
        return len(self._steps.events)

    @property
    def zero_grads(self) -> int:
        return sum(len(sink.events) for sink in self.sinks[1:])

    @property
    def lrs(self) -> list[float]:
        return [lr for (lr,) in self._steps.events]

    def verdict(self) -> str:
        return self.seal.verdict()


class SchedulerSteps:
    """Counts ``scheduler.step()`` calls: stepped per micro-batch or never is a named mistake.

    A step taken past the counter (the class's ``step`` called directly) still moves the
    scheduler's ``last_epoch``: :meth:`verdict` says ``step_unseen`` when the two disagree.
    """

    def __init__(self, scheduler: torch.optim.lr_scheduler.LRScheduler):
        self.seal = Seal()
        self._scheduler, self._start = scheduler, scheduler.last_epoch
        self._sink = CallSink(scheduler.step)
        self.sinks = [self._sink]
        wrapper = counted(self._sink.original, self._sink)
        scheduler.step = wrapper
        self.seal.method(scheduler, "step", wrapper)

    @property
    def count(self) -> int:
        return len(self._sink.events)

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
