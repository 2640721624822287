"""Tiny models for the exercises: small enough for a laptop CPU, real enough to measure."""

from __future__ import annotations

import torch
from torch import nn


def tiny_mlp(
    in_features: int = 8,
    hidden: int = 32,
    out_features: int = 1,
    depth: int = 2,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> nn.Sequential:
    """A ``depth``-layer MLP with Tanh activations, initialised from ``seed``.

    Tanh (rather than ReLU) saves its output for backward, so activation memory grows
    visibly with every layer. The seed is applied locally: two calls with the same
    arguments give identical weights, which the accumulation-vs-full-batch comparisons need.
    """
    if depth < 1:
        raise ValueError(f"depth must be at least 1, got {depth}.")
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        layers: list[nn.Module] = []
        width = in_features
        for _ in range(depth - 1):
            layers += [nn.Linear(width, hidden), nn.Tanh()]
            width = hidden
        layers.append(nn.Linear(width, out_features))
        model = nn.Sequential(*layers).to(dtype)
    finally:
        torch.random.set_rng_state(state)
    return model


def tiny_lm(
    vocab_size: int = 32, dim: int = 16, seed: int = 0, dtype: torch.dtype = torch.float32
) -> nn.Sequential:
    """A bigram language model: token ids ``(batch, seq)`` to logits ``(batch, seq, vocab)``.

    An embedding and one linear layer predict each next token from the current one. That is
    all the course's token exercises need: a loss per real token, padding to skip, and
    micro-batches whose token counts differ. Initialised from ``seed``, locally.
    """
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Embedding(vocab_size, dim), nn.Linear(dim, vocab_size))
    finally:
        torch.random.set_rng_state(state)
    return model.to(dtype)
