"""Small data sets made on the spot (nothing is downloaded) and micro-batch splitting."""

from __future__ import annotations

import torch

from coursekit.arguments import real, whole


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
    n_samples, in_features = whole("n_samples", n_samples), whole("in_features", in_features)
    out_features = whole("out_features", out_features)
    noise, seed = real("noise", noise, 0), whole("seed", seed, minimum=None)
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
    n_samples, in_features = whole("n_samples", n_samples), whole("in_features", in_features)
    n_classes, seed = whole("n_classes", n_classes), whole("seed", seed, minimum=None)
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
    micro_batch_size = whole("micro_batch_size", micro_batch_size)
    if len(inputs) != len(targets):
        raise ValueError(f"inputs and targets differ in length ({len(inputs)} vs {len(targets)}).")
    return [
        (inputs[start : start + micro_batch_size], targets[start : start + micro_batch_size])
        for start in range(0, len(inputs), micro_batch_size)
    ]


def make_images(
    n_images: int,
    size: int = 12,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Grey-scale stripe images ``(n, 1, size, size)`` in 4 classes by stripe direction.

    Classes: vertical, horizontal and the two diagonals. Each image has its own phase,
    frequency, contrast and brightness, plus pixel noise, so a small CNN needs a few
    epochs to learn them, and the images of a batch differ as real photos do.
    """
    n_images, size = whole("n_images", n_images), whole("size", size)
    seed = whole("seed", seed, minimum=None)
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 4, (n_images,), generator=generator)
    rows, cols = torch.meshgrid(
        torch.arange(size, dtype=dtype), torch.arange(size, dtype=dtype), indexing="ij"
    )
    directions = torch.stack([cols, rows, (cols + rows) / 2**0.5, (cols - rows) / 2**0.5])
    phase = 2 * torch.pi * torch.rand(n_images, 1, 1, generator=generator, dtype=dtype)
    frequency = 0.8 + 0.4 * torch.rand(n_images, 1, 1, generator=generator, dtype=dtype)
    contrast = 0.3 + 1.2 * torch.rand(n_images, 1, 1, generator=generator, dtype=dtype)
    brightness = 2 * torch.randn(n_images, 1, 1, generator=generator, dtype=dtype)
    noise = 0.5 * torch.randn(n_images, size, size, generator=generator, dtype=dtype)
    stripes = torch.sin(frequency * directions[labels] + phase)
    return (brightness + contrast * stripes + noise).unsqueeze(1), labels
