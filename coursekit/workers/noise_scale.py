"""The noise scale under DDP, almost for free (started by ``run_workers``).

Each rank's gradient before the all-reduce is a small batch's (b samples), the all-reduced
mean is the big batch's (B = b * world_size): the two sizes the two-batch estimate needs.
:class:`coursekit.noise_scale.DDPNoiseScale` registers a DDP communication hook, which sees
each gradient bucket just before it is all-reduced and adds up the local squared norm on the
way through: no extra backward pass, one extra scalar all-reduce per measurement.
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from coursekit.data import make_regression
from coursekit.models import tiny_mlp
from coursekit.noise_scale import DDPNoiseScale, estimate_from_per_sample


def ddp_noise_estimate(
    rank: int,
    world_size: int,
    micro_batch_size: int = 8,
    accum_steps: int = 1,
    windows: int = 1,
    in_features: int = 8,
    hidden: int = 16,
    seed: int = 0,
) -> dict:
    """DDP windows of ``accum_steps`` micro-batches per rank, each window measured by a
    :class:`~coursekit.noise_scale.DDPNoiseScale`.

    Each window's data is ``make_regression`` of ``micro_batch_size * accum_steps *
    world_size`` samples (seeded by ``seed`` and the window), split in rank order, so every
    rank can rebuild all of it. The micro-batches but the last run under ``no_sync()``; the
    weights do not move between windows (no optimizer), so each window is a fresh measurement
    of the same model. Everything is float64, so the estimate and the per-sample oracle agree
    to ~1e-12. Returns, per window, this rank's local squared norm, the all-reduced one and
    the two-batch estimate; rank 0 also returns the oracles (:func:`estimate_from_per_sample`
    with the ranks' windows as its micro-batches) and the meter's average.
    """
    model = tiny_mlp(in_features, hidden, depth=2, seed=seed, dtype=torch.float64)
    loss_fn = nn.MSELoss()
    ddp = DistributedDataParallel(model)
    local_batch = micro_batch_size * accum_steps
    noise = DDPNoiseScale(ddp, local_batch_size=local_batch)
    measured, oracles = [], []
    for window in range(windows):
        inputs, targets = make_regression(
            local_batch * world_size, in_features, seed=seed + 1000 * window, dtype=torch.float64
        )
        ranks = [
            (
                inputs[r * local_batch : (r + 1) * local_batch],
                targets[r * local_batch : (r + 1) * local_batch],
            )
            for r in range(world_size)
        ]
        local_inputs, local_targets = ranks[rank]
        for step in range(accum_steps):
            part = slice(step * micro_batch_size, (step + 1) * micro_batch_size)
            last = step == accum_steps - 1
            with contextlib.nullcontext() if last else ddp.no_sync():
                loss = loss_fn(ddp(local_inputs[part]), local_targets[part]) / accum_steps
                loss.backward()
        local = float(noise._local)  # shown next to the estimate; measure() all-reduces it
        big = float(sum(p.grad.double().pow(2).sum() for p in model.parameters()))
        measured.append(
            {"local_sq_norm": local, "big_sq_norm": big, "estimate": noise.measure().as_dict()}
        )
        model.zero_grad(set_to_none=True)
        if rank == 0:
            oracles.append(estimate_from_per_sample(model, loss_fn, ranks).as_dict())
    result = {"rank": rank, **measured[0], "windows": measured}
    if rank == 0:
        result["oracle"] = oracles[0]
        result["oracles"] = oracles
        result["meter"] = noise.meter.estimate.as_dict()
    return result
