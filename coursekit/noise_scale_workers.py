"""The noise scale under DDP, almost for free (started by ``run_workers``).

Each rank's gradient before the all-reduce is a small batch's (b samples), the all-reduced
mean is the big batch's (B = b * world_size): the two sizes the two-batch estimate needs.
A DDP communication hook sees each gradient bucket just before it is all-reduced, so it can
add up the local squared norm on the way through: no extra backward pass, one extra scalar
all-reduce per measurement.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from coursekit.data import make_regression
from coursekit.models import tiny_mlp
from coursekit.noise_scale import estimate_from_per_sample, two_batch_estimate


@dataclass
class LocalNorm:
    """What :func:`local_norm_hook` adds up: this rank's squared gradient norm, before the
    all-reduce (reset it before each backward)."""

    sq_norm: float = 0.0


# no annotations: DDP compares them with dist.GradBucket, and under
# `from __future__ import annotations` they would be strings
def local_norm_hook(state, bucket):
    """A DDP communication hook (``ddp.register_comm_hook(LocalNorm(), local_norm_hook)``):
    the default mean all-reduce, which first adds the bucket's local squared norm to
    ``state.sq_norm``."""
    buffer = bucket.buffer()
    state.sq_norm += float(buffer.double().pow(2).sum())
    buffer.div_(dist.get_world_size())
    work = dist.all_reduce(buffer, async_op=True)
    return work.get_future().then(lambda future: future.value()[0])


def ddp_noise_estimate(
    rank: int,
    world_size: int,
    micro_batch_size: int = 8,
    in_features: int = 8,
    hidden: int = 16,
    seed: int = 0,
) -> dict:
    """One DDP backward on each rank's own ``micro_batch_size`` samples, measured.

    The data is ``make_regression(micro_batch_size * world_size, seed=seed)`` split in rank
    order, so every rank can rebuild all of it. Everything is float64, so the estimate and
    the per-sample oracle agree to ~1e-12. Returns this rank's local squared norm, the
    mean of all ranks' (the small batch's), the all-reduced one (the big batch's), the
    two-batch estimate, and on rank 0 the oracle, :func:`estimate_from_per_sample` with the
    ranks' batches as its micro-batches.
    """
    model = tiny_mlp(in_features, hidden, depth=2, seed=seed, dtype=torch.float64)
    inputs, targets = make_regression(
        micro_batch_size * world_size, in_features, seed=seed, dtype=torch.float64
    )
    batches = [
        (
            inputs[r * micro_batch_size : (r + 1) * micro_batch_size],
            targets[r * micro_batch_size : (r + 1) * micro_batch_size],
        )
        for r in range(world_size)
    ]
    loss_fn = nn.MSELoss()
    ddp = DistributedDataParallel(model)
    local_norm = LocalNorm()
    ddp.register_comm_hook(local_norm, local_norm_hook)
    local_inputs, local_targets = batches[rank]
    loss_fn(ddp(local_inputs), local_targets).backward()
    local = torch.tensor(local_norm.sq_norm, dtype=torch.float64)
    dist.all_reduce(local)  # the small batches' mean: one scalar on the wire
    small = float(local) / world_size
    big = float(sum(p.grad.double().pow(2).sum() for p in model.parameters()))
    estimate = two_batch_estimate(small, big, micro_batch_size, micro_batch_size * world_size)
    result = {
        "rank": rank,
        "local_sq_norm": local_norm.sq_norm,
        "small_sq_norm": small,
        "big_sq_norm": big,
        "estimate": estimate.as_dict(),
    }
    if rank == 0:
        model.zero_grad(set_to_none=True)
        result["oracle"] = estimate_from_per_sample(model, loss_fn, batches).as_dict()
    return result
