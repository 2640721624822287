"""Small data sets made on the spot (nothing is downloaded) and micro-batch splitting."""

from __future__ import annotations

import torch


def make_regression(
    n_samples: int,
    in_features: int = 8,
    out_features: int = 1,
    noise: float = 0.1,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and targets from a fixed random linear map plus Gaussian noise.

    The generator is local, so the same seed gives the same data whatever else the
    notebook has drawn: accumulated and full-batch runs can be compared sample for sample.
    """
    generator = torch.Generator().manual_seed(seed)
    weight = torch.randn(in_features, out_features, generator=generator, dtype=dtype)
    inputs = torch.randn(n_samples, in_features, generator=generator, dtype=dtype)
    targets = inputs @ weight + noise * torch.randn(
        n_samples, out_features, generator=generator, dtype=dtype
    )
    return inputs, targets


def make_classification(
    n_samples: int,
    in_features: int = 16,
    n_classes: int = 4,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gaussian blobs, one per class: a task a tiny MLP learns in a few hundred steps."""
    generator = torch.Generator().manual_seed(seed)
    centres = 2.0 * torch.randn(n_classes, in_features, generator=generator, dtype=dtype)
    labels = torch.randint(0, n_classes, (n_samples,), generator=generator)
    inputs = centres[labels] + torch.randn(n_samples, in_features, generator=generator, dtype=dtype)
    return inputs, labels


def split_micro_batches(
    inputs: torch.Tensor, targets: torch.Tensor, micro_batch_size: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Consecutive ``(inputs, targets)`` micro-batches; the last one may be smaller.

    Example:
        >>> x, y = make_regression(10)
        >>> [len(xb) for xb, _ in split_micro_batches(x, y, 4)]
        [4, 4, 2]
    """
    if micro_batch_size < 1:
        raise ValueError(f"micro_batch_size must be at least 1, got {micro_batch_size}.")
    if len(inputs) != len(targets):
        raise ValueError(f"inputs and targets differ in length ({len(inputs)} vs {len(targets)}).")
    return [
        (inputs[start : start + micro_batch_size], targets[start : start + micro_batch_size])
        for start in range(0, len(inputs), micro_batch_size)
    ]
