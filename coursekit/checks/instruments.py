"""Instruments the checks attach to a student's model and optimizer, and output readers.

A check learns what the code did (how many forward samples at once, how many backward
passes, steps and ``zero_grad`` calls) without trusting anything the code returns, so a
verdict can say "right gradient, but one backward for the whole window".
"""

from __future__ import annotations

import torch
from torch import nn

from coursekit.checks.question import Failure


def tensor_list(tensor: torch.Tensor | None) -> list[float] | None:
    """A tensor as a plain list (JSON travels between the hand-in and the grader)."""
    return None if tensor is None else tensor.double().flatten().tolist()


class Watch:
    """Records what a student's code did to a model: forward sizes, backward passes, steps.

    Forward sizes are seen at the model and at its first leaf module, so a forward through
    ``model.forward(x)``, which skips the model's own hooks, is still seen (only the largest
    size is used).
    """

    def __init__(self, model: nn.Module):
        self.forward_sizes: list[int] = []
        self.backward_passes = 0
        self.start = weights_of(model)
        model.register_forward_pre_hook(self._forward, with_kwargs=True)
        first_leaf = next((m for m in model.modules() if not list(m.children())), model)
        if first_leaf is not model:
            first_leaf.register_forward_pre_hook(self._forward, with_kwargs=True)
        next(model.parameters()).register_post_accumulate_grad_hook(self._backward)

    def _forward(self, _module, args, kwargs) -> None:
        first = args[0] if args else next(iter(kwargs.values()), None)
        if torch.is_tensor(first) and first.dim() > 0:
            self.forward_sizes.append(len(first))

    def _backward(self, _parameter) -> None:
        self.backward_passes += 1


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
    records the learning rate each step used."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer):
        self.optimizer = optimizer
        self.lrs: list[float] = []
        self.steps = 0
        self.zero_grads = 0
        optimizer.register_step_pre_hook(self._count_step)
        for owner in (optimizer, model):
            original = owner.zero_grad

            def counted(*args, _original=original, **kwargs):
                self.zero_grads += 1
                return _original(*args, **kwargs)

            owner.zero_grad = counted

    def _count_step(self, *_args) -> None:
        self.steps += 1
        self.lrs.append(float(self.optimizer.param_groups[0]["lr"]))


class SchedulerSteps:
    """Counts ``scheduler.step()`` calls: stepped per micro-batch or never is a named mistake."""

    def __init__(self, scheduler: torch.optim.lr_scheduler.LRScheduler):
        self.count = 0
        original = scheduler.step

        def counted(*args, **kwargs):
            self.count += 1
            return original(*args, **kwargs)

        scheduler.step = counted


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
