"""FSDP2 mixed precision with accumulation: the dtype gradients are reduced and summed in.

``MixedPrecisionPolicy(param_dtype=torch.bfloat16)`` runs forward and backward in bf16, and
its ``reduce_dtype`` defaults to None, "the compute dtype": the reduce-scatter of the
gradients runs in bf16 too (``torch/distributed/fsdp/_fully_shard/_fsdp_api.py``; the
reduction uses ``reduce_dtype or grad_dtype``, ``_fsdp_collectives.py``). FSDP2 casts the
reduced shard to the parameters' own dtype before adding it to the sharded ``.grad``, so
with gradient sync in every micro-batch the sum over micro-batches runs in float32 whatever
the policy. With sync off (``set_requires_gradient_sync(False)``) the unsharded gradients
wait on each rank until the last micro-batch, and they add up in ``reduce_dtype``: in bf16
by default, where every addition to the growing sum rounds it to 8 significant bits
(``_fsdp_param.py``, ``to_accumulated_grad_if_needed``). ``reduce_dtype=torch.float32`` keeps
that sum, and the reduce-scatter, in float32, at twice the bytes on the wire.

The worker runs in processes that :func:`coursekit.distributed.run_workers` started. gloo
runs FSDP2's bf16 reduce-scatters on the CPU, so the effect shows without a GPU.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from coursekit.arguments import choice, whole
from coursekit.data import make_regression, split_micro_batches
from coursekit.gradients import full_batch_gradient, relative_error
from coursekit.models import tiny_mlp

# "float32": no mixed precision; "bf16": param_dtype=bf16, reduce_dtype left at its default;
# "bf16_reduce_fp32": param_dtype=bf16, reduce_dtype=float32.
POLICIES = ("float32", "bf16", "bf16_reduce_fp32")
# "every": reduce-scatter in every backward; "last": sync off for all but the last one.
SYNCS = ("every", "last")


def _policy(name: str):
    """The MixedPrecisionPolicy called ``name`` (see :data:`POLICIES`)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if name == "float32":
        return MixedPrecisionPolicy()
    if name == "bf16":
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16)
    return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


class _ReduceScatters:
    """Records the dtype and bytes of the reduce-scatters FSDP2 calls in this process.

    FSDP2's default reduce-scatter calls ``torch.distributed.reduce_scatter_single`` (torch
    2.13 on) or ``reduce_scatter_tensor`` (before; same arguments) through the module, so
    replacing the module's function sees every call.
    """

    def __init__(self):
        self.dtypes: set[str] = set()
        self.bytes = 0

    def __enter__(self) -> _ReduceScatters:
        single = hasattr(dist, "reduce_scatter_single")
        self._name = "reduce_scatter_single" if single else "reduce_scatter_tensor"
        self._original = getattr(dist, self._name)

        def recorded(*args, **kwargs):
            tensor = kwargs.get("input", args[1] if len(args) > 1 else None)
            if torch.is_tensor(tensor):
                self.dtypes.add(_dtype_name(tensor.dtype))
                self.bytes += tensor.numel() * tensor.element_size()
            return self._original(*args, **kwargs)

        setattr(dist, self._name, recorded)
        return self

    def __exit__(self, *exc) -> None:
        setattr(dist, self._name, self._original)


def _waiting_dtype(model: nn.Module) -> str | None:
    """The dtype the unsharded gradients wait in between micro-batches with sync off.

    A look at FSDP2's private state (``FSDPParam.unsharded_accumulated_grad``, else the
    unsharded parameter's ``.grad``), for the dtype only; None if those names change.
    """
    try:
        fsdp_param = model._get_fsdp_state()._fsdp_param_group.fsdp_params[0]
        waiting = fsdp_param.unsharded_accumulated_grad
        if waiting is None:
            waiting = fsdp_param._unsharded_param.grad
    except (AttributeError, IndexError):
        return None
    return None if waiting is None else _dtype_name(waiting.dtype)


def _one_window(policy: str, sync: str, micro_batches, seed: int) -> dict:
    """One window under FSDP2 with ``policy``: the whole averaged gradient, and dtypes."""
    from torch.distributed.fsdp import fully_shard

    model = tiny_mlp(seed=seed)
    fully_shard(model, mp_policy=_policy(policy))
    n = len(micro_batches)
    waiting = None
    with _ReduceScatters() as reduce_scatters:
        for index, (inputs, targets) in enumerate(micro_batches):
            if sync == "last":
                model.set_requires_gradient_sync(index == n - 1)
            # the loss in float32: only the dtypes inside FSDP are under test
            loss = nn.functional.mse_loss(model(inputs).float(), targets) / n
            loss.backward()
            if index == 0 and index < n - 1 and sync == "last":
                waiting = _waiting_dtype(model)
    grads = [p.grad for p in model.parameters()]
    return {
        "gradient": torch.cat([g.full_tensor().double().flatten() for g in grads]),  # gathers
        "grad_type": type(grads[0]).__name__,
        "grad_dtype": _dtype_name(grads[0].dtype),
        "waiting_dtype": waiting,
        "reduce_dtypes": sorted(reduce_scatters.dtypes),
        "reduce_scatter_bytes": reduce_scatters.bytes,
    }


def reduce_dtype_run(
    rank: int,
    world_size: int,
    accum_steps: tuple[int, ...] = (1, 4, 16, 64, 256),
    micro_batch_size: int = 8,
    policies: tuple[str, ...] = POLICIES,
    syncs: tuple[str, ...] = SYNCS,
    seed: int = 0,
) -> list[dict]:
    """Accumulate ``N`` micro-batches per rank under FSDP2, for each ``N``, sync and policy.

    Every run starts from the same float32 model; its averaged gradient is compared with
    the float64 gradient of the whole batch (all ranks' micro-batches). Returns one row per
    run, the same errors on every rank:

    - ``error``: :func:`~coursekit.gradients.relative_error` to that float64 gradient. With
      bf16 compute it cannot go below bf16's rounding of the forward and backward.
    - ``reduction_error``: the part the reduction and summation add: the gap to the same
      run with ``reduce_dtype=torch.float32`` (the same bf16 micro-batch gradients, summed
      in float32). None for the float32 policy, or without "bf16_reduce_fp32" in
      ``policies``.
    - ``waiting_dtype``: the dtype the gradients wait in with sync off (None with sync on).
    - ``reduce_dtypes``, ``reduce_scatter_bytes``: what this rank handed to the
      reduce-scatters, in total.
    - ``grad_type``, ``grad_dtype``: the sharded ``.grad`` this rank ends with.

    Example (about 15 s on 2 cores):
        >>> from coursekit.distributed import run_workers
        >>> rows = run_workers("coursekit.workers.fsdp_precision.reduce_dtype_run", 2)[0]
    """
    micro_batch_size, seed = whole("micro_batch_size", micro_batch_size), whole("seed", seed, None)
    accum_steps = tuple(whole("accum_steps", n) for n in accum_steps)
    policies = tuple(choice("policy", p, POLICIES) for p in policies)
    syncs = tuple(choice("sync", s, SYNCS) for s in syncs)
    rows = []
    for n in accum_steps:
        inputs, targets = make_regression(micro_batch_size * n * world_size, seed=seed + 1)
        reference = full_batch_gradient(
            tiny_mlp(seed=seed, dtype=torch.float64),
            nn.functional.mse_loss,
            inputs.double(),
            targets.double(),
        )
        own = slice(rank * micro_batch_size * n, (rank + 1) * micro_batch_size * n)
        micro_batches = split_micro_batches(inputs[own], targets[own], micro_batch_size)
        for sync in syncs:
            runs = {policy: _one_window(policy, sync, micro_batches, seed) for policy in policies}
            twin = runs.get("bf16_reduce_fp32", {}).get("gradient")
            for policy, run in runs.items():
                gradient = run.pop("gradient")
                compared = policy != "float32" and twin is not None
                rows.append(
                    {
                        "policy": policy,
                        "sync": sync,
                        "accum_steps": n,
                        "error": relative_error(gradient, reference),
                        "reduction_error": relative_error(gradient, twin) if compared else None,
                        **run,
                    }
                )
    return rows
