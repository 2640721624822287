"""How the learning rate should move with the batch, and where the linear rule stops working.

:func:`linear_scaling_sweep` follows Goyal et al.'s linear rule across batch sizes (it holds
below the critical batch and wastes samples past it); :func:`lr_scaling_runs` sets the rules
side by side as loss curves: the same rate, the linear rule with and without warm-up for SGD,
and linear against square-root scaling for Adam.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from coursekit.arguments import whole
from coursekit.critical_batch.sweep import SweepPoint
from coursekit.critical_batch.task import Task
from coursekit.critical_batch.training import LossCurve, loss_curve, steps_to_target
from coursekit.progress import Progress


def lr_scaling_runs(
    task: Task,
    base_batch: int = 16,
    new_batch: int = 128,
    base_lr: float = 1.0,
    samples: int = 4096,
    warmup_steps: int = 8,
    adam_base_lr: float = 0.05,
) -> dict[str, LossCurve]:
    """The learning-rate scaling rules side by side, each run's loss against samples seen.

    With the batch ``k = new_batch / base_batch`` times larger, SGD runs: the base batch at
    ``base_lr``; the large batch at the same rate (each step as careful as before, so ``k``
    times the samples for the same progress); at ``k * base_lr`` straight away (Goyal et
    al.'s linear rule without warm-up); and at ``k * base_lr`` reached by a linear warm-up
    over ``warmup_steps`` steps (their fix). Adam runs the large batch at ``k`` and ``sqrt(k)``
    times ``adam_base_lr`` (Malladi et al. 2022, arXiv:2205.10287: square-root scaling for
    adaptive optimizers), against the base batch at ``adam_base_lr``.
    """
    base_batch, new_batch = whole("base_batch", base_batch), whole("new_batch", new_batch)
    if new_batch <= base_batch:
        raise ValueError(
            f"new_batch ({new_batch}) must be larger than base_batch ({base_batch}): the runs "
            "compare scaling rules for a bigger batch."
        )
    k = new_batch / base_batch
    runs = {
        f"SGD B={base_batch}, lr={base_lr:g}": (base_batch, base_lr, 0, "sgd"),
        f"SGD B={new_batch}, same lr": (new_batch, base_lr, 0, "sgd"),
        f"SGD B={new_batch}, linear lr={k * base_lr:g}, no warm-up": (
            new_batch,
            k * base_lr,
            0,
            "sgd",
        ),
        f"SGD B={new_batch}, linear lr={k * base_lr:g}, warm-up {warmup_steps} steps": (
            new_batch,
            k * base_lr,
            warmup_steps,
            "sgd",
        ),
        f"Adam B={base_batch}, lr={adam_base_lr:g}": (base_batch, adam_base_lr, 0, "adam"),
        f"Adam B={new_batch}, linear lr={k * adam_base_lr:g}": (
            new_batch,
            k * adam_base_lr,
            0,
            "adam",
        ),
        f"Adam B={new_batch}, sqrt lr={math.sqrt(k) * adam_base_lr:.3g} (lr only)": (
            new_batch,
            math.sqrt(k) * adam_base_lr,
            0,
            "adam",
        ),
    }
    return {
        label: loss_curve(task, batch, lr, samples, warmup, optimizer)
        for label, (batch, lr, warmup, optimizer) in runs.items()
    }


def linear_scaling_sweep(
    task: Task,
    base_batch: int,
    base_lr: float,
    batch_sizes: Sequence[int],
    target_loss: float,
    warmup_steps: int = 0,
    max_steps: int = 2000,
    progress: bool = True,
) -> list[SweepPoint]:
    """Steps and samples to ``target_loss`` when the learning rate follows the linear rule,
    ``lr = base_lr * B / base_batch``, from one rate tuned at ``base_batch``.

    Below the critical batch the samples stay about constant (the rule works); past it they
    grow: the rate the rule asks for is more than the curvature allows, and no rate could
    save the steps anyway, since ``S`` cannot fall below ``S_min``.
    """
    points = []
    with Progress(len(batch_sizes), "linear-scaling sweep", enabled=progress) as bar:
        for batch_size in batch_sizes:
            lr = base_lr * batch_size / base_batch
            steps = steps_to_target(
                task, batch_size, lr, target_loss, max_steps=max_steps, warmup_steps=warmup_steps
            )
            samples = None if steps is None else batch_size * steps
            points.append(SweepPoint(batch_size, lr, steps, samples))
            bar.step(f"B={batch_size}: {steps} steps")
    return points
