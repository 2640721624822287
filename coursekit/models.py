"""Tiny models for the exercises: small enough for a laptop CPU, real enough to measure."""

from __future__ import annotations

import math

import torch
from torch import nn

from coursekit.arguments import choice, whole
from coursekit.environment import seeded

NORMS = ("batch", "group", "layer", "none")


def norm_layer(kind: str, channels: int, dims: int = 1, groups: int = 4) -> nn.Module:
    """A normalisation layer by name, for ``(N, C)`` (``dims=1``) or ``(N, C, H, W)`` inputs.

    ``"batch"`` normalises each channel over the batch (and positions): it mixes samples.
    ``"group"`` and ``"layer"`` normalise each sample on its own: ``"layer"`` is GroupNorm
    with one group on images (all of a sample's channels and positions) and LayerNorm on
    vectors. ``"none"`` is the identity.
    """
    kind = choice("kind", kind, NORMS)
    channels, dims = whole("channels", channels), choice("dims", whole("dims", dims), (1, 2))
    groups = whole("groups", groups)
    if kind == "batch":
        return nn.BatchNorm1d(channels) if dims == 1 else nn.BatchNorm2d(channels)
    if kind == "group":
        return nn.GroupNorm(math.gcd(groups, channels), channels)
    if kind == "layer":
        return nn.LayerNorm(channels) if dims == 1 else nn.GroupNorm(1, channels)
    if kind == "none":
        return nn.Identity()
    raise ValueError(f"norm must be one of {', '.join(NORMS)}; got {kind!r}.")


def tiny_mlp(
    in_features: int = 8,
    hidden: int = 32,
    out_features: int = 1,
    depth: int = 2,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    norm: str = "none",
) -> nn.Sequential:
    """A ``depth``-layer MLP with Tanh activations, initialised from ``seed``.

    Tanh (rather than ReLU) saves its output for backward, so activation memory grows
    visibly with every layer. The seed is applied locally: two calls with the same
    arguments give identical weights, which the accumulation-vs-full-batch comparisons need.
    ``norm`` (see :func:`norm_layer`) puts a normalisation after every hidden Linear.
    """
    in_features, hidden = whole("in_features", in_features), whole("hidden", hidden)
    out_features, depth = whole("out_features", out_features), whole("depth", depth)
    seed, norm = whole("seed", seed, minimum=None), choice("norm", norm, NORMS)
    with seeded(seed):
        layers: list[nn.Module] = []
        width = in_features
        for _ in range(depth - 1):
            layers.append(nn.Linear(width, hidden))
            if norm != "none":
                layers.append(norm_layer(norm, hidden))
            layers.append(nn.Tanh())
            width = hidden
        layers.append(nn.Linear(width, out_features))
        model = nn.Sequential(*layers).to(dtype)
    return model


def tiny_lm(
    vocab_size: int = 32, dim: int = 16, seed: int = 0, dtype: torch.dtype = torch.float32
) -> nn.Sequential:
    """A bigram language model: token ids ``(batch, seq)`` to logits ``(batch, seq, vocab)``.

    An embedding and one linear layer predict each next token from the current one. That is
    all the course's token exercises need: a loss per real token, padding to skip, and
    micro-batches whose token counts differ. Initialised from ``seed``, locally.
    """
    vocab_size, dim = whole("vocab_size", vocab_size), whole("dim", dim)
    seed = whole("seed", seed, minimum=None)
    with seeded(seed):
        model = nn.Sequential(nn.Embedding(vocab_size, dim), nn.Linear(dim, vocab_size))
    return model.to(dtype)


def tiny_cnn(
    norm: str = "batch",
    width: int = 8,
    n_classes: int = 4,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> nn.Sequential:
    """A small image classifier for ``(N, 1, H, W)`` inputs, with ``norm`` layers throughout.

    Two conv blocks (conv, norm, ReLU, max-pool), global average pooling, then a head:
    Linear, norm, ReLU, Linear. The head's norm sees one value per sample and channel, so a
    BatchNorm there normalises over the micro-batch alone: the place small micro-batches hurt.
    """
    norm, width = choice("norm", norm, NORMS), whole("width", width)
    n_classes, seed = whole("n_classes", n_classes), whole("seed", seed, minimum=None)
    with seeded(seed):
        model = nn.Sequential(
            nn.Conv2d(1, width, 3, padding=1),
            norm_layer(norm, width, dims=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1),
            norm_layer(norm, 2 * width, dims=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(2 * width, 4 * width),
            norm_layer(norm, 4 * width),
            nn.ReLU(),
            nn.Linear(4 * width, n_classes),
        )
    return model.to(dtype)
