"""The batch-size sweep: steps and samples to a target loss, each batch size at its best
learning rate, the points McCandlish et al.'s hyperbola is fitted to
(:func:`~coursekit.critical_batch.hyperbola.fit_hyperbola`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from coursekit.arguments import real, whole
from coursekit.critical_batch.task import Task
from coursekit.critical_batch.training import steps_to_target
from coursekit.progress import Progress


class SweepPoint(NamedTuple):
    """One batch size's result: its best learning rate, steps ``S`` and samples ``E = B * S``
    to the target (``None`` when no learning rate of the grid reached it)."""

    batch_size: int
    lr: float
    steps: int | None
    samples: int | None


def batch_size_sweep(
    task: Task,
    batch_sizes: Sequence[int],
    lrs: Sequence[float],
    target_loss: float,
    max_steps: int = 2000,
    progress: bool = True,
) -> list[SweepPoint]:
    """For each batch size, the learning rate of ``lrs`` that reaches ``target_loss`` in the
    fewest steps, as McCandlish et al. tune it for each batch size (with one learning rate
    for all, large batches would look worse than they are, and small ones might not converge).

    Every rate of the grid is tried; a run stops once it has taken as many steps as the best
    so far, since it can no longer win. Rates are tried nearest first to the previous batch
    size's best, so the best is usually found early and the other runs are cut short. Each
    count is one run on one sample stream: at small batches, where the loss fluctuates near
    the target, it carries some luck, and taking the best of a grid picks the lucky ones.

    Example:
        >>> task = make_task()
        >>> sweep = batch_size_sweep(task, [64, 1024], [1, 4, 16], task.floor_loss + 0.01,
        ...                          progress=False)
        >>> [(p.batch_size, p.lr) for p in sweep]
        [(64, 4), (1024, 4)]
    """
    if not lrs:
        raise ValueError("lrs is empty: give at least one learning rate to try.")
    target_loss = real("target_loss", target_loss)
    sizes = [whole("batch_size", b) for b in batch_sizes]
    points, previous = [], float(sorted(lrs)[len(lrs) // 2])
    with Progress(len(sizes), "batch-size sweep", enabled=progress) as bar:
        for batch_size in sizes:
            best_lr, best_steps = None, None
            for lr in sorted(lrs, key=lambda rate: abs(math.log(rate / previous))):
                cap = max_steps if best_steps is None else best_steps - 1
                steps = steps_to_target(task, batch_size, lr, target_loss, max_steps=cap)
                if steps is not None:
                    best_lr, best_steps = lr, steps
            previous = previous if best_lr is None else best_lr
            samples = None if best_steps is None else batch_size * best_steps
            points.append(SweepPoint(batch_size, best_lr, best_steps, samples))
            bar.step(f"B={batch_size}: {best_steps} steps")
    return points
