"""Padded token batches for a tiny language model, and the loss normalised per real token.

A language model's batch holds sequences of different lengths padded to one length; the
padding positions carry the label ``IGNORE_INDEX`` (-100), which ``cross_entropy`` skips.
So the number of tokens that count differs from micro-batch to micro-batch, and the right
loss for a window is the sum over all its real tokens divided by the window's token count.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.nn import functional

from coursekit.arguments import real as real_number
from coursekit.arguments import whole

IGNORE_INDEX = -100
PAD = 0  # the input id at padding positions (its label is IGNORE_INDEX)
BOS = 1  # every sequence starts with it; real tokens are 2 .. vocab_size - 1

TokenBatch = tuple[torch.Tensor, torch.Tensor]

#: How a window's micro-batch losses are turned into one loss, right and wrong.
NORMALISATIONS = {
    "tokens": "sum over the window's tokens / the window's token count (right)",
    "mean_of_means": "each micro-batch's mean loss / number of micro-batches (the 2024 bug)",
    "padding_counted": "sum over tokens / label positions, padding included",
    "not_divided": "each micro-batch's mean loss, added up without dividing",
}


def make_token_batches(
    n_sequences: int,
    seq_len: int = 16,
    vocab_size: int = 32,
    padding_ratio: float = 0.5,
    seed: int = 0,
) -> TokenBatch:
    """``(inputs, labels)`` of shape ``(n_sequences, seq_len)``: next-token prediction, padded.

    Sequences come from a fixed Markov chain: after ``BOS`` the first token is uniform (hard
    to predict), each later token follows its predecessor's favourite successor 80% of the
    time (easy). So short sequences have a higher loss per token, as real text does near its
    start, and a normalisation that over-weights short sequences shows up in the loss.
    Lengths are uniform around ``seq_len * (1 - padding_ratio)``; the generator is local.

    Example:
        >>> inputs, labels = make_token_batches(4, seq_len=8, seed=1)
        >>> inputs.shape, int((labels != IGNORE_INDEX).sum()) <= 32
        (torch.Size([4, 8]), True)
    """
    n_sequences, seq_len = whole("n_sequences", n_sequences), whole("seq_len", seq_len)
    vocab_size = whole("vocab_size", vocab_size)
    if vocab_size < 4:
        raise ValueError(
            f"vocab_size must be at least 4 (pad, bos and two tokens), got {vocab_size}."
        )
    padding_ratio = real_number("padding_ratio", padding_ratio, 0, 1, high_open=True)
    seed = whole("seed", seed, minimum=None)
    generator = torch.Generator().manual_seed(seed)
    chain = torch.Generator().manual_seed(1234)  # the same language for every seed
    real = vocab_size - 2
    favourite = torch.randperm(real, generator=chain) + 2
    mean_length = seq_len * (1.0 - padding_ratio)
    low = max(1, round(2 * mean_length) - seq_len)
    high = max(low, min(seq_len, round(2 * mean_length) - 1))
    inputs = torch.full((n_sequences, seq_len), PAD, dtype=torch.long)
    labels = torch.full((n_sequences, seq_len), IGNORE_INDEX, dtype=torch.long)
    for row in range(n_sequences):
        length = int(torch.randint(low, high + 1, (1,), generator=generator))
        tokens = [BOS, int(torch.randint(2, vocab_size, (1,), generator=generator))]
        while len(tokens) < length + 1:
            if torch.rand(1, generator=generator).item() < 0.8:
                tokens.append(int(favourite[tokens[-1] - 2]))
            else:
                tokens.append(int(torch.randint(2, vocab_size, (1,), generator=generator)))
        inputs[row, :length] = torch.tensor(tokens[:-1])
        labels[row, :length] = torch.tensor(tokens[1:])
    return inputs, labels


def split_token_batches(
    inputs: torch.Tensor, labels: torch.Tensor, sizes: Sequence[int]
) -> list[TokenBatch]:
    """Consecutive micro-batches of the given numbers of sequences (they may differ)."""
    sizes = [whole("each of sizes", size) for size in sizes]
    if sum(sizes) != len(inputs):
        raise ValueError(f"sizes {list(sizes)} must be positive and add up to {len(inputs)}.")
    batches, start = [], 0
    for size in sizes:
        batches.append((inputs[start : start + size], labels[start : start + size]))
        start += size
    return batches


def count_tokens(labels: torch.Tensor) -> int:
    """The number of label positions that count (not ``IGNORE_INDEX``)."""
    return int((labels != IGNORE_INDEX).sum())


def lm_loss(logits: torch.Tensor, labels: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Cross-entropy of ``(batch, seq, vocab)`` logits against ``(batch, seq)`` labels.

    Padding (``IGNORE_INDEX``) is skipped. ``"mean"`` divides by this batch's real tokens,
    ``"sum"`` does not divide: the building block of a window-wide normalisation.
    """
    return functional.cross_entropy(
        logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX, reduction=reduction
    )


def accumulate_tokens(
    model: torch.nn.Module, micro_batches: Sequence[TokenBatch], normalisation: str = "tokens"
) -> float:
    """Forward and backward over one window; return the loss a trainer would log for it.

    With ``normalisation="tokens"`` (right) each micro-batch contributes its summed loss
    divided by the token count of the whole window, so ``.grad`` holds the gradient of the
    mean loss per real token of the window, whatever the micro-batches' sizes. The other
    values of :data:`NORMALISATIONS` reproduce the mistakes, for demonstrations and checks.
    """
    if normalisation not in NORMALISATIONS:
        raise ValueError(f"normalisation must be one of {sorted(NORMALISATIONS)}.")
    window_tokens = sum(count_tokens(labels) for _, labels in micro_batches)
    positions = sum(labels.numel() for _, labels in micro_batches)
    logged = 0.0
    for inputs, labels in micro_batches:
        logits = model(inputs)
        if normalisation == "tokens":
            loss = lm_loss(logits, labels, "sum") / window_tokens
        elif normalisation == "padding_counted":
            loss = lm_loss(logits, labels, "sum") / positions
        elif normalisation == "mean_of_means":
            loss = lm_loss(logits, labels) / len(micro_batches)
        else:
            loss = lm_loss(logits, labels)
        loss.backward()
        logged += loss.item()
    return logged


def train_token_lm(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    micro_batches: Sequence[TokenBatch],
    accum_steps: int,
    normalisation: str = "tokens",
) -> list[float]:
    """One pass, one optimizer step per window of ``accum_steps``; the logged loss per step."""
    losses = []
    for start in range(0, len(micro_batches), accum_steps):
        losses.append(
            accumulate_tokens(model, micro_batches[start : start + accum_steps], normalisation)
        )
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return losses


def global_token_scale(local_token_counts: Sequence[int]) -> float:
    """What this rank multiplies each micro-batch's *summed* token loss by under DDP.

    DDP averages the ranks' gradients, so the window's per-token mean over all ranks needs
    ``world_size / global_count``, where the global count is every rank's real tokens of this
    window added up: one ``all_reduce`` of this rank's total, before the first backward.
    Dividing by this rank's own count instead is the mean of means across ranks
    (transformers #34242). Without a process group the world is this one process.

    Example:
        >>> global_token_scale([30, 10])  # one process: 1 / 40
        0.025
    """
    import torch.distributed as dist

    if isinstance(local_token_counts, str | bytes) or not hasattr(local_token_counts, "__iter__"):
        raise TypeError(
            "local_token_counts must be a list of this rank's real-token counts, one per "
            f"micro-batch (e.g. [count_tokens(y) for _, y in micro_batches]); got "
            f"{local_token_counts!r}."
        )
    counts = [whole("each token count", count, minimum=0) for count in local_token_counts]
    total = torch.tensor(float(sum(counts)), dtype=torch.float64)
    world_size = 1
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(total)  # the sum over the ranks, one collective for the window
        world_size = dist.get_world_size()
    if total.item() == 0:
        raise ValueError("No real token in the window on any rank: there is nothing to average.")
    return world_size / total.item()
