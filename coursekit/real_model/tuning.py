"""The micro-batch chosen for you: probe for the largest one that fits a memory budget, then
pick the accumulation steps that reach the effective batch you asked for.

Accelerate's ``find_executable_batch_size`` and Lightning's ``BatchSizeFinder`` do the first
half: they shrink (or grow) the batch until a step runs. What they leave to you is the half
that decides what you train: the effective batch, and so the learning rate and the schedule.
Here the memory decides only the micro-batch; the target effective batch, a training
decision, then decides the window (:func:`coursekit.budget.plan_accumulation`: the fewest
micro-batches that reach it exactly, of sizes that differ by at most one).

A probe is one forward and backward pass. The search:

- **grows** from 1, doubling, until a size does not fit (or the per-device batch is reached:
  a micro-batch bigger than a device's share of the window is never used), then **bisects**
  between the last size that fitted and the first that did not;
- counts a size as fitting when its step ran *and* its peak stayed under the budget less a
  safety margin (10% by default: sequences longer than the probe's, the allocator's
  fragmentation and a later evaluation pass all want headroom);
- treats an out-of-memory error as "does not fit" and frees what the failed try held before
  anything else: *after* the ``except`` block, because until it ends the exception's
  traceback keeps the failed step's tensors alive and ``gc.collect`` and ``empty_cache``
  cannot return them (PyTorch's FAQ, "My out of memory exception handler can't allocate
  memory"); and it never chooses a size that failed once, since a size that fails now and
  then will fail during training;
- lets every other error through: a shape mismatch or an illegal memory access is a bug, and
  calling it "too big" would hide it behind a smaller batch.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from coursekit.arguments import real, whole
from coursekit.budget import (
    WHEN_NOTHING_FITS,
    AccumulationPlan,
    NothingFits,
    largest_micro_batch,
    plan_accumulation,
)
from coursekit.progress import Progress
from coursekit.units import format_bytes

GIB = 2**30
#: What the budget keeps free by default: a tenth.
DEFAULT_MARGIN = 0.1
# The texts of out-of-memory errors that are plain RuntimeErrors, not torch.OutOfMemoryError:
# a CUDA library (cuBLAS, cuDNN) that fails to allocate, or the CPU allocator.
_OOM_TEXTS = (
    "CUDA out of memory",
    "CUDA error: out of memory",
    "CUBLAS_STATUS_ALLOC_FAILED",
    "CUDNN_STATUS_ALLOC_FAILED",
    "DefaultCPUAllocator: can't allocate memory",
    "DefaultCPUAllocator: not enough memory",
)


def is_out_of_memory(error: BaseException) -> bool:
    """True for ``torch.OutOfMemoryError`` and for the RuntimeErrors CUDA libraries and the
    CPU allocator raise when an allocation fails; False for every other error."""
    if isinstance(error, torch.OutOfMemoryError):
        return True
    return isinstance(error, RuntimeError) and any(text in str(error) for text in _OOM_TEXTS)


def free_memory() -> None:
    """Return what a failed try held: collect the garbage its traceback left, then give the
    CUDA allocator's cached blocks back (on a machine with a GPU)."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def budget_bytes(max_memory_gb: float, margin: float = DEFAULT_MARGIN) -> int:
    """The bytes a probe may peak at: ``max_memory_gb`` GiB less the safety ``margin``."""
    real("max_memory_gb", max_memory_gb, 0, low_open=True)
    real("margin", margin, 0, 1, high_open=True)
    return int(max_memory_gb * GIB * (1 - margin))


@dataclass
class Tuning:
    """What :func:`tune` found: the window to train with, and every probe behind it."""

    largest_fit: int
    plan: AccumulationPlan
    budget_bytes: int
    probes: list[tuple[int, int | None]] = field(default_factory=list)  # (size, peak or None)

    def as_dict(self) -> dict:
        return {
            "largest_fit": self.largest_fit,
            "accum_steps": self.plan.accum_steps,
            "micro_batch_sizes": list(self.plan.sizes),
        }

    def __str__(self) -> str:
        peak = dict(self.probes).get(self.largest_fit)
        used = f" (peak {format_bytes(peak)})" if peak else ""
        lines = [
            f"largest micro-batch that fits: {self.largest_fit}{used}, within "
            f"{format_bytes(self.budget_bytes)} (the budget less its margin), after "
            f"{len(self.probes)} probes",
            f"window: {self.plan}",
        ]
        share = self.plan.target_batch // self.plan.world_size
        if share % self.plan.accum_steps:
            lines.append(
                f"({share} samples per device do not split into {self.plan.accum_steps} equal "
                "micro-batches, so their sizes differ by one: weight each micro-batch's loss "
                "by its samples (or tokens), as module 2 does)"
            )
        return "\n".join(lines)


def tune(
    try_step: Callable[[int], int],
    target_batch: int,
    max_memory_gb: float,
    world_size: int = 1,
    margin: float = DEFAULT_MARGIN,
    free: Callable[[], None] = free_memory,
    progress: bool = True,
) -> Tuning:
    """The largest micro-batch that fits ``max_memory_gb`` (less ``margin``), then the
    fewest accumulation steps that reach ``target_batch`` exactly (see the module docstring).

    ``try_step(b)`` runs one forward and backward pass of ``b`` samples and returns its peak
    bytes (:func:`coursekit.real_model.memory.probe` makes one for a model). ``max_memory_gb``
    may be below the card's size, to fit a smaller card's budget. Raises :class:`NothingFits` (a
    ValueError) when not even one sample fits, and ValueError when ``target_batch`` does not
    divide among ``world_size`` devices.
    """
    target_batch = whole("target_batch", target_batch)
    world_size = whole("world_size", world_size)
    limit_bytes = budget_bytes(max_memory_gb, margin)
    plan_accumulation(target_batch, 1, world_size)  # refuses a target the devices cannot share
    share = target_batch // world_size
    probes: list[tuple[int, int | None]] = []
    bound = 1 + 2 * math.ceil(math.log2(max(share, 2)))
    with Progress(bound, "probing micro-batch sizes", enabled=progress) as bar:

        def fits(size: int) -> bool:
            peak = None
            try:
                peak = try_step(size)
            except Exception as error:
                if not is_out_of_memory(error):
                    raise
            if peak is None:  # out of memory. Freed here, after the except block: inside
                free()  # it, the exception's traceback still holds the failed try's tensors
                probes.append((size, None))
                bar.step(f"micro-batch {size}: out of memory")
                return False
            probes.append((size, peak))
            bar.step(f"micro-batch {size}: {format_bytes(peak)}")
            return peak <= limit_bytes

        try:  # grow by doubling, then bisect; each size probed once (module 1's search)
            largest = largest_micro_batch(fits, share)
        except NothingFits:
            largest = 0
        bar.total = bar.done
    if largest < 1:
        one = dict(probes).get(1)
        needs = "more than the card has" if one is None else format_bytes(one)
        raise NothingFits(
            f"A micro-batch of 1 needs {needs}, over the budget of {format_bytes(limit_bytes)} "
            f"({max_memory_gb:g} GiB less a {margin:.0%} margin). Try {WHEN_NOTHING_FITS}."
        )
    plan = plan_accumulation(target_batch, largest, world_size)
    return Tuning(largest, plan, limit_bytes, probes)


def autotune(try_step, free_memory, max_memory_gb, target_batch, world_size=1, margin=0.1):
    """Exercise 7.1's answer, in the exercise's own terms (the oracle of its check): a dict
    with ``largest_fit``, ``accum_steps`` and ``micro_batch_sizes`` (one device's window)."""
    if target_batch % world_size:
        raise ValueError(
            f"An effective batch of {target_batch} cannot be shared by {world_size} devices."
        )
    return tune(
        try_step, target_batch, max_memory_gb, world_size, margin, free_memory, progress=False
    ).as_dict()


#: The card a CPU simulates when no budget is given: 64 MiB, about what the tiny model needs
#: for a micro-batch of 32 sequences of 64 tokens.
CPU_CARD_GB = 1 / 16


def memory_budget_gb(max_memory_gb, device: torch.device) -> float:
    """The notebook's ``max_memory_gb`` checked: ``None`` (or 0) is the GPU's own memory, or
    on a CPU a simulated card of :data:`CPU_CARD_GB`; a number must be above 0 and, on a GPU,
    at most what the card has."""
    from coursekit.parameters import ParameterError

    on_gpu = device.type == "cuda"
    total = torch.cuda.get_device_properties(device).total_memory / GIB if on_gpu else None
    if max_memory_gb is None or max_memory_gb == 0:
        return total if on_gpu else CPU_CARD_GB
    if isinstance(max_memory_gb, bool) or not isinstance(max_memory_gb, (int, float)):
        raise ParameterError(
            f"max_memory_gb is {max_memory_gb!r}; give a number of GiB (papermill -p "
            "max_memory_gb 8), or None for the whole card."
        )
    if not 0 < max_memory_gb < math.inf:
        raise ParameterError(f"max_memory_gb is {max_memory_gb!r}; give a number above 0.")
    if on_gpu and max_memory_gb > total:
        raise ParameterError(
            f"max_memory_gb is {max_memory_gb:g}, more than this card's {total:.1f} GiB; a "
            "budget simulates a smaller card, not a bigger one."
        )
    return float(max_memory_gb)
