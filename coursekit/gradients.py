"""Gradients as single vectors, so "equal to the full batch" is one comparison."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable

import torch
from torch import nn


def flat_gradient(parameters: Iterable[nn.Parameter]) -> torch.Tensor | None:
    """All gradients as one float64 vector (missing ones as zeros); None when none exist."""
    parameters = list(parameters)
    grads = [p.grad for p in parameters]
    if all(g is None for g in grads):
        return None
    return torch.cat(
        [
            (g if g is not None else torch.zeros_like(p)).detach().double().flatten()
            for p, g in zip(parameters, grads, strict=True)
        ]
    )


def full_batch_gradient(
    model: nn.Module,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    inputs: torch.Tensor,
    targets: torch.Tensor,
) -> torch.Tensor:
    """The gradient of the mean loss over the whole batch, computed on a copy of ``model``.

    This is the oracle every accumulation is compared against; the model passed in keeps
    its gradients untouched.
    """
    model = copy.deepcopy(model)
    model.zero_grad(set_to_none=True)
    loss_fn(model(inputs), targets).backward()
    return flat_gradient(model.parameters())


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """``max|actual - expected| / max|expected|``: one scale-free number.

    Example:
        >>> round(relative_error(torch.tensor([1.0, 2.02]), torch.tensor([1.0, 2.0])), 6)
        0.01
    """
    if actual.shape != expected.shape:
        shapes = f"{tuple(actual.shape)} and {tuple(expected.shape)}"
        raise ValueError(f"Cannot compare tensors of shapes {shapes}.")
    scale = expected.abs().max().double().clamp(min=torch.finfo(torch.float64).tiny)
    return float((actual.double() - expected.double()).abs().max() / scale)
