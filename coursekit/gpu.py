"""The accumulation loop on a CUDA GPU: peak memory and speed per micro-batch size.

On the CPU there is nothing to measure here; callers get a plain sentence saying so.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from coursekit.data import make_classification, split_micro_batches
from coursekit.memory import track_cuda_peak
from coursekit.progress import Progress
from coursekit.training import samples_per_second, train_accumulated

NO_GPU = (
    "No CUDA GPU here, so this part is skipped. The equivalence and memory results above hold "
    "on a GPU too (its speeds differ); on Colab, choose Runtime > Change runtime type > GPU to "
    "run it."
)


@dataclass(frozen=True)
class GpuRun:
    micro_batch_size: int
    accum_steps: int
    peak_bytes: int | None  # None off CUDA, where no peak can be read
    samples_per_second: float


def gpu_model(in_features: int = 256, hidden: int = 2048, n_classes: int = 10) -> nn.Module:
    """Wide enough that the activations of a large micro-batch are tens of MiB on the GPU."""
    return nn.Sequential(
        nn.Linear(in_features, hidden),
        nn.GELU(),
        nn.Linear(hidden, hidden),
        nn.GELU(),
        nn.Linear(hidden, n_classes),
    )


def measure_accumulation(
    device: torch.device,
    effective_batch_size: int,
    micro_batch_sizes: tuple[int, ...],
    hidden: int = 2048,
    progress: bool = True,
) -> list[GpuRun]:
    """Train one window per micro-batch size at a fixed effective batch on ``device``.

    On CUDA, batches start in pinned CPU memory and move with ``non_blocking=True``, so
    Python does not wait for each copy and keeps queueing work for the GPU. A progress bar
    counts the sizes measured; ``progress=False`` hides it.
    """
    cuda = device.type == "cuda"
    inputs, labels = make_classification(effective_batch_size, in_features=256, n_classes=10)
    if cuda:
        inputs, labels = inputs.pin_memory(), labels.pin_memory()
    for micro in micro_batch_sizes:
        if effective_batch_size % micro:
            raise ValueError(f"{micro} does not divide the effective batch {effective_batch_size}.")
    runs = []
    label = f"measuring on {device.type}"
    with Progress(len(micro_batch_sizes), label, enabled=progress) as bar:
        for micro in micro_batch_sizes:
            accum_steps = effective_batch_size // micro
            model = gpu_model(hidden=hidden).to(device)
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
            micro_batches = split_micro_batches(inputs, labels, micro)

            def one_window(
                model=model, optimizer=optimizer, batches=micro_batches, steps=accum_steps
            ):
                train_accumulated(
                    model,
                    optimizer,
                    nn.CrossEntropyLoss(),
                    batches,
                    steps,
                    device=device,
                    non_blocking=cuda,
                )

            one_window()  # creates the optimizer state, so the peak below includes it
            with track_cuda_peak(device) as peak:
                one_window()
            speed = samples_per_second(one_window, effective_batch_size, repeats=3, progress=False)
            runs.append(GpuRun(micro, accum_steps, peak.peak_bytes, speed))
            del model, optimizer
            if cuda:
                torch.cuda.empty_cache()
            bar.step(f"micro-batch {micro} x {accum_steps}: {speed:,.0f} samples/s")
    return runs


def accumulation_on_gpu(
    effective_batch_size: int = 1024, micro_batch_sizes: tuple[int, ...] = (1024, 256, 64, 16)
) -> list[GpuRun] | None:
    """:func:`measure_accumulation` on the CUDA GPU; None (say :data:`NO_GPU`) without one."""
    if not torch.cuda.is_available():
        return None
    return measure_accumulation(torch.device("cuda"), effective_batch_size, micro_batch_sizes)
