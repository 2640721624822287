"""The whole recipe in one loop: what every earlier module taught, on a tiny GPT.

One optimizer step per window of micro-batches, and in each window:
- bf16 autocast for the forward pass on the CPU and on GPUs that compute in bf16 (no
  GradScaler needed: bf16 has float32's range), while the loss, the gradients and the
  weights stay float32;
- each micro-batch's summed token loss divided by the window's real-token count, so the
  window's gradient is the mean over its tokens whatever the padding (module 2);
- gradient clipping once, at the boundary, on the whole window's gradient;
- the optimizer, then the scheduler, stepped once: the schedule counts optimizer steps;
- the last, shorter window stepped like the others, normalised by its own token count;
- the logged loss is the window's true mean per token, not a micro-batch's or a scaled one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from coursekit.mixed_precision import has_native_bf16
from coursekit.progress import Progress
from coursekit.schedules import optimizer_steps, warmup_cosine
from coursekit.tokens import TokenBatch, count_tokens, lm_loss, split_token_batches
from coursekit.training import windows


def autocast_dtype(device: torch.device | str) -> torch.dtype | None:
    """``torch.bfloat16`` where autocast supports it on ``device``, else None (float32).

    CUDA GPUs from Ampere (compute capability 8.0) on compute in bf16; older ones (a T4,
    sm_75) only emulate it, slowly, although ``torch.cuda.is_bf16_supported()`` says yes there,
    so they get None (:func:`coursekit.mixed_precision.has_native_bf16`). PyTorch's CPU
    autocast supports bf16 everywhere (fast on CPUs with AVX-512 BF16 or AMX, emulated
    elsewhere). float16 is not offered here: its narrow range needs a GradScaler (module 2),
    which this loop does not have; module 7's recipe takes fp16 with one on such GPUs.
    """
    device = torch.device(device)
    if device.type == "cuda":
        return torch.bfloat16 if has_native_bf16(device) else None
    if device.type == "cpu":
        return torch.bfloat16
    return None


def recipe_window(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    window: Sequence[TokenBatch],
    max_norm: float,
    dtype: torch.dtype | None = None,
) -> float:
    """Train on one window of token micro-batches; return its mean loss per real token."""
    window_tokens = sum(count_tokens(labels) for _, labels in window)
    device_type = next(model.parameters()).device.type
    logged = torch.zeros((), device=next(model.parameters()).device)
    for inputs, labels in window:
        with torch.autocast(device_type, dtype=dtype, enabled=dtype is not None):
            logits = model(inputs)
        # the loss in float32, whatever autocast computed the logits in
        loss = lm_loss(logits.float(), labels, "sum") / window_tokens
        loss.backward()
        logged += loss.detach()  # stays on the device: no wait for the GPU per micro-batch
    nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return float(logged)


@dataclass
class RecipeRun:
    """What :func:`train_recipe` saw: one entry per optimizer step."""

    label: str
    losses: list[float] = field(default_factory=list)  # mean loss per real token of each window
    learning_rates: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)  # real tokens in each window
    seconds: float = 0.0


def train_recipe(
    model: nn.Module,
    inputs: torch.Tensor,
    labels: torch.Tensor,
    micro_batch_size: int,
    accum_steps: int,
    epochs: int = 1,
    lr: float = 3e-3,
    warmup_fraction: float = 0.1,
    max_norm: float = 1.0,
    dtype: torch.dtype | None = None,
    label: str = "",
    progress: bool = True,
    window_fn: Callable = recipe_window,
) -> RecipeRun:
    """Train ``model`` on ``(inputs, labels)`` with the recipe, in order, one window per step.

    The schedule (warm-up, then cosine) is sized in optimizer steps: windows per epoch, the
    last shorter window included, times ``epochs``. AdamW with GPT-style betas. Sequences
    keep their order, so two runs with the same effective batch see the same windows.
    ``window_fn`` trains one window (the notebook passes the student's own). A progress bar
    (:class:`coursekit.progress.Progress`) shows the steps and the loss; ``progress=False``
    hides it.
    """
    device = next(model.parameters()).device
    sizes = [micro_batch_size] * (len(inputs) // micro_batch_size)
    if len(inputs) % micro_batch_size:
        sizes.append(len(inputs) % micro_batch_size)
    micro_batches = [
        (x.to(device), y.to(device)) for x, y in split_token_batches(inputs, labels, sizes)
    ]
    total = optimizer_steps(len(micro_batches), accum_steps, epochs)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.01)
    scheduler = warmup_cosine(optimizer, max(1, round(warmup_fraction * total)), total)
    run = RecipeRun(label or f"micro-batch {micro_batch_size} x {accum_steps}")
    start = time.perf_counter()
    with Progress(total, run.label, enabled=progress) as bar:
        for _ in range(epochs):
            for window in windows(micro_batches, accum_steps):
                run.learning_rates.append(optimizer.param_groups[0]["lr"])
                run.tokens.append(sum(count_tokens(y) for _, y in window))
                run.losses.append(window_fn(model, optimizer, scheduler, window, max_norm, dtype))
                bar.step(f"loss {run.losses[-1]:.3f}")
    run.seconds = time.perf_counter() - start
    return run
