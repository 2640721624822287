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

from coursekit.arguments import choice, whole

REDUCTIONS = ("mean", "sum")


def loss_scales(micro_batch_sizes: Sequence[int], reduction: str) -> list[float]:
    """One factor per micro-batch so the window's summed gradients are the mean gradient.

    Example:
        >>> loss_scales([4, 4, 2], "mean")
        [0.4, 0.4, 0.2]
        >>> loss_scales([4, 4, 2], "sum")
        [0.1, 0.1, 0.1]
    """
    reduction = choice("reduction", reduction, REDUCTIONS)
    micro_batch_sizes = [whole("each micro-batch size", size) for size in micro_batch_sizes]
    if not micro_batch_sizes:
        raise ValueError("micro_batch_sizes is empty: a window has at least one micro-batch.")
    total = sum(micro_batch_sizes)
    if reduction == "mean":
        return [size / total for size in micro_batch_sizes]
    return [1 / total for _ in micro_batch_sizes]


def _window(
    accum_steps: int, padding_ratio: float, micro_batch_size: int, size_spread: float, seed: int
):
    """Token losses of one window: a list (micro-batches) of lists (sequences) of tensors.

    Micro-batches hold ``micro_batch_size`` sequences, give or take ``size_spread`` of it;
    sequence lengths spread evenly around ``seq_len * (1 - padding_ratio)``. A sequence's
    first token is hard to predict (loss ~3.5) and the rest easy (~1.15), as in
    :func:`coursekit.tokens.make_token_batches`, so short sequences have a higher mean.
    """
    generator = torch.Generator().manual_seed(seed)
    seq_len = 32
    twice_mean = round(2 * seq_len * (1.0 - padding_ratio))
    low = max(1, twice_mean - seq_len)
    high = max(low, min(seq_len, twice_mean - 1))
    spread = round(size_spread * micro_batch_size)
    window = []
    for _ in range(accum_steps):
        size = micro_batch_size + int(torch.randint(-spread, spread + 1, (1,), generator=generator))
        sequences = []
        for _ in range(max(1, size)):
            length = int(torch.randint(low, high + 1, (1,), generator=generator))
            losses = 1.0 + 0.3 * torch.rand(length, generator=generator, dtype=torch.float64)
            losses[0] += 2.4
            sequences.append(losses)
        window.append(sequences)
    return window, seq_len


def normalisation_errors(
    accum_steps: int,
    padding_ratio: float,
    micro_batch_size: int = 4,
    size_spread: float = 0.0,
    seed: int = 0,
) -> dict[str, float]:
    """Relative error of each way to normalise a window's loss, against the true token mean.

    Keys are the names in :data:`coursekit.tokens.NORMALISATIONS` plus ``"sequence_mean"``
    (the mean over sequences of each sequence's mean). The right one is always 0; the
    others depend on how unequal the micro-batches are and how much of them is padding.
    """
    window, seq_len = _window(accum_steps, padding_ratio, micro_batch_size, size_spread, seed)
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
