"""A reference accumulation loop, and a throughput measurement for comparing loops.

This is the loop the course builds (nanoGPT's shape): forward and backward every
micro-batch, ``step()`` and ``zero_grad()`` once per window. Later cells and modules reuse
it for demonstrations, so a student's exercise is never a dependency of the story.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Sequence

import torch
from torch import nn

from coursekit.arguments import real, whole
from coursekit.progress import Progress

Batch = tuple[torch.Tensor, torch.Tensor]


def windows(micro_batches: Sequence[Batch], accum_steps: int) -> list[Sequence[Batch]]:
    """Group micro-batches into windows of ``accum_steps``; the last may be shorter."""
    accum_steps = whole("accum_steps", accum_steps)
    return [
        micro_batches[start : start + accum_steps]
        for start in range(0, len(micro_batches), accum_steps)
    ]


def train_accumulated(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    micro_batches: Iterable[Batch],
    accum_steps: int,
    device: torch.device | str | None = None,
    non_blocking: bool = False,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
) -> list[float]:
    """Train one pass over ``micro_batches``, stepping once per window of ``accum_steps``.

    Each micro-batch's mean loss is weighted by its share of the window's samples, so every
    step follows the mean gradient over exactly the samples of its window, the last,
    shorter window included. Returns the true mean loss of each window (what to log).

    Args:
        device: where to move each micro-batch; with ``non_blocking=True`` a copy from
            pinned CPU memory does not make Python wait, so it keeps queueing GPU work.
        scheduler: stepped once per optimizer step, right after it (never per micro-batch).

    Example:
        >>> from coursekit.data import make_regression, split_micro_batches
        >>> from coursekit.models import tiny_mlp
        >>> model = tiny_mlp()
        >>> x, y = make_regression(40)
        >>> optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        >>> losses = train_accumulated(model, optimizer, nn.MSELoss(),
        ...                            split_micro_batches(x, y, 4), accum_steps=4)
        >>> len(losses)  # 10 micro-batches: windows of 4, 4 and 2
        3
    """
    window_losses = []
    for window in windows(list(micro_batches), accum_steps):
        window_samples = sum(len(targets) for _, targets in window)
        window_loss = 0.0  # a tensor after the first micro-batch: no .item() sync per micro-batch
        for inputs, targets in window:
            if device is not None:
                inputs = inputs.to(device, non_blocking=non_blocking)
                targets = targets.to(device, non_blocking=non_blocking)
            loss = loss_fn(model(inputs), targets)
            weight = len(targets) / window_samples
            (loss * weight).backward()
            window_loss += loss.detach() * weight
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if scheduler is not None:
            scheduler.step()
        window_losses.append(float(window_loss))
    return window_losses


def samples_per_second(
    run: Callable[[], None],
    n_samples: int,
    repeats: int = 5,
    warmup: int = 2,
    min_time_s: float = 0.2,
    progress: bool = True,
) -> float:
    """Median throughput of ``run()`` over ``repeats`` repeats; it processes ``n_samples``.

    Each repeat calls ``run()`` until at least ``min_time_s`` has passed, so short runs are
    not lost in the clock's noise. The median, not the best or the mean, is reported: one
    lucky or one disturbed repeat moves it least, so two settings compared this way swap
    places less often from run to run on a shared machine. CUDA work is
    synchronised before the clock stops. A measurement that takes longer than a second shows
    a progress bar (warm-up calls and repeats); ``progress=False`` hides it.
    """
    n_samples, repeats = whole("n_samples", n_samples), whole("repeats", repeats)
    warmup = whole("warmup", warmup, minimum=0)
    min_time_s = real("min_time_s", min_time_s, 0)
    rates = []
    with Progress(warmup + repeats, "measuring throughput", enabled=progress) as bar:
        for _ in range(warmup):
            run()
            bar.step("warm-up")
        for _ in range(repeats):
            _synchronize()
            calls, start = 0, time.perf_counter()
            while True:
                run()
                calls += 1
                _synchronize()
                elapsed = time.perf_counter() - start
                if elapsed >= min_time_s:
                    break
            rates.append(calls * n_samples / elapsed)
            bar.step(f"median so far {statistics.median(rates):,.0f} samples/s")
    return statistics.median(rates)


def _synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
