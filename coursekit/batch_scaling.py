"""Changing the effective batch: which hyperparameters move with it, and ramping it up.

A bigger effective batch (more accumulation steps) averages the gradient over more samples,
so each step is less noisy, and there are fewer steps per epoch. Two published rules say how
to move the hyperparameters so that training follows about the same path per sample seen:

- SGD, the linear scaling rule (Goyal et al. 2017, arXiv:1706.02677): batch x k, lr x k,
  with a gradual warm-up (theirs lasts a fixed number of epochs, that is of samples).
- Adam, the square-root scaling rule (Malladi et al. 2022, arXiv:2205.10287): batch x k,
  lr x sqrt(k), 1 - beta1 -> k(1 - beta1), 1 - beta2 -> k(1 - beta2), eps -> eps / sqrt(k).
- Weight decay: where it is part of the loss's gradient (SGD's and Adam's ``weight_decay``,
  an L2 term) the rules above already cover it, unchanged. AdamW's is decoupled: each step
  shrinks the weights by lr x weight_decay (``param.mul_(1 - lr * weight_decay)`` in
  torch/optim/adam.py). With lr x sqrt(k) and k times fewer steps over the same samples, the
  shrinking per sample falls by sqrt(k); weight_decay x sqrt(k) keeps it (lr x weight_decay
  x k per k-times-larger step, the same per sample).

Both are approximations that hold while k is not too large. :func:`scaled_hyperparameters`
applies them by these rules, which the notebook states word for word:

1. k = new_batch / base_batch, a true ratio (not integer division).
2. ``optimizer_kind`` "sgd": lr = base_lr * k. "adam" or "adamw": lr = base_lr * sqrt(k),
   betas = (1 - k(1 - beta1), 1 - k(1 - beta2)) and eps = eps / sqrt(k). Any other kind is
   refused with a ValueError that names the known kinds.
3. The warm-up keeps its length in samples: warmup_steps_new =
   ceil(warmup_steps * base_batch / new_batch), in exact integer arithmetic, so a warm-up of
   more than 0 steps never rounds to 0 steps.
4. The result is {"lr", "warmup_steps"} for SGD, plus "betas" and "eps" for Adam(W), plus
   "weight_decay" when one is given: unchanged for "sgd" and "adam", times sqrt(k) for
   "adamw" (decoupled weight decay, above).
5. A ValueError refuses base_batch or new_batch below 1, base_lr <= 0, warmup_steps < 0,
   weight_decay < 0, and a scaled beta outside [0, 1): where k(1 - beta) > 1 the rule does
   not apply.

GPT-3 (Brown et al. 2020, appendix B) grows the batch from small to full over the first few
billion tokens. With accumulation that means changing the number of micro-batches per window
during training: :func:`ramp_schedule` proposes such a schedule, :func:`ramp_plan` turns one
into the exact windows, loss scales and optimizer-step count (what the scheduler's length must
be), and :func:`train_with_plan` trains by a plan. A schedule counted in optimizer steps spends
its decay unevenly over the samples when the windows change size (many short early windows
decay it fast); GPT-3 and Megatron-LM count warm-up and decay in tokens or samples instead,
which :func:`samples_schedule` does for a plan.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import nn

from coursekit.arguments import choice, real, whole
from coursekit.progress import Progress
from coursekit.schedules import warmup_cosine

OPTIMIZER_KINDS = ("sgd", "adam", "adamw")


def scaled_hyperparameters(
    base_lr: float,
    base_batch: int,
    new_batch: int,
    optimizer_kind: str,
    warmup_steps: int,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float | None = None,
) -> dict:
    """The hyperparameters for ``new_batch`` from ones tuned at ``base_batch`` (rules 1-5 in
    the module's docstring: linear scaling for SGD, square-root scaling for Adam and AdamW).

    Example:
        >>> scaled_hyperparameters(0.1, 256, 1024, "sgd", warmup_steps=500)
        {'lr': 0.4, 'warmup_steps': 125}
        >>> adam = scaled_hyperparameters(1e-3, 64, 256, "adam", warmup_steps=100)
        >>> adam["lr"], adam["warmup_steps"], [round(beta, 9) for beta in adam["betas"]]
        (0.002, 25, [0.6, 0.996])
        >>> scaled_hyperparameters(1e-3, 64, 256, "adamw", 100, weight_decay=0.1)["weight_decay"]
        0.2
    """
    base_lr = real("base_lr", base_lr, 0, low_open=True)
    base_batch, new_batch = whole("base_batch", base_batch), whole("new_batch", new_batch)
    warmup_steps = whole("warmup_steps", warmup_steps, minimum=0)
    optimizer_kind = choice("optimizer_kind", optimizer_kind, OPTIMIZER_KINDS)
    k = new_batch / base_batch
    # The same number of samples: the ceiling of a ratio of integers, computed exactly
    # (a float ratio first can land one step off, math.ceil(245 / (98 / 96)) == 241).
    scaled = {"warmup_steps": -(-warmup_steps * base_batch // new_batch)}
    if weight_decay is not None:
        weight_decay = real("weight_decay", weight_decay, 0)
        # decoupled (AdamW): lr x weight_decay per step; in the loss (SGD, Adam): unchanged
        root = math.sqrt(k) if optimizer_kind == "adamw" else 1.0
        scaled["weight_decay"] = weight_decay * root
    if optimizer_kind == "sgd":
        return {"lr": base_lr * k, **scaled}
    if len(betas) != 2:
        raise ValueError(f"betas must be two numbers (beta1, beta2), got {betas!r}.")
    new_betas = []
    for index, beta in enumerate(betas):
        beta = real(f"betas[{index}]", beta, 0, 1, high_open=True)
        if k * (1 - beta) > 1:
            raise ValueError(
                f"betas[{index}] = {beta} cannot be scaled to batch {new_batch} from "
                f"{base_batch}: 1 - k(1 - beta) = {1 - k * (1 - beta):.3g} is below 0. The "
                "square-root rule holds for moderate k only; scale the batch less, or tune "
                "the betas at a batch nearer this one."
            )
        new_betas.append(1 - k * (1 - beta))
    eps = real("eps", eps, 0)
    return {
        "lr": base_lr * math.sqrt(k),
        **scaled,
        "betas": tuple(new_betas),
        "eps": eps / math.sqrt(k),
    }


def _checked_schedule(schedule) -> list[tuple[int, int]]:
    pairs = []
    for index, pair in enumerate(schedule):
        if len(pair) != 2:
            raise ValueError(
                f"schedule[{index}] must be a pair (from_sample, accum_steps), got {pair!r}."
            )
        pairs.append(
            (
                whole(f"schedule[{index}]'s from_sample", pair[0], minimum=0),
                whole(f"schedule[{index}]'s accum_steps", pair[1]),
            )
        )
    if not pairs:
        raise ValueError("The schedule is empty: give at least [(0, accum_steps)].")
    if pairs[0][0] != 0:
        raise ValueError(
            f"The schedule starts at sample {pairs[0][0]}: its first pair must be at sample 0, "
            "or the first windows would have no accum_steps."
        )
    for (before, _), (after, _) in zip(pairs, pairs[1:], strict=False):
        if after <= before:
            raise ValueError(
                f"The schedule must be sorted by from_sample with no repeats; {after} follows "
                f"{before}."
            )
    return pairs


def ramp_plan(total_samples: int, micro_batch_size: int, schedule) -> dict:
    """The windows, loss scales and optimizer steps of training whose window size changes.

    ``schedule`` is a sorted list of ``(from_sample, accum_steps)`` pairs, the first at 0. A
    window that starts at sample ``s`` has up to ``accum_steps`` micro-batches: those of the
    last pair with ``from_sample <= s``. A window never changes size in its middle, so a
    change takes effect at the first window that starts at or after its ``from_sample``, and
    no sample is skipped or repeated. The schedule may lower accum_steps as well as raise it.
    Samples go in order, each once; the last micro-batch (and window) may be short.

    Each micro-batch's loss scale is its samples over its window's samples, so every window's
    gradient is the mean over its samples. ``optimizer_steps`` (one per window) is the length
    a learning-rate scheduler needs.

    Returns:
        {"windows": [[[start, stop], ...], ...] (half-open sample ranges per micro-batch),
        "scales": the same shape, floats, "optimizer_steps": int}

    Example:
        >>> plan = ramp_plan(10, 2, [(0, 1), (3, 2)])
        >>> plan["windows"]  # the change at sample 3 waits for the window that starts at 4
        [[[0, 2]], [[2, 4]], [[4, 6], [6, 8]], [[8, 10]]]
        >>> plan["optimizer_steps"]
        4
    """
    total_samples = whole("total_samples", total_samples)
    micro_batch_size = whole("micro_batch_size", micro_batch_size)
    pairs = _checked_schedule(schedule)
    windows, scales, start, phase = [], [], 0, 0
    while start < total_samples:
        while phase + 1 < len(pairs) and pairs[phase + 1][0] <= start:
            phase += 1
        window = []
        for _ in range(pairs[phase][1]):
            if start == total_samples:
                break
            stop = min(start + micro_batch_size, total_samples)
            window.append([start, stop])
            start = stop
        window_samples = window[-1][1] - window[0][0]
        windows.append(window)
        scales.append([(stop - begin) / window_samples for begin, stop in window])
    return {"windows": windows, "scales": scales, "optimizer_steps": len(windows)}


def ramp_schedule(
    total_samples: int,
    micro_batch_size: int,
    start_batch: int,
    end_batch: int,
    ramp_samples: int,
    steps: int = 4,
) -> list[tuple[int, int]]:
    """A ``schedule`` for :func:`ramp_plan` that moves the effective batch from
    ``start_batch`` to ``end_batch`` in ``steps`` even stages over the first ``ramp_samples``
    (GPT-3 grew its batch linearly over the first few billion tokens).

    Accumulation changes the batch in whole micro-batches, so both batches must be multiples
    of ``micro_batch_size``; the stages between are rounded to whole accum_steps (half up), and
    stages that would repeat the previous accum_steps are left out.

    Example:
        >>> ramp_schedule(10_000, 32, start_batch=32, end_batch=256, ramp_samples=4_000)
        [(0, 1), (1000, 3), (2000, 5), (3000, 6), (4000, 8)]
    """
    total_samples = whole("total_samples", total_samples)
    micro_batch_size = whole("micro_batch_size", micro_batch_size)
    ramp_samples = whole("ramp_samples", ramp_samples, minimum=0)
    steps = whole("steps", steps)
    if ramp_samples > total_samples:
        raise ValueError(
            f"ramp_samples ({ramp_samples}) is more than total_samples ({total_samples}): the "
            "ramp would not finish before training ends. Shorten the ramp."
        )
    accum = []
    for name, batch in (("start_batch", start_batch), ("end_batch", end_batch)):
        batch = whole(name, batch)
        if batch % micro_batch_size:
            raise ValueError(
                f"{name} ({batch}) is not a multiple of micro_batch_size ({micro_batch_size}): "
                "accumulation changes the batch in whole micro-batches."
            )
        accum.append(batch // micro_batch_size)
    first, last = accum
    by_sample: dict[int, int] = {}
    for stage in range(steps + 1):
        # stage / steps of the way, in integers: samples floored, accum_steps rounded half up
        from_sample = ramp_samples * stage // steps
        by_sample[from_sample] = first + ((last - first) * stage * 2 + steps) // (2 * steps)
    schedule: list[tuple[int, int]] = []
    for from_sample, accum_steps in sorted(by_sample.items()):
        if not schedule or schedule[-1][1] != accum_steps:
            schedule.append((from_sample, accum_steps))
    return schedule


def train_with_plan(
    model: nn.Module,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None,
    data: Sequence[torch.Tensor],
    plan: dict,
    progress: bool = True,
) -> list[float]:
    """Train by a :func:`ramp_plan`: each micro-batch's mean loss times its scale goes
    backward, and each window ends in one optimizer step and one scheduler step.

    ``data`` is ``(inputs, targets)``, indexed by sample. Returns each window's loss: the
    scaled sum of its micro-batches' losses, which for a ``loss_fn`` that averages over its
    samples is the mean over the window's samples (what to log).

    Example:
        >>> from coursekit.data import make_regression
        >>> from coursekit.models import tiny_mlp
        >>> model = tiny_mlp()
        >>> optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        >>> plan = ramp_plan(48, 4, [(0, 1), (16, 4)])
        >>> losses = train_with_plan(model, nn.MSELoss(), optimizer, None,
        ...                          make_regression(48), plan, progress=False)
        >>> len(losses) == plan["optimizer_steps"]
        True
    """
    inputs, targets = data
    windows, scales = plan["windows"], plan["scales"]
    if [len(w) for w in windows] != [len(s) for s in scales]:
        raise ValueError("plan['windows'] and plan['scales'] differ in shape: use ramp_plan's.")
    last_stop = max((stop for window in windows for _, stop in window), default=0)
    if last_stop > len(inputs):
        raise ValueError(
            f"The plan reaches sample {last_stop}, but data holds {len(inputs)}: build the plan "
            "for this data's length."
        )
    window_losses = []
    with Progress(len(windows), "training by the plan", enabled=progress) as bar:
        for window, window_scales in zip(windows, scales, strict=True):
            window_loss = 0.0
            for (start, stop), scale in zip(window, window_scales, strict=True):
                loss = loss_fn(model(inputs[start:stop]), targets[start:stop])
                (loss * scale).backward()
                window_loss += loss.detach() * scale
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if scheduler is not None:
                scheduler.step()
            window_losses.append(float(window_loss))
            bar.step(f"loss {window_losses[-1]:.4g}")
    return window_losses


def samples_schedule(
    optimizer: torch.optim.Optimizer,
    plan: dict,
    warmup_samples: int,
    final_fraction: float = 0.1,
) -> torch.optim.lr_scheduler.LambdaLR:
    """A warm-up and cosine schedule counted in samples, for a plan whose windows change size.

    Stepped once per window, as any scheduler is, but each window's learning rate is the
    warm-up and cosine of :func:`coursekit.schedules.warmup_cosine` at the number of samples
    trained before that window, over the plan's total: the rate at a given sample is then the
    same whatever the ramp (GPT-3 warmed up over its first 375 million tokens and decayed over
    260 billion; Megatron-LM's sample-based schedules do the same).

    Example:
        >>> plan = ramp_plan(64, 4, [(0, 1), (16, 4)])
        >>> model = nn.Linear(1, 1)
        >>> optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
        >>> scheduler = samples_schedule(optimizer, plan, warmup_samples=8)
        >>> rates = []
        >>> for _ in range(plan["optimizer_steps"]):
        ...     rates.append(round(optimizer.param_groups[0]["lr"], 3))
        ...     optimizer.step()
        ...     scheduler.step()
        >>> rates  # windows of 4 samples, then of 16: the cosine follows the samples
        [0.125, 0.625, 1.0, 0.988, 0.954, 0.639, 0.255]
    """
    windows = plan["windows"]
    if not windows:
        raise ValueError("The plan has no windows: build it with ramp_plan.")
    total = windows[-1][-1][1]
    warmup_samples = whole("warmup_samples", warmup_samples, minimum=0)
    if warmup_samples >= total:
        raise ValueError(
            f"warmup_samples ({warmup_samples}) must be fewer than the plan's {total} samples."
        )
    before = [window[0][0] for window in windows]  # samples trained before each window
    in_samples = warmup_cosine(
        torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0),
        warmup_samples,
        total,
        final_fraction,
    ).lr_lambdas[0]

    def factor(step: int) -> float:
        return in_samples(before[min(step, len(before) - 1)])

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
