"""One training run on a :class:`~coursekit.critical_batch.task.Task`, the unit every sweep
and comparison of the package is made of.

A step's batch larger than the micro-batch is reached by accumulation (each micro-batch's loss
weighted by its share), so the step count never depends on how the batch was cut; the rate
may rise by a linear warm-up. A run either stops at a target loss (:func:`steps_to_target`,
what the sweeps count) or trains on a fixed number of samples and keeps every loss
(:func:`loss_curve`, what the plots compare).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import nn

from coursekit.arguments import choice, real, whole
from coursekit.critical_batch.task import Task

OPTIMIZERS = ("sgd", "adam")


def _lr_at(step: int, lr: float, warmup_steps: int) -> float:
    """Linear warm-up from ``lr / warmup_steps`` to ``lr`` over ``warmup_steps`` steps."""
    return lr if step >= warmup_steps else lr * (step + 1) / warmup_steps


def _optimizer(name: str, model: nn.Module, lr: float) -> torch.optim.Optimizer:
    if name == "adam":
        return torch.optim.Adam(model.parameters(), lr=lr)
    return torch.optim.SGD(model.parameters(), lr=lr)


def _train(
    task: Task,
    batch_size: int,
    lr: float,
    max_steps: int,
    target_loss: float | None = None,
    micro_batch_size: int | None = None,
    warmup_steps: int = 0,
    optimizer: str = "sgd",
    stream: int = 0,
) -> list[float]:
    """The loss after 0, 1, ... steps; stops at ``target_loss``, at ``max_steps``, or when the
    loss stops being finite. A step larger than ``micro_batch_size`` is accumulated."""
    batch_size, max_steps = whole("batch_size", batch_size), whole("max_steps", max_steps)
    lr = real("lr", lr, 0, low_open=True)
    micro = batch_size if micro_batch_size is None else whole("micro_batch_size", micro_batch_size)
    warmup_steps = whole("warmup_steps", warmup_steps, minimum=0)
    optimizer = choice("optimizer", optimizer, OPTIMIZERS)
    model = task.make_model()
    opt = _optimizer(optimizer, model, lr)
    losses = [task.evaluate(model)]
    for step in range(max_steps):
        if target_loss is not None and losses[-1] <= target_loss:
            break
        for group in opt.param_groups:
            group["lr"] = _lr_at(step, lr, warmup_steps)
        inputs, targets = task.sample(step, batch_size, stream)
        opt.zero_grad(set_to_none=True)
        for start in range(0, batch_size, micro):
            x, y = inputs[start : start + micro], targets[start : start + micro]
            # each micro-batch's mean loss weighted by its share: the sum is the batch's mean
            (task.loss_fn(model(x), y) * (len(x) / batch_size)).backward()
        opt.step()
        losses.append(task.evaluate(model))
        if not math.isfinite(losses[-1]):
            break
    return losses


def steps_to_target(
    task: Task,
    batch_size: int,
    lr: float,
    target_loss: float,
    micro_batch_size: int | None = None,
    max_steps: int = 4000,
    warmup_steps: int = 0,
    optimizer: str = "sgd",
    stream: int = 0,
) -> int | None:
    """Optimizer steps until ``task.evaluate`` reaches ``target_loss``; ``None`` if it does not
    within ``max_steps`` (or the run diverges).

    A ``batch_size`` above ``micro_batch_size`` (default: the batch itself) is reached by
    accumulation: the step's batch is cut into micro-batches, each loss divided by its share,
    one optimizer step. The step count does not depend on the cut, which is the course's
    point: any effective batch fits in the memory of one micro-batch. ``stream`` picks
    another sequence of batches, for repeats.

    Example:
        >>> task = make_task()
        >>> steps_to_target(task, 256, 2.0, task.floor_loss + 0.05, micro_batch_size=64)
        6
    """
    target_loss = real("target_loss", target_loss)
    losses = _train(
        task,
        batch_size,
        lr,
        max_steps,
        target_loss,
        micro_batch_size,
        warmup_steps,
        optimizer,
        stream,
    )
    return len(losses) - 1 if losses[-1] <= target_loss else None


class LossCurve(NamedTuple):
    """A run's loss after each step, against the samples it has seen by then."""

    samples: list[int]
    losses: list[float]
    batch_size: int
    lr: float
    warmup_steps: int
    optimizer: str


def loss_curve(
    task: Task,
    batch_size: int,
    lr: float,
    samples: int,
    warmup_steps: int = 0,
    optimizer: str = "sgd",
) -> LossCurve:
    """Train on ``samples`` samples (``samples // batch_size`` steps) and keep every loss."""
    steps = whole("samples", samples) // whole("batch_size", batch_size)
    losses = _train(task, batch_size, lr, steps, warmup_steps=warmup_steps, optimizer=optimizer)
    seen = [batch_size * step for step in range(len(losses))]
    return LossCurve(seen, losses, batch_size, lr, warmup_steps, optimizer)
