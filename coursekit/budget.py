"""Fitting a memory budget: the largest micro-batch that fits, then the window that reaches a
target effective batch.

The order matters. Memory decides the micro-batch (measured, because a guess from parameter
counts misses activations, temporaries and the allocator); the target effective batch, a
training decision, then decides how many micro-batches make one window. A target that is not a
multiple of the micro-batch is reached exactly with micro-batches of two neighbouring sizes,
which is right as long as the loss is weighted by sample counts (module 1), not with a
dropped remainder or a rounded-up batch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from coursekit.arguments import real, whole
from coursekit.memory import peak_live_bytes, track_cuda_peak
from coursekit.progress import Progress
from coursekit.units import format_bytes

#: What a student can do when not even one sample fits, in the order worth trying.
WHEN_NOTHING_FITS = (
    "activation checkpointing (recompute activations in backward), bf16 autocast (halves "
    "activations), a shorter sequence or smaller model, or sharding parameters, gradients "
    "and optimizer state across devices (ZeRO / FSDP, module 4)"
)


class NothingFits(ValueError):
    """Not even a micro-batch of one sample fits in the budget."""


@dataclass(frozen=True)
class AccumulationPlan:
    """One optimizer step's window: micro-batch sizes per device, and what they add up to."""

    target_batch: int
    max_micro_batch: int
    world_size: int
    sizes: tuple[int, ...]  # the micro-batch sizes of one window, on each device

    @property
    def accum_steps(self) -> int:
        return len(self.sizes)

    @property
    def micro_batch_size(self) -> int:
        """The largest micro-batch of the window (the one memory must hold)."""
        return max(self.sizes)

    @property
    def effective_batch(self) -> int:
        return sum(self.sizes) * self.world_size

    def __str__(self) -> str:
        big, small = max(self.sizes), min(self.sizes)
        shape = _count(self.sizes.count(big), f"micro-batch of {big}", f"micro-batches of {big}")
        if small != big:
            shape += f" and {self.sizes.count(small)} of {small}"
        devices = f" on each of {self.world_size} devices" if self.world_size > 1 else ""
        return (
            f"{shape}{devices} (accum_steps = {self.accum_steps}): {self.effective_batch} "
            f"samples per optimizer step"
        )


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def plan_accumulation(
    target_batch: int, max_micro_batch: int, world_size: int = 1
) -> AccumulationPlan:
    """The fewest micro-batches that reach ``target_batch`` exactly, none above the maximum.

    Each device's share, ``target_batch / world_size``, is split into
    ``ceil(share / max_micro_batch)`` micro-batches whose sizes differ by at most one, so
    every micro-batch fits and no sample is dropped or added.

    Example:
        >>> plan_accumulation(100, 32).sizes
        (25, 25, 25, 25)
        >>> plan_accumulation(101, 32).sizes
        (26, 25, 25, 25)
    """
    target_batch = whole("target_batch", target_batch)
    max_micro_batch = whole("max_micro_batch", max_micro_batch, minimum=None)
    world_size = whole("world_size", world_size)
    if max_micro_batch < 1:
        raise NothingFits(
            f"The largest micro-batch that fits is {max_micro_batch}: not even one sample "
            f"fits, and no number of accumulation steps changes that. Try {WHEN_NOTHING_FITS}."
        )
    if target_batch % world_size:
        below = target_batch - target_batch % world_size
        examples = f"{below} or {below + world_size}" if below else f"{world_size}"
        raise ValueError(
            f"An effective batch of {target_batch} cannot be shared by {world_size} devices "
            f"equally; choose a multiple of {world_size}, such as {examples}."
        )
    share = target_batch // world_size
    count = -(-share // max_micro_batch)  # a ceiling in whole numbers: exact at any size
    base, extra = divmod(share, count)
    sizes = (base + 1,) * extra + (base,) * (count - extra)
    return AccumulationPlan(target_batch, max_micro_batch, world_size, sizes)


def largest_micro_batch(fits: Callable[[int], bool], limit: int) -> int:
    """The largest size in ``1..limit`` for which ``fits(size)`` is true.

    Doubles the size until it stops fitting, then bisects between the last size that fitted
    and the first that did not: about ``2 log2(answer)`` probes. Memory grows with the
    micro-batch, so ``fits`` is assumed to be true up to some size and false after it.
    Raises :class:`NothingFits` when even a micro-batch of 1 does not fit.
    """
    limit = whole("limit", limit)
    if not fits(1):
        raise NothingFits(f"Not even a micro-batch of 1 fits. Try {WHEN_NOTHING_FITS}.")
    good = 1
    while good < limit:
        trial = min(2 * good, limit)
        if not fits(trial):
            bad = trial
            break
        good = trial
    else:
        return good
    while bad - good > 1:
        middle = (good + bad) // 2
        if fits(middle):
            good = middle
        else:
            bad = middle
    return good


MakeBatch = Callable[[int], tuple[torch.Tensor, torch.Tensor]]


def training_step_bytes(
    model: nn.Module, make_batch: MakeBatch, size: int, loss_fn: Callable = nn.functional.mse_loss
) -> int:
    """Peak bytes one micro-batch's forward and backward pass adds, measured.

    On a GPU it is the CUDA allocator's peak above what was allocated before (activations,
    gradients, temporaries), after one unmeasured step: a device's first matrix product
    allocates cuBLAS's workspace (megabytes), which is not a cost of the micro-batch. On the
    CPU, where no allocator keeps a peak, it is the peak of live tensors the step creates,
    counted by watching every allocation (:func:`coursekit.memory.peak_live_bytes`). The
    gradients are cleared afterwards.
    """
    inputs, targets = make_batch(size)

    def step() -> None:
        loss_fn(model(inputs), targets).backward()

    try:
        if inputs.device.type == "cuda":
            step()  # warm-up: library workspaces and lazily made buffers appear now
            model.zero_grad(set_to_none=True)
            before = torch.cuda.memory_allocated(inputs.device)
            with track_cuda_peak(inputs.device) as peak:
                step()
            return peak.peak_bytes - before
        return peak_live_bytes(step)
    finally:
        model.zero_grad(set_to_none=True)


@dataclass
class BudgetFit:
    """What :func:`fit_micro_batch` found: the answer and every measurement behind it."""

    micro_batch_size: int
    budget_bytes: int
    measured: dict[int, int] = field(default_factory=dict)  # size -> bytes, or -1: out of memory

    def __str__(self) -> str:
        used = self.measured.get(self.micro_batch_size, 0)
        return (
            f"largest micro-batch: {self.micro_batch_size} ({format_bytes(used)} of a "
            f"{format_bytes(self.budget_bytes)} budget; {len(self.measured)} sizes measured)"
        )


def search_probes(limit: int) -> int:
    """The most probes :func:`largest_micro_batch` makes below ``limit``: ``1 + 2 ceil(log2)``
    (one at 1, doubling up to ``limit``, then bisecting the last doubling's gap)."""
    limit = whole("limit", limit)
    return 1 + 2 * math.ceil(math.log2(max(limit, 1)))


def fit_micro_batch(
    model: nn.Module,
    make_batch: MakeBatch,
    budget_bytes: int,
    limit: int = 4096,
    loss_fn: Callable = nn.functional.mse_loss,
    progress: bool = True,
) -> BudgetFit:
    """The largest micro-batch whose training step stays within ``budget_bytes``, measured.

    Each probe runs one real forward and backward pass (:func:`training_step_bytes`); a CUDA
    out-of-memory error counts as "does not fit". Raises :class:`NothingFits` when a
    micro-batch of one is already over the budget. A progress bar counts the probes against
    their most (:func:`search_probes`); ``progress=False`` hides it.
    """
    real("budget_bytes", budget_bytes, 0, low_open=True)
    limit = whole("limit", limit)
    measured: dict[int, int] = {}
    bound = search_probes(limit)
    with Progress(bound, "fitting the micro-batch", enabled=progress) as bar:

        def fits(size: int) -> bool:
            try:
                measured[size] = training_step_bytes(model, make_batch, size, loss_fn)
            except torch.cuda.OutOfMemoryError:
                measured[size] = -1
                model.zero_grad(set_to_none=True)
                torch.cuda.empty_cache()
            used = "out of memory" if measured[size] < 0 else format_bytes(measured[size])
            bar.step(f"micro-batch {size}: {used}")
            return 0 <= measured[size] <= budget_bytes

        try:
            size = largest_micro_batch(fits, limit)
        except NothingFits:
            one = measured.get(1, -1)
            needs = "more than the device has" if one < 0 else format_bytes(one)
            raise NothingFits(
                f"A micro-batch of 1 needs {needs}, over the budget of "
                f"{format_bytes(budget_bytes)}. Try {WHEN_NOTHING_FITS}."
            ) from None
        bar.total = bar.done  # the search usually ends before its bound: the bar is full
    return BudgetFit(size, budget_bytes, dict(sorted(measured.items())))
