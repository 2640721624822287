"""Samples per second by micro-batch size: the measurement the accumulation advice needs.

On a GPU the clock must wait for the queued kernels, or it would time only their launch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from coursekit.arguments import whole


def measure_throughput(
    model: nn.Module,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    make_batch: Callable[[int], tuple[torch.Tensor, torch.Tensor]],
    sizes: Sequence[int],
    repeats: int = 5,
) -> dict[int, float]:
    """Samples per second of one forward and backward pass, by micro-batch size.

    Each size is timed ``repeats`` times after one untimed warm-up pass, and the best is
    kept: the slower repeats measure whatever else the machine was doing. On a GPU (the
    model and ``make_batch``'s tensors on it) the clock waits for the queued kernels.
    """
    import time

    repeats = whole("repeats", repeats)
    result = {}
    for size in sizes:
        inputs, targets = make_batch(whole("size", size))
        times = []
        for _ in range(repeats + 1):
            model.zero_grad(set_to_none=True)
            _synchronize(inputs.device)
            start = time.perf_counter()
            loss_fn(model(inputs), targets).backward()
            _synchronize(inputs.device)
            times.append(time.perf_counter() - start)
        result[size] = size / min(times[1:])
    model.zero_grad(set_to_none=True)
    return result


def _synchronize(device: torch.device) -> None:
    """Wait for ``device``'s queued work: CUDA kernels run asynchronously, so without this a
    clock around ``backward()`` would time only their launch."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
