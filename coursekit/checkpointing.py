"""Activation checkpointing, and what it costs: memory saved against compute spent, measured.

Checkpointing keeps only the input of each segment of a model in the forward pass and runs
the segment's forward again during backward to get its activations back. Peak memory then
holds the segment inputs plus one segment's activations, instead of every layer's; the price
is a second forward pass through the checkpointed segments. With accumulation the two
combine: the memory freed buys a larger micro-batch, so fewer micro-batches make a window.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint_sequential
from torch.utils.flop_counter import FlopCounterMode

from coursekit.arguments import whole
from coursekit.memory import peak_live_bytes
from coursekit.progress import Progress


class Checkpointed(nn.Module):
    """``model`` (an ``nn.Sequential``) run in ``segments`` checkpointed pieces when training.

    PyTorch's :func:`~torch.utils.checkpoint.checkpoint_sequential` cuts the layers into
    ``segments`` pieces and checkpoints all but the last, which would be recomputed at once
    anyway. ``segments=1`` is therefore plain training. With no gradient needed (evaluation)
    the model runs as it is.
    """

    def __init__(self, model: nn.Sequential, segments: int):
        super().__init__()
        if not isinstance(model, nn.Sequential):
            raise TypeError(
                "checkpoint_sequential needs an nn.Sequential; wrap other models' blocks with "
                "torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False) instead."
            )
        segments = whole("segments", segments)
        if not 1 <= segments <= len(model):
            raise ValueError(f"segments must be between 1 and {len(model)}, got {segments}.")
        self.model = model
        self.segments = segments

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if self.segments == 1 or not torch.is_grad_enabled():
            return self.model(inputs)
        # use_reentrant=False: the variant PyTorch recommends. The reentrant one gives no
        # gradients when no input requires grad (torch.utils.checkpoint's documentation) and
        # fails under DDP in some set-ups ("mark a variable ready only once", PyTorch #24005).
        return checkpoint_sequential(self.model, self.segments, inputs, use_reentrant=False)


@dataclass(frozen=True)
class CheckpointCost:
    """One training step (forward and backward) of one micro-batch, measured."""

    segments: int
    peak_bytes: int  # peak of the tensors the step creates (activations, gradients, temporaries)
    flops: int  # floating-point operations counted by PyTorch's FlopCounterMode
    seconds: float  # the fastest of a few runs (slower ones measure the rest of the machine)


def step_cost(
    model: nn.Module,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    loss_fn: Callable = nn.functional.mse_loss,
    repeats: int = 3,
) -> tuple[int, int, float]:
    """``(peak_bytes, flops, seconds)`` of one forward and backward pass; gradients cleared.

    The time is the best of ``repeats`` runs after one warm-up run, as in
    :func:`coursekit.training.samples_per_second`.
    """

    def step() -> None:
        loss_fn(model(inputs), targets).backward()

    try:
        peak = peak_live_bytes(step)
        model.zero_grad(set_to_none=True)
        with FlopCounterMode(display=False) as counter:
            step()
        flops = counter.get_total_flops()
        times = []
        for _ in range(repeats + 1):
            model.zero_grad(set_to_none=True)
            if inputs.device.type == "cuda":
                torch.cuda.synchronize(inputs.device)
            start = time.perf_counter()
            step()
            if inputs.device.type == "cuda":
                torch.cuda.synchronize(inputs.device)
            times.append(time.perf_counter() - start)
    finally:
        model.zero_grad(set_to_none=True)
    return peak, int(flops), min(times[1:])


def checkpoint_costs(
    model: nn.Sequential,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    segments_options: tuple[int, ...] = (1, 2, 4, 8),
    loss_fn: Callable = nn.functional.mse_loss,
    repeats: int = 3,
    progress: bool = True,
) -> list[CheckpointCost]:
    """Memory, compute and time of one training step for each number of segments.

    A progress bar counts the settings measured; ``progress=False`` hides it.
    """
    segments_options = [whole("each of segments_options", s) for s in segments_options]
    repeats = whole("repeats", repeats)
    costs = []
    with Progress(len(segments_options), "measuring checkpointing", enabled=progress) as bar:
        for segments in segments_options:
            candidate = Checkpointed(model, segments)
            costs.append(
                CheckpointCost(segments, *step_cost(candidate, inputs, targets, loss_fn, repeats))
            )
            bar.step(f"{segments} segment{'s' if segments > 1 else ''}")
    return costs
