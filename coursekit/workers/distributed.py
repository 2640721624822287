"""What each process of a data-parallel experiment runs (started by run_workers).

Every function takes ``(rank, world_size, **settings)``, runs inside an initialised gloo
process group, and returns plain, picklable results. Data is made from seeds, so every rank
can rebuild every other rank's data and the full batch for comparisons.
"""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
from torch import nn

from coursekit.data import make_regression, split_micro_batches
from coursekit.distributed import CollectiveCounter, bytes_written
from coursekit.gradients import flat_gradient, full_batch_gradient, relative_error
from coursekit.models import tiny_lm, tiny_mlp
from coursekit.tokens import (
    count_tokens,
    global_token_scale,
    lm_loss,
    make_token_batches,
    split_token_batches,
)


def hello(rank: int, world_size: int) -> dict:
    """The smallest experiment: every rank adds its rank; all see the same sum."""
    total = torch.tensor(float(rank))
    dist.all_reduce(total)
    return {"rank": rank, "sum_of_ranks": int(total)}


def reference_ddp_window(model, loss_fn, micro_batches) -> None:
    """One window under DDP: forward and backward inside ``no_sync()`` for every micro-batch
    but the last, so the gradients are all-reduced once, during the last backward."""
    n = len(micro_batches)
    for index, (inputs, targets) in enumerate(micro_batches):
        last = index == n - 1
        with contextlib.nullcontext() if last else model.no_sync():
            (loss_fn(model(inputs), targets) / n).backward()


def _function_from_source(source: str, name: str):
    """The function ``name`` defined by ``source`` (see coursekit.distributed.function_source).

    A name the source uses but does not import fails here, with a hint, not deep in a
    multi-process traceback.
    """
    namespace = {"torch": torch, "nn": nn, "contextlib": contextlib, "dist": dist}
    try:
        exec(compile(source, f"<your {name}>", "exec"), namespace)  # the student's own cell
    except (ImportError, NameError) as error:
        raise RuntimeError(
            f"Your {name} could not be rebuilt in a worker process ({error}): import what it "
            "uses inside the function, or in the same cell."
        ) from None
    return namespace[name]


def ddp_window_run(
    rank: int,
    world_size: int,
    source: str | None = None,
    accum_steps: int = 4,
    micro_batch_size: int = 8,
    seed: int = 0,
    device: str = "cpu",
) -> dict:
    """Each rank accumulates its own micro-batches under DDP with ``ddp_window`` (the
    reference, or the student's from ``source``); compare with one process's full batch.

    ``device="cuda"`` puts each rank on its own GPU (under torchrun with NCCL).
    """
    window = reference_ddp_window if source is None else _function_from_source(source, "ddp_window")
    torch.manual_seed(seed)
    model = tiny_mlp(in_features=8, hidden=32, depth=3, seed=seed, dtype=torch.float64)
    per_rank = micro_batch_size * accum_steps
    inputs, targets = make_regression(per_rank * world_size, seed=seed + 1, dtype=torch.float64)
    full = full_batch_gradient(model, nn.MSELoss(), inputs, targets)
    mine = slice(rank * per_rank, (rank + 1) * per_rank)
    if device == "cuda":
        torch.cuda.set_device(rank % torch.cuda.device_count())
        model, inputs, targets = model.cuda(), inputs.cuda(), targets.cuda()
        ddp = nn.parallel.DistributedDataParallel(model, device_ids=[torch.cuda.current_device()])
        full = full.cuda()
    else:
        ddp = nn.parallel.DistributedDataParallel(model)
    counter = CollectiveCounter()
    ddp.register_comm_hook(None, counter.ddp_hook)
    window(ddp, nn.MSELoss(), split_micro_batches(inputs[mine], targets[mine], micro_batch_size))
    gradient = flat_gradient(ddp.module.parameters())
    return {
        "rank": rank,
        "all_reduces": counter.calls.get("all_reduce", 0),
        "gap_to_full_batch": relative_error(gradient, full),
        "backend": dist.get_backend(),
        "gradient_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
    }


def _rank_tokens(rank: int, seed: int):
    """Rank ``rank``'s 8 sequences: even ranks short ones (80% padding), odd ranks long ones."""
    padding_ratio = 0.8 if rank % 2 == 0 else 0.2
    return make_token_batches(8, seq_len=12, padding_ratio=padding_ratio, seed=seed + rank)


def token_scale_run(rank: int, world_size: int, source: str | None = None, seed: int = 7) -> dict:
    """Each rank accumulates its own token micro-batches under DDP, its summed losses scaled by
    ``global_token_scale`` (the reference, or the student's from ``source``), and compares the
    averaged gradient with the full batch's mean per token. For contrast it then does the same
    with each rank's own count, ``1 / own count``: DDP's average of the ranks' own means per
    token, the mean of means across ranks (transformers #34242)."""
    scale_of = (
        global_token_scale
        if source is None
        else _function_from_source(source, "global_token_scale")
    )
    model = tiny_lm(dtype=torch.float64)  # the notebook's model (seed 0)
    every_rank = [_rank_tokens(other, seed) for other in range(world_size)]
    inputs, labels = (torch.cat(parts) for parts in zip(*every_rank, strict=True))
    full = full_batch_gradient(model, lm_loss, inputs, labels)
    micro_batches = split_token_batches(*every_rank[rank], [4, 4])
    counts = [count_tokens(y) for _, y in micro_batches]
    ddp = nn.parallel.DistributedDataParallel(model)
    gaps = {}
    for label, scale in (
        ("global count", float(scale_of(counts))),
        ("own count", 1 / sum(counts)),  # DDP then averages the ranks' own means
    ):
        ddp.zero_grad(set_to_none=True)
        for index, (x, y) in enumerate(micro_batches):
            last = index == len(micro_batches) - 1
            with contextlib.nullcontext() if last else ddp.no_sync():
                (lm_loss(ddp(x), y, reduction="sum") * scale).backward()
        gaps[label] = relative_error(flat_gradient(ddp.module.parameters()), full)
        if label == "global count":
            mine = scale
    return {"rank": rank, "tokens": sum(counts), "scale": mine, "gaps": gaps}


def _gradient_bytes(model: nn.Module) -> int:
    """Bytes of gradients this rank holds (a sharded gradient counts only its shard).

    FSDP2 keeps gradients it has not reduce-scattered yet (gradient sync off) on its own
    unsharded parameters, not in ``.grad``: those are counted too (through its internals;
    0 if a torch version moved them).
    """
    total = 0
    for module in model.modules():
        try:
            group = module._get_fsdp_state()._fsdp_param_group
        except AttributeError:
            continue
        for fsdp_param in group.fsdp_params if group is not None else []:
            for grad in (
                getattr(fsdp_param._unsharded_param, "grad", None)
                if hasattr(fsdp_param, "_unsharded_param")
                else None,
                getattr(fsdp_param, "unsharded_accumulated_grad", None),
            ):
                if grad is not None:
                    total += grad.numel() * grad.element_size()
    for parameter in model.parameters():
        grad = parameter.grad
        if grad is None:
            continue
        local = grad.to_local() if hasattr(grad, "to_local") else grad
        total += local.numel() * local.element_size()
    return total


def _state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of optimizer state on this rank (ZeroRedundancyOptimizer: its local shard's)."""
    local_optimizer = getattr(optimizer, "optim", optimizer)
    total = 0
    for state in local_optimizer.state.values():
        for value in state.values():
            if torch.is_tensor(value) and value.dim() > 0:
                local = value.to_local() if hasattr(value, "to_local") else value
                total += local.numel() * local.element_size()
    return total


SETUPS = ("ddp", "ddp_no_sync", "zero1_no_sync", "fsdp", "fsdp_no_sync")


def _build(setup: str, seed: int):
    """The model (wrapped for ``setup``) and its Adam optimizer."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.optim import ZeroRedundancyOptimizer

    model = tiny_mlp(in_features=64, hidden=128, depth=3, seed=seed)
    if setup.startswith("fsdp"):
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
        fully_shard(model)
        return model, torch.optim.Adam(model.parameters(), lr=1e-3)
    ddp = nn.parallel.DistributedDataParallel(model)
    if setup.startswith("zero1"):
        return ddp, ZeroRedundancyOptimizer(ddp.parameters(), torch.optim.Adam, lr=1e-3)
    return ddp, torch.optim.Adam(ddp.parameters(), lr=1e-3)


def communication_run(
    rank: int,
    world_size: int,
    setups: tuple[str, ...] = SETUPS,
    accum_steps: int = 4,
    micro_batch_size: int = 8,
    seed: int = 0,
) -> dict:
    """One optimizer step of ``accum_steps`` micro-batches under each setup; what it moved.

    Returns, per setup: bytes moved by each kind of collective (in the units of
    :class:`CollectiveCounter`, the paper's accounting), the bytes this process really sent
    (:func:`~coursekit.distributed.bytes_written`; None off Linux), the model's parameter
    bytes (psi, in float32), the gradient bytes this rank held after the first micro-batch,
    and its optimizer-state bytes.
    """
    inputs, targets = make_regression(
        micro_batch_size * accum_steps * world_size, in_features=64, seed=seed + 1 + rank
    )
    micro_batches = split_micro_batches(inputs, targets, micro_batch_size)[:accum_steps]
    results = {}
    for setup in setups:
        model, optimizer = _build(setup, seed)
        reference = tiny_mlp(in_features=64, hidden=128, depth=3)
        parameter_bytes = sum(p.numel() * p.element_size() for p in reference.parameters())
        counter = CollectiveCounter()
        if not setup.startswith("fsdp"):
            model.register_comm_hook(None, counter.ddp_hook)
        held_after_first = 0
        dist.barrier()
        written_before = bytes_written()
        with counter:
            for index, (x, y) in enumerate(micro_batches):
                last = index == len(micro_batches) - 1
                if setup == "fsdp_no_sync":
                    model.set_requires_gradient_sync(last)
                skip_sync = setup.endswith("no_sync") and not setup.startswith("fsdp") and not last
                with model.no_sync() if skip_sync else contextlib.nullcontext():
                    (nn.functional.mse_loss(model(x), y) / len(micro_batches)).backward()
                if index == 0:
                    held_after_first = _gradient_bytes(model)
            optimizer.step()
            optimizer.zero_grad()
        written_after = bytes_written()
        results[setup] = {
            "bytes_sent": None if written_before is None else written_after - written_before,
            "bytes": dict(counter.bytes),
            "calls": dict(counter.calls),
            "parameter_bytes": parameter_bytes,
            "gradient_bytes_held": held_after_first,
            "optimizer_state_bytes": _state_bytes(optimizer),
        }
        dist.barrier()
    return results
