"""Learning-rate schedules counted in optimizer steps, the unit a scheduler lives in.

With accumulation one optimizer step takes ``accum_steps`` micro-batches. A scheduler steps
once per optimizer step, so its length must be the number of optimizer steps; counted in
micro-batches it would reach only ``1 / accum_steps`` of the way (HF Accelerate #1170).
"""

from __future__ import annotations

import math

import torch

from coursekit.arguments import real, whole


def optimizer_steps(n_micro_batches: int, accum_steps: int, epochs: int = 1) -> int:
    """Optimizer steps in ``epochs`` passes: one per window, the last shorter one included.

    Example:
        >>> optimizer_steps(n_micro_batches=10, accum_steps=4, epochs=3)
        9
    """
    n_micro_batches = whole("n_micro_batches", n_micro_batches, minimum=0)
    accum_steps = whole("accum_steps", accum_steps)
    epochs = whole("epochs", epochs, minimum=0)
    return -(-n_micro_batches // accum_steps) * epochs  # a whole-number ceiling


def warmup_linear_decay(
    optimizer: torch.optim.Optimizer, warmup_steps: int, total_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up to the optimizer's lr over ``warmup_steps``, then linear decay to 0 at
    ``total_steps``. Both counts are optimizer steps.

    Step ``s`` (from 0) runs at ``lr * (s + 1) / warmup_steps`` during the warm-up, so the
    first step is small but not 0; the peak rate is used at steps ``warmup_steps - 1`` and
    ``warmup_steps``, then the rate falls by the same amount each step.
    """
    warmup_steps, total_steps = _steps(warmup_steps, total_steps)
    if not 0 <= warmup_steps < total_steps:
        raise ValueError(
            f"Need 0 <= warmup_steps < total_steps, got {warmup_steps} and {total_steps}."
        )

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        return max(0.0, (total_steps - step) / (total_steps - warmup_steps))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def warmup_cosine(
    optimizer: torch.optim.Optimizer,
    warmup_steps: int,
    total_steps: int,
    final_fraction: float = 0.1,
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up over ``warmup_steps``, then a cosine from the peak down to
    ``final_fraction`` of it at ``total_steps``: nanoGPT's schedule. Counts optimizer steps.

    Example:
        >>> model = torch.nn.Linear(1, 1)
        >>> optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
        >>> scheduler = warmup_cosine(optimizer, warmup_steps=2, total_steps=6)
        >>> [round(f(s), 3) for f in scheduler.lr_lambdas for s in range(6)]
        [0.5, 1.0, 1.0, 0.775, 0.325, 0.1]
    """
    warmup_steps, total_steps = _steps(warmup_steps, total_steps)
    final_fraction = real("final_fraction", final_fraction, 0, 1)
    if not 0 <= warmup_steps < total_steps:
        raise ValueError(
            f"Need 0 <= warmup_steps < total_steps, got {warmup_steps} and {total_steps}."
        )

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        decayed = min(step - warmup_steps, total_steps - 1 - warmup_steps)
        progress = decayed / max(1, total_steps - 1 - warmup_steps)
        return final_fraction + (1 - final_fraction) * 0.5 * (1 + math.cos(math.pi * progress))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def _steps(warmup_steps, total_steps) -> tuple[int, int]:
    return whole("warmup_steps", warmup_steps, minimum=0), whole("total_steps", total_steps)
