"""The accumulation loop written right, and written with each known mistake.

The checks run every variant from the same starting weights; when a student's final
weights match a variant, that variant's mistake is what the student made. Each variant
differs from the right loop by one decision, as real bugs do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from coursekit.training import windows

MISTAKES: dict[str, str] = {
    "loss_not_divided": (
        "The loss was not divided by the window's size, so each step used the sum of the "
        "micro-batch gradients: N times too large, like an N times larger learning rate under "
        "SGD. Scale each micro-batch's loss by its share of the window before backward()."
    ),
    "mean_of_means": (
        "Each loss was divided by the number of micro-batches in its window, but the micro-"
        "batches differ in size (the last one is smaller): a mean of per-micro-batch means "
        "over-weights the small one's samples. Weight each loss by its share of the window's "
        "samples: loss * len(targets) / window_samples."
    ),
    "step_every_micro_batch": (
        "optimizer.step() ran after every micro-batch. Step (and zero_grad) once per window of "
        "accum_steps micro-batches, and once more for a last, shorter window."
    ),
    "zero_grad_inside_loop": (
        "Only the last micro-batch of each window counted: zero_grad() runs before every "
        "backward() and wipes the gradients accumulated so far. Call it once, after step()."
    ),
    "zero_grad_missing": (
        "Gradients were never cleared, so every step also re-used the gradients of all earlier "
        "windows. Call optimizer.zero_grad() right after each optimizer.step()."
    ),
    "zero_grad_before_step": (
        "zero_grad() ran before step(), so each step saw no gradient and the weights never "
        "moved. Step first, then zero the gradients."
    ),
    "last_window_dropped": (
        "The last, incomplete window was never stepped: its micro-batches did a forward and "
        "backward for nothing (and their gradients would leak into the next epoch). Also step "
        "after the last micro-batch."
    ),
    "last_window_scaled_by_n": (
        "The last window is shorter than accum_steps micro-batches but was divided by "
        "accum_steps, so its step is too small. Scale by the window's real size."
    ),
    "off_by_one_boundary": (
        "The window boundary is off by one: `i % accum_steps == 0` steps after the first "
        "micro-batch. With i counted from 0, step when (i + 1) % accum_steps == 0."
    ),
}

Batch = tuple[torch.Tensor, torch.Tensor]


def _weight(mistake: str | None, samples: int, window: Sequence[Batch], accum_steps: int):
    window_samples = sum(len(targets) for _, targets in window)
    return {
        "loss_not_divided": 1.0,
        "mean_of_means": 1.0 / len(window),
        "last_window_scaled_by_n": 1.0 / accum_steps,
    }.get(mistake or "", samples / window_samples)


def run_loop(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    loss_fn: Callable,
    micro_batches: Sequence[Batch],
    accum_steps: int,
    mistake: str | None = None,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
) -> list[float]:
    """One pass of the accumulation loop, right (``mistake=None``) or with one mistake.

    A ``scheduler`` steps right after each optimizer step, as it should.

    Returns the logged loss per optimizer step: the mean loss over the window's samples.
    """
    if mistake is not None and mistake not in MISTAKES:
        raise ValueError(f"Unknown mistake {mistake!r}.")
    count = len(micro_batches)
    logged, window_loss = [], 0.0
    for index, window in enumerate(windows(list(micro_batches), accum_steps)):
        window_samples = sum(len(targets) for _, targets in window)
        for offset, (inputs, targets) in enumerate(window):
            i = index * accum_steps + offset
            if mistake == "zero_grad_inside_loop":
                optimizer.zero_grad()
            loss = loss_fn(model(inputs), targets)
            (loss * _weight(mistake, len(targets), window, accum_steps)).backward()
            window_loss += loss.detach().item() * len(targets) / window_samples
            boundary = (i + 1) % accum_steps == 0 or i == count - 1
            if mistake == "step_every_micro_batch":
                boundary = True
            elif mistake == "last_window_dropped":
                boundary = (i + 1) % accum_steps == 0
            elif mistake == "off_by_one_boundary":
                boundary = i % accum_steps == 0 or i == count - 1
            if boundary:
                if mistake == "zero_grad_before_step":
                    optimizer.zero_grad()
                optimizer.step()
                if scheduler is not None:
                    scheduler.step()
                if mistake not in ("zero_grad_missing", "zero_grad_before_step"):
                    optimizer.zero_grad()
                logged.append(window_loss)
                window_loss = 0.0
    return logged
