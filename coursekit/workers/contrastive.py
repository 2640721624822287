"""In-batch negatives across data-parallel processes, with GradCache (module 3, section 7).

With data parallelism each process holds ``1 / P`` of the pairs. For every query to meet the
negatives of the *whole* batch, the processes exchange their embeddings (an all-gather). Two
things then decide whether the gradient is the full batch's:

- ``torch.distributed.all_gather`` returns plain tensors: no gradient flows back through
  them. A loss built only from gathered tensors never reaches this process's own embeddings.
  The usual fix (OpenCLIP's ``gather_features``) puts the local tensor, which has a graph,
  back in its own slot; ``torch.distributed.nn.functional.all_gather`` is the
  differentiable alternative.
- With GradCache the gathered tensors are cached embeddings anyway: pass 2 needs only the
  gradient with respect to this process's own embeddings, which the full loss gives once
  the local slot is the local leaf.

Each process then holds the gradient its own pairs contribute; summed over the processes it
is the full batch's. (DDP *averages*, so under DDP the step is ``1 / P`` of it unless each
process's loss is multiplied by ``P``.) The worker runs in processes that
:func:`coursekit.distributed.run_workers` started.
"""

from __future__ import annotations

import copy

import torch
import torch.distributed as dist

from coursekit.contrastive import info_nce, make_pairs, tiny_encoder
from coursekit.gradients import flat_gradient, relative_error

VARIANTS = ("local_negatives", "gathered_without_own_slot", "gathered")


def _gathered(cache: torch.Tensor, keep_own: bool) -> torch.Tensor:
    """Every process's cached embeddings, in rank order; this process's slot is ``cache``
    itself (a leaf that collects the gradient) when ``keep_own``."""
    slots = [torch.empty_like(cache) for _ in range(dist.get_world_size())]
    dist.all_gather(slots, cache.detach())
    if keep_own:
        slots[dist.get_rank()] = cache
    return torch.cat(slots)


def gathered_negatives_run(
    rank: int,
    world_size: int,
    *,
    pairs: int = 16,
    micro_batch_size: int = 2,
    temperature: float = 0.1,
    seed: int = 0,
) -> dict:
    """GradCache over ``world_size`` processes, three ways; each compared with the gradient of
    the whole batch on one process. Returns, per variant: how many keys each query met, the
    loss, and the relative gap of the summed gradient (or the error that stopped it)."""
    queries, keys = make_pairs(pairs, dtype=torch.float64, seed=seed)
    encoder = tiny_encoder(dtype=torch.float64, seed=seed + 1)
    whole_batch = copy.deepcopy(encoder)
    info_nce(whole_batch(queries), whole_batch(keys), temperature).backward()
    reference = flat_gradient(whole_batch.parameters())

    share = pairs // world_size
    own = slice(rank * share, (rank + 1) * share)
    my_queries, my_keys = queries[own], keys[own]
    results = {}
    for variant in VARIANTS:
        model = copy.deepcopy(encoder)
        with torch.no_grad():  # pass 1: embeddings only, no activations kept
            query_cache = torch.cat([model(q) for q in my_queries.split(micro_batch_size)])
            key_cache = torch.cat([model(k) for k in my_keys.split(micro_batch_size)])
        query_cache.requires_grad_(True)
        key_cache.requires_grad_(True)
        if variant == "local_negatives":
            all_queries, all_keys = query_cache, key_cache
        else:
            keep_own = variant == "gathered"
            all_queries = _gathered(query_cache, keep_own)
            all_keys = _gathered(key_cache, keep_own)
        loss = info_nce(all_queries, all_keys, temperature)
        try:
            loss.backward()
        except RuntimeError as error:
            results[variant] = {"keys_per_query": len(all_keys), "error": str(error)}
            continue
        for inputs, cache in ((my_queries, query_cache), (my_keys, key_cache)):  # pass 2
            slices = cache.grad.split(micro_batch_size)
            for chunk, gradient in zip(inputs.split(micro_batch_size), slices, strict=True):
                model(chunk).backward(gradient)
        gradient = flat_gradient(model.parameters())
        dist.all_reduce(gradient)  # the sum over the processes
        if variant == "local_negatives":
            gradient /= world_size  # each process's mean loss, averaged: data parallelism
        results[variant] = {
            "keys_per_query": len(all_keys),
            "loss": loss.item(),
            "gap": relative_error(gradient, reference),
        }
    return results
