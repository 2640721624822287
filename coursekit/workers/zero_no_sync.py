"""``no_sync`` with ZeRO-2 and 3 (module 4, pitfall 12): what DeepSpeed refuses, and why.

ZeRO-2 keeps on each of the P processes only its shard of the gradient, 1/P of it. So every
micro-batch's gradient is reduce-scattered as soon as backward produces it: each process adds
its averaged piece to its shard and frees the whole gradient. ``no_sync()`` would mean "skip
that reduction until the last micro-batch", and then every process must keep the whole,
unreduced gradient waiting, 1 psi instead of 1/P psi: the memory stage 2 exists to save.
DeepSpeed's engine refuses instead (``deepspeed/runtime/engine.py``, ``no_sync``, DeepSpeed
0.19.8)::

    AssertionError: no_sync context manager is incompatible with gradient partitioning
    logic of ZeRO stage 2

Two workers, each run by :func:`coursekit.distributed.run_workers`:

- :func:`zero2_model_run` is a *model* of ZeRO-2's gradient handling in plain
  ``torch.distributed``, not DeepSpeed, so that it runs anywhere. It shards per parameter
  (as FSDP2 does; DeepSpeed flattens all parameters into one buffer, cuts that, and reduces
  in buckets), which holds and moves the same amounts.
- :func:`deepspeed_run` builds DeepSpeed's real engine on the CPU (``DS_ACCELERATOR=cpu``, in
  the gloo group run_workers made) and calls ``no_sync()`` at each stage. It needs DeepSpeed
  installed; the course's own environment has none.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os

import torch
import torch.distributed as dist
from torch import nn

from coursekit.data import make_regression, split_micro_batches
from coursekit.distributed import CollectiveCounter, bytes_written
from coursekit.gradients import full_batch_gradient, relative_error
from coursekit.models import tiny_mlp

VARIANTS = ("zero2", "zero2_no_sync")


def _nbytes(tensor: torch.Tensor | None) -> int:
    return 0 if tensor is None else tensor.numel() * tensor.element_size()


class ShardedGradients:
    """ZeRO-2's gradients, modelled: each parameter's gradient is reduce-scattered the moment
    backward has accumulated it; this process keeps the mean of its 1/P piece, frees the
    whole one. While :attr:`reduce` is False (what ``no_sync`` asks for) the hook does
    nothing, so the whole gradient stays and accumulates in ``.grad``."""

    def __init__(self, model: nn.Module):
        self.parameters = list(model.parameters())
        self.shards: list[torch.Tensor | None] = [None] * len(self.parameters)
        self.reduce = True
        for index, parameter in enumerate(self.parameters):
            parameter.register_post_accumulate_grad_hook(
                lambda p, index=index: self._reduce_scatter(index, p)
            )

    def _reduce_scatter(self, index: int, parameter: nn.Parameter) -> None:
        if not self.reduce:
            return
        world_size = dist.get_world_size()
        whole = parameter.grad.detach().flatten()
        padded = nn.functional.pad(whole, (0, -whole.numel() % world_size))
        piece = padded.new_empty(padded.numel() // world_size)
        reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        reduce_scatter(piece, padded)  # looked up now, so CollectiveCounter sees it
        piece /= world_size  # the mean over processes, as data parallelism takes it
        shard = self.shards[index]
        self.shards[index] = piece if shard is None else shard.add_(piece)
        parameter.grad = None  # the whole gradient is gone: only the shard stays

    def held_bytes(self) -> int:
        """Gradient bytes this process holds now: whole ``.grad`` tensors plus its shards."""
        return sum(_nbytes(p.grad) for p in self.parameters) + sum(map(_nbytes, self.shards))

    def gathered(self) -> torch.Tensor:
        """The whole averaged gradient as one vector, gathered from every process's shards."""
        world_size = dist.get_world_size()
        all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        pieces = []
        for parameter, shard in zip(self.parameters, self.shards, strict=True):
            whole = shard.new_empty(shard.numel() * world_size)
            all_gather(whole, shard)
            pieces.append(whole[: parameter.numel()])
        return torch.cat(pieces)


def zero2_model_run(
    rank: int,
    world_size: int,
    accum_steps: int = 4,
    micro_batch_size: int = 8,
    seed: int = 0,
) -> dict:
    """One window of ``accum_steps`` micro-batches under the ZeRO-2 model, two ways: reducing
    every micro-batch (``"zero2"``, what stage 2 does), and skipping the reduction for all but
    the last (``"zero2_no_sync"``, what ``no_sync`` would mean).

    Returns the parameter bytes (psi) and, per variant, the gradient bytes this process held
    after each micro-batch, the reduce-scatters and the bytes they moved (the paper's units,
    :class:`~coursekit.distributed.CollectiveCounter`), and the relative gap between the
    gathered gradient and the full batch's on one process.
    """
    model = tiny_mlp(in_features=8, hidden=32, depth=3, seed=seed, dtype=torch.float64)
    per_rank = micro_batch_size * accum_steps
    inputs, targets = make_regression(per_rank * world_size, seed=seed + 1, dtype=torch.float64)
    full = full_batch_gradient(model, nn.MSELoss(), inputs, targets)
    mine = slice(rank * per_rank, (rank + 1) * per_rank)
    micro_batches = split_micro_batches(inputs[mine], targets[mine], micro_batch_size)
    results = {}
    for variant in VARIANTS:
        replica = copy.deepcopy(model)
        gradients = ShardedGradients(replica)
        held = []
        with CollectiveCounter() as counter:
            for index, (x, y) in enumerate(micro_batches):
                last = index == len(micro_batches) - 1
                gradients.reduce = last or variant == "zero2"
                (nn.functional.mse_loss(replica(x), y) / len(micro_batches)).backward()
                held.append(gradients.held_bytes())
        results[variant] = {
            "held_bytes": held,
            "reduce_scatters": sum(counter.calls.values()),
            "bytes_reduced": counter.total_bytes,
            "gap_to_full_batch": relative_error(gradients.gathered(), full),
        }
    return {
        "rank": rank,
        "parameter_bytes": sum(_nbytes(p) for p in model.parameters()),
        "variants": results,
    }


def _deepspeed_engine(stage: int, accum_steps: int, micro_batch_size: int, seed: int):
    """DeepSpeed's engine at ZeRO ``stage`` on the CPU, in the existing gloo group, and the
    model's parameter bytes (psi; stage 3 leaves the module only its shards)."""
    import deepspeed
    from deepspeed.utils import logger

    logger.setLevel(logging.WARNING)
    model = tiny_mlp(in_features=64, hidden=128, depth=3, seed=seed)
    psi = sum(_nbytes(p) for p in model.parameters())
    config = {
        "train_micro_batch_size_per_gpu": micro_batch_size,
        "gradient_accumulation_steps": accum_steps,
        "zero_optimization": {"stage": stage, "reduce_bucket_size": 100_000},
    }
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    engine, *_ = deepspeed.initialize(
        model=model, optimizer=optimizer, config=config, dist_init_required=False
    )
    return engine, psi


def _no_sync_outcome(engine) -> str:
    """``"ok"``, or the exception ``engine.no_sync()`` raised, as ``Type: message``."""
    try:
        with engine.no_sync():
            pass
    except Exception as error:  # DeepSpeed asserts
        return f"{type(error).__name__}: {error}"
    return "ok"


def _window(engine, psi: int, micro_batches, coalesce: bool) -> dict:
    """One optimizer step; bytes this process sent (per psi, measured on the sockets) and
    the ``.grad`` bytes left on the module's parameters after each micro-batch."""
    held = []
    dist.barrier()
    before = bytes_written()
    with engine.coalesce_grad_reduction() if coalesce else contextlib.nullcontext():
        for x, y in micro_batches:
            loss = nn.functional.mse_loss(engine(x), y)
            engine.backward(loss / len(micro_batches) if coalesce else loss)
            if not coalesce:
                engine.step()  # every micro-batch: DeepSpeed counts them, divides by N
            held.append(sum(_nbytes(p.grad) for p in engine.module.parameters()) / psi)
    if coalesce:
        engine.step()
    dist.barrier()
    after = bytes_written()
    sent = None if before is None else (after - before) / psi
    return {"grad_held_psi": held, "sent_psi": sent, "optimizer_steps": engine.global_steps}


def deepspeed_run(
    rank: int,
    world_size: int,
    stages: tuple[int, ...] = (0, 1, 2, 3),
    accum_steps: int = 4,
    micro_batch_size: int = 8,
    seed: int = 0,
) -> dict:
    """DeepSpeed's engine on the CPU at each ZeRO stage: what ``engine.no_sync()`` does, and
    one step of ``accum_steps`` micro-batches with DeepSpeed's own accumulation. At stage 2,
    where the engine has ``coalesce_grad_reduction()`` (an opt-in that defers the reduction
    to the end of the step), one step with it too. Needs DeepSpeed."""
    os.environ["DS_ACCELERATOR"] = "cpu"
    for name, value in (("RANK", rank), ("LOCAL_RANK", rank), ("WORLD_SIZE", world_size)):
        os.environ.setdefault(name, str(value))
    import deepspeed

    inputs, targets = make_regression(
        micro_batch_size * accum_steps, in_features=64, seed=seed + 1 + rank
    )
    micro_batches = split_micro_batches(inputs, targets, micro_batch_size)
    results: dict = {"rank": rank, "deepspeed": deepspeed.__version__, "stages": {}}
    for stage in stages:
        engine, psi = _deepspeed_engine(stage, accum_steps, micro_batch_size, seed)
        result = {
            "optimizer": type(engine.optimizer).__name__,
            "no_sync": _no_sync_outcome(engine),
            "accumulation": _window(engine, psi, micro_batches, coalesce=False),
        }
        if stage == 2 and hasattr(engine, "coalesce_grad_reduction"):
            engine, psi = _deepspeed_engine(stage, 1, micro_batch_size, seed)  # 1 step a block
            result["coalesced"] = _window(engine, psi, micro_batches, coalesce=True)
        results["stages"][stage] = result
    return results
