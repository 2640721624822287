"""What each micro-batch's loss must be multiplied by, and what the wrong factors cost.

A window's gradient should be the mean over all its samples (or tokens). With a loss that
averages over its micro-batch (``reduction="mean"``) the factor is the micro-batch's share
of the window; with a loss that adds up (``reduction="sum"``) it is one over the window's
size. Other factors are the bugs this module is about; :func:`normalisation_errors` puts a
number on each of them for the loss-scaling explorer.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

REDUCTIONS = ("mean", "sum")


def loss_scales(micro_batch_sizes: Sequence[int], reduction: str) -> list[float]:
    """One factor per micro-batch so the window's summed gradients are the mean gradient.

    Example:
        >>> loss_scales([4, 4, 2], "mean")
        [0.4, 0.4, 0.2]
        >>> loss_scales([4, 4, 2], "sum")
        [0.1, 0.1, 0.1]
    """
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}.")
    total = sum(micro_batch_sizes)
    if reduction == "mean":
        return [size / total for size in micro_batch_sizes]
    return [1 / total for _ in micro_batch_sizes]


def _window(accum_steps: int, padding_ratio: float, size_spread: float, seed: int):
    """Token losses of one window: a list (micro-batches) of lists (sequences) of tensors.

    Micro-batches hold 1 to 8 sequences (``size_spread`` from 0, all 4, to 1, anything in
    1..8); a sequence's length follows ``padding_ratio``; its first token is hard to predict
    (loss ~3.4) and the rest easy (~1.0), as in :func:`coursekit.tokens.make_token_batches`.
    """
    generator = torch.Generator().manual_seed(seed)
    seq_len = 32
    mean_length = seq_len * (1.0 - padding_ratio)
    window = []
    for _ in range(accum_steps):
        spread = round(3 * size_spread)
        size = 4 + int(torch.randint(-spread, spread + 1, (1,), generator=generator))
        sequences = []
        for _ in range(max(1, size)):
            low = max(1, round(mean_length * 0.25))
            high = max(low, min(seq_len, round(mean_length * 1.75)))
            length = int(torch.randint(low, high + 1, (1,), generator=generator))
            losses = 1.0 + 0.3 * torch.rand(length, generator=generator, dtype=torch.float64)
            losses[0] += 2.4
            sequences.append(losses)
        window.append(sequences)
    return window, seq_len


def normalisation_errors(
    accum_steps: int, padding_ratio: float, size_spread: float, seed: int = 0
) -> dict[str, float]:
    """Relative error of each way to normalise a window's loss, against the true token mean.

    Keys are the names in :data:`coursekit.tokens.NORMALISATIONS` plus ``"sequence_mean"``
    (the mean over sequences of each sequence's mean). The right one is always 0; the
    others depend on how unequal the micro-batches are and how much of them is padding.
    """
    window, seq_len = _window(accum_steps, padding_ratio, size_spread, seed)
    tokens = [torch.cat(sequences) for sequences in window]
    true_mean = float(torch.cat(tokens).sum() / sum(len(t) for t in tokens))
    positions = sum(len(sequences) * seq_len for sequences in window)
    estimates = {
        "tokens": float(sum(t.sum() for t in tokens)) / sum(len(t) for t in tokens),
        "mean_of_means": sum(float(t.mean()) for t in tokens) / len(tokens),
        "padding_counted": float(sum(t.sum() for t in tokens)) / positions,
        "sequence_mean": sum(float(s.mean()) for seqs in window for s in seqs)
        / sum(len(seqs) for seqs in window),
        "not_divided": sum(float(t.mean()) for t in tokens),
    }
    return {name: (value - true_mean) / true_mean for name, value in estimates.items()}
