"""The accumulation loop written right, and written with each known mistake.

The checks run every variant from the same starting weights; when a student's final
weights match a variant, that variant's mistake is what the student made. Each variant
differs from the right loop by one decision, as real bugs do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

MISTAKES: dict[str, str] = {
    "loss_not_divided": (
        "The loss was not divided by the number of micro-batches in the window, so each step "
        "used the sum of their gradients: N times too large, like an N times larger learning "
        "rate under SGD. Divide each micro-batch's loss by the window's size before backward()."
    ),
    "step_every_micro_batch": (
        "optimizer.step() ran after every micro-batch. Step (and zero_grad) once per window, "
        "when (i + 1) % accum_steps == 0 or at the last micro-batch."
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
        "at the last micro-batch."
    ),
    "last_window_scaled_by_n": (
        "The last window has r < accum_steps micro-batches but was divided by accum_steps, so "
        "its step is only r/accum_steps of the right size. Divide by the window's real size r."
    ),
    "off_by_one_boundary": (
        "The window boundary is off by one: `i % accum_steps == 0` steps after the first "
        "micro-batch. With i counted from 0, step when (i + 1) % accum_steps == 0."
    ),
}

Batch = tuple[torch.Tensor, torch.Tensor]


def run_loop(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    loss_fn: Callable,
    micro_batches: Sequence[Batch],
    accum_steps: int,
    mistake: str | None = None,
    micro_losses: list[float] | None = None,
) -> list[float]:
    """One pass of the accumulation loop, right (``mistake=None``) or with one mistake.

    Returns the logged loss per optimizer step: the mean loss over the window's samples.
    Micro-batches are assumed equal in size (module 1); module 2 weighs unequal ones.
    ``micro_losses``, when given, receives every micro-batch's unscaled loss.
    """
    if mistake is not None and mistake not in MISTAKES:
        raise ValueError(f"Unknown mistake {mistake!r}.")
    count = len(micro_batches)
    logged, window_loss = [], 0.0
    for i, (inputs, targets) in enumerate(micro_batches):
        window_size = min(accum_steps, count - (i // accum_steps) * accum_steps)
        divisor = {
            "loss_not_divided": 1,
            "last_window_scaled_by_n": accum_steps,
        }.get(mistake or "", window_size)
        if mistake == "zero_grad_inside_loop":
            optimizer.zero_grad()
        loss = loss_fn(model(inputs), targets)
        (loss / divisor).backward()
        window_loss += loss.detach().item() / window_size
        if micro_losses is not None:
            micro_losses.append(loss.detach().item())
        boundary = (i + 1) % accum_steps == 0 or i == count - 1
        if mistake == "step_every_micro_batch":
            boundary = True
        elif mistake == "last_window_dropped":
            boundary = (i + 1) % accum_steps == 0
        elif mistake == "off_by_one_boundary":
            boundary = i % accum_steps == 0
        if boundary:
            if mistake == "zero_grad_before_step":
                optimizer.zero_grad()
            optimizer.step()
            if mistake not in ("zero_grad_missing", "zero_grad_before_step"):
                optimizer.zero_grad()
            logged.append(window_loss)
            window_loss = 0.0
    return logged
