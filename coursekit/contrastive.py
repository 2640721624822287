"""A contrastive loss with in-batch negatives, and the two-pass fix that accumulates it.

InfoNCE scores each query against every key of the batch: its own key is the positive,
the other keys are negatives. Split the batch into micro-batches and each query only meets
its micro-batch's negatives: a different, easier loss. The representation cache of
GradCache (Gao et al. 2021, arXiv:2101.06983) gets the full-batch gradient with the memory
of one micro-batch: embed everything without a graph, compute the loss and its gradient
with respect to the embeddings, then re-embed each micro-batch with a graph and push that
cached gradient through it.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional

from coursekit.arguments import real, whole
from coursekit.environment import seeded


def make_pairs(
    n_pairs: int, in_features: int = 16, seed: int = 0, dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, torch.Tensor]:
    """Two noisy views (query, key) of ``n_pairs`` hidden points: row i of each is a pair."""
    n_pairs, in_features = whole("n_pairs", n_pairs), whole("in_features", in_features)
    seed = whole("seed", seed, minimum=None)
    generator = torch.Generator().manual_seed(seed)
    points = torch.randn(n_pairs, in_features, generator=generator, dtype=dtype)
    queries = points + 0.3 * torch.randn(n_pairs, in_features, generator=generator, dtype=dtype)
    keys = points + 0.3 * torch.randn(n_pairs, in_features, generator=generator, dtype=dtype)
    return queries, keys


def tiny_encoder(
    in_features: int = 16, out_features: int = 8, seed: int = 0, dtype: torch.dtype = torch.float32
) -> nn.Sequential:
    """An MLP that embeds queries and keys alike (one shared encoder)."""
    in_features = whole("in_features", in_features)
    out_features = whole("out_features", out_features)
    with seeded(seed):
        model = nn.Sequential(nn.Linear(in_features, 32), nn.Tanh(), nn.Linear(32, out_features))
    return model.to(dtype)


def info_nce(
    query_embeddings: torch.Tensor, key_embeddings: torch.Tensor, temperature: float = 0.1
) -> torch.Tensor:
    """Mean InfoNCE loss: query i against all keys, key i the positive, cosine similarity.

    Every key in the batch is a negative for every other query, so the loss of one pair
    depends on the whole batch: it does not split into micro-batches.
    """
    temperature = real("temperature", temperature, 0, low_open=True)
    queries = functional.normalize(query_embeddings, dim=1)
    keys = functional.normalize(key_embeddings, dim=1)
    logits = queries @ keys.T / temperature
    return functional.cross_entropy(logits, torch.arange(len(queries), device=logits.device))


def naive_accumulation(
    encoder: nn.Module,
    queries: torch.Tensor,
    keys: torch.Tensor,
    micro_batch_size: int,
    temperature: float = 0.1,
) -> float:
    """Plain accumulation of per-micro-batch InfoNCE: each query sees only its micro-batch's
    negatives. The wrong answer, for comparison; returns the accumulated loss."""
    chunks = list(zip(queries.split(micro_batch_size), keys.split(micro_batch_size), strict=True))
    total = 0.0
    for q, k in chunks:
        loss = info_nce(encoder(q), encoder(k), temperature) * len(q) / len(queries)
        loss.backward()
        total += loss.item()
    return total


def grad_cache_step(
    encoder: nn.Module,
    queries: torch.Tensor,
    keys: torch.Tensor,
    micro_batch_size: int,
    temperature: float = 0.1,
) -> float:
    """Leave the full-batch InfoNCE gradient in ``.grad``, one micro-batch graph at a time.

    Pass 1 embeds every micro-batch under ``no_grad`` (no activations kept); the loss over
    all embeddings gives the gradient with respect to each embedding; pass 2 re-embeds each
    micro-batch with a graph and back-propagates its slice of that gradient. Returns the
    full-batch loss.
    """
    with torch.no_grad():
        query_cache = torch.cat([encoder(q) for q in queries.split(micro_batch_size)])
        key_cache = torch.cat([encoder(k) for k in keys.split(micro_batch_size)])
    query_cache.requires_grad_(True)
    key_cache.requires_grad_(True)
    loss = info_nce(query_cache, key_cache, temperature)
    loss.backward()  # reaches only the cached embeddings: they are leaves
    for inputs, cache in ((queries, query_cache), (keys, key_cache)):
        for chunk, gradient in zip(
            inputs.split(micro_batch_size), cache.grad.split(micro_batch_size), strict=True
        ):
            encoder(chunk).backward(gradient)
    return loss.item()
