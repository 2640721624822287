"""When samples depend on each other: BatchNorm and accumulation, measured and repaired.

Accumulation is exact only when every sample's loss depends on that sample alone. A
BatchNorm layer in train mode normalises with the statistics of its (micro-)batch, so each
sample's output depends on the others: N micro-batches give another gradient than one
batch. This module measures that, corrects the running statistics' momentum, converts
BatchNorm to GroupNorm, and freezes BatchNorm for fine-tuning.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import nn

from coursekit.arguments import real, whole
from coursekit.gradients import flat_gradient, full_batch_gradient, relative_error


def depends_on_other_samples(model: nn.Module, inputs: torch.Tensor) -> float:
    """How much sample 0's output moves with the *other* samples' inputs (0.0: not at all).

    The largest ``|d output[0] / d inputs[j]|`` over ``j > 0``. Exactly zero for models
    whose samples are independent (Linear, convolutions, Dropout, LayerNorm, GroupNorm, and
    BatchNorm in eval mode); non-zero for BatchNorm in train mode. The model is left as it was.
    """
    model = copy.deepcopy(model)
    inputs = inputs.detach().clone().requires_grad_(True)
    model(inputs)[0].sum().backward()
    return float(inputs.grad[1:].abs().max())


@dataclass(frozen=True)
class GradientGap:
    """How far an accumulated gradient is from the full-batch one."""

    relative_error: float  # max |accumulated - full| / max |full|
    cosine: float  # 1.0 when they point the same way


def accumulated_gradient(
    model: nn.Module,
    loss_fn: Callable,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    micro_batch_size: int,
) -> torch.Tensor:
    """The gradient of equal-sized micro-batches accumulated, on a copy of ``model``."""
    model = copy.deepcopy(model)
    model.zero_grad(set_to_none=True)
    chunks = list(zip(inputs.split(micro_batch_size), targets.split(micro_batch_size), strict=True))
    for x, y in chunks:
        (loss_fn(model(x), y) * len(y) / len(targets)).backward()
    return flat_gradient(model.parameters())


def gradient_gap(
    model: nn.Module,
    loss_fn: Callable,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    micro_batch_size: int,
) -> GradientGap:
    """Accumulated against full-batch gradient, both from the same weights and data."""
    full = full_batch_gradient(model, loss_fn, inputs, targets)
    accumulated = accumulated_gradient(model, loss_fn, inputs, targets, micro_batch_size)
    cosine = torch.nn.functional.cosine_similarity(accumulated, full, dim=0)
    return GradientGap(relative_error(accumulated, full), float(cosine))


def batch_norms(model: nn.Module) -> Iterator[nn.modules.batchnorm._BatchNorm]:
    """Every BatchNorm layer (1d, 2d, 3d, and SyncBatchNorm) in ``model``, nested ones too."""
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            yield module


def corrected_momentum(momentum: float, accum_steps: int) -> float:
    """The momentum that, applied ``accum_steps`` times, weighs the window as ``momentum``
    applied once: ``1 - (1 - momentum) ** (1 / accum_steps)``.

    Example:
        >>> round(corrected_momentum(0.1, 4), 5)
        0.02600
    """
    momentum = real("momentum", momentum, 0, 1)
    accum_steps = whole("accum_steps", accum_steps)
    return 1.0 - (1.0 - momentum) ** (1.0 / accum_steps)


def set_accumulation_momentum(model: nn.Module, accum_steps: int) -> None:
    """Correct every BatchNorm's momentum for ``accum_steps`` updates per optimizer step.

    ``momentum=None`` (a cumulative average over all batches) has nothing to correct and is
    left alone.
    """
    accum_steps = whole("accum_steps", accum_steps)
    for layer in batch_norms(model):
        if layer.momentum is not None:
            layer.momentum = corrected_momentum(layer.momentum, accum_steps)


def convert_batchnorm(model: nn.Module, num_groups: int) -> nn.Module:
    """Replace every BatchNorm with ``GroupNorm(num_groups, channels)``, keeping its eps, dtype,
    device and affine weight and bias (weight 1 and bias 0 for one built with
    ``affine=False``); nested layers too. Returns ``model`` (changed in place).
    """
    for name, child in model.named_children():
        if isinstance(child, nn.modules.batchnorm._BatchNorm):
            group_norm = nn.GroupNorm(num_groups, child.num_features, eps=child.eps)
            like = child.weight if child.affine else child.running_mean
            if like is not None:  # affine=False without running statistics has no tensor
                group_norm = group_norm.to(device=like.device, dtype=like.dtype)
            if child.affine:
                with torch.no_grad():
                    group_norm.weight.copy_(child.weight)
                    group_norm.bias.copy_(child.bias)
            setattr(model, name, group_norm)
        else:
            convert_batchnorm(child, num_groups)
    return model


def freeze_batchnorm(model: nn.Module) -> nn.Module:
    """Put every BatchNorm in eval mode: it normalises with its running statistics, which
    no longer change, so samples stop depending on each other.

    ``model.train()`` puts them back in train mode: call this again after it.
    """
    for layer in batch_norms(model):
        layer.eval()
    return model


@dataclass(frozen=True)
class BatchNormReport:
    """One setting of the BatchNorm explorer: gradient gap and running-statistics drift."""

    gap: GradientGap
    window_weight: float | None  # what the newest window weighs in the running stats
    running_mean_gap: float | None  # accumulated vs one-batch running mean, relative


def batchnorm_report(
    micro_batch_size: int, accum_steps: int, norm: str = "batch", corrected: bool = False
) -> BatchNormReport:
    """Accumulate ``accum_steps`` micro-batches on a small float64 MLP with ``norm`` layers
    and compare with one batch of the same samples: gradient, and running statistics.

    With ``corrected=True`` the BatchNorm momentum is set by :func:`set_accumulation_momentum`.
    """
    from coursekit.data import make_regression
    from coursekit.models import tiny_mlp

    model = tiny_mlp(in_features=8, hidden=16, depth=3, norm=norm, seed=0, dtype=torch.float64)
    batch = micro_batch_size * accum_steps
    inputs, targets = make_regression(batch, in_features=8, seed=1, dtype=torch.float64)
    gap = gradient_gap(model, nn.MSELoss(), inputs, targets, micro_batch_size)
    layers = list(batch_norms(model))
    if not layers:
        return BatchNormReport(gap, None, None)
    accumulated, single = copy.deepcopy(model), copy.deepcopy(model)
    if corrected:
        set_accumulation_momentum(accumulated, accum_steps)
    with torch.no_grad():
        for chunk in inputs.split(micro_batch_size):
            accumulated(chunk)
        single(inputs)
    momentum = next(batch_norms(accumulated)).momentum
    weight = 1 - (1 - momentum) ** accum_steps
    means = [
        torch.cat([layer.running_mean for layer in batch_norms(net)])
        for net in (accumulated, single)
    ]
    return BatchNormReport(gap, weight, relative_error(means[0], means[1]))
