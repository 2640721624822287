"""Loss scaling for fp16 with accumulation, and what fp16 does to small gradients.

fp16 has 5 exponent bits: values under 2**-24 (about 6e-8) round to zero, and under
2**-14 they keep fewer than 11 significant bits. Dividing the loss by N for accumulation
makes every gradient N times smaller still. ``torch.amp.GradScaler`` multiplies the loss by
a large power of two before backward so the gradients stay representable, and divides them
back (``unscale_``) before anything reads them. The pattern with accumulation is in
:func:`amp_window`; the PyTorch AMP notes ("Gradient accumulation") state the same.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import torch
from torch import nn

FP16_SMALLEST_SUBNORMAL = 2.0**-24
FP16_SMALLEST_NORMAL = 2.0**-14

Batch = tuple[torch.Tensor, torch.Tensor]


def amp_window(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    micro_batches: Sequence[Batch],
    max_norm: float,
) -> None:
    """One window of equal-sized micro-batches under a GradScaler, then one (clipped) step.

    ``scaler.scale(loss).backward()`` runs for every micro-batch, so every gradient that adds
    up is scaled by the same factor. ``unscale_``, clipping, ``step`` and ``update`` run once,
    at the window's end: ``unscale_`` divides the sum once and looks for inf/NaN, clipping
    must see the true gradients, and ``update`` changes the scale, which is only safe
    between windows. An inf in any micro-batch makes ``scaler.step`` skip the whole step;
    the gradients are cleared either way.
    """
    for inputs, targets in micro_batches:
        loss = loss_fn(model(inputs), targets) / len(micro_batches)
        scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)


def gradient_values(parameters: Iterable[nn.Parameter]) -> torch.Tensor:
    """Every gradient entry of ``parameters``, as one float64 vector."""
    return torch.cat([p.grad.detach().double().flatten() for p in parameters if p.grad is not None])


def fp16_lost_fraction(values: torch.Tensor) -> float:
    """The fraction of non-zero ``values`` that become zero when rounded to fp16.

    Example:
        >>> fp16_lost_fraction(torch.tensor([1e-3, 1e-9, 0.0]))
        0.5
    """
    nonzero = values[values != 0]
    if nonzero.numel() == 0:
        return 0.0
    return float((nonzero.half() == 0).double().mean())
