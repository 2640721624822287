"""Memory per device under ZeRO, and DeepSpeed's batch-size arithmetic.

ZeRO (Rajbhandari et al., SC'20, arXiv:1910.02054) shards the model states of data-parallel
training. With mixed-precision Adam each parameter costs 2 bytes (fp16 weights) + 2 bytes
(fp16 gradients) + K = 12 bytes (fp32 master weights, momentum and variance). Stage 1
shards the K bytes over the Nd devices, stage 2 the gradients too, stage 3 everything:

    stage 0: (2 + 2 + K) psi        stage 2: 2 psi + (2 + K) psi / Nd
    stage 1: 4 psi + K psi / Nd     stage 3: (2 + 2 + K) psi / Nd

That is the paper's accounting, which the course teaches. DeepSpeed's own estimators count 18
bytes per parameter (fp16 and fp32 gradients, fp32 weights, Adam) with the fp16 weights whole:
stage 2 = 2 psi + 18 psi / Nd, stage 3 = 18 psi / Nd plus 4 bytes per parameter of the
largest layer, gathered whole (not counted here).
"""

from __future__ import annotations

from dataclasses import dataclass

from coursekit.arguments import choice, real, whole

ADAM_MIXED_PRECISION_K = 12  # fp32 weights, momentum and variance: 4 + 4 + 4 bytes


#: Whose bytes per parameter: (label, bytes of weights, of gradients, of optimizer state)
#: kept whole at stage 0. "deepspeed" follows DeepSpeed's own estimators, which exist for
#: stages 2 and 3 only (estimate_zero2/zero3_model_states_mem_needs in deepspeed.runtime.zero).
ACCOUNTINGS = {
    "paper": "the ZeRO paper: fp16 weights and gradients (2 + 2), fp32 weights and Adam (K = 12)",
    "deepspeed": "DeepSpeed's estimators: 2 psi + 18 psi / Nd at stage 2 (18 = fp16 and fp32 "
    "gradients 2 + 4, fp32 weights 4, Adam 8), 18 psi / Nd at stage 3",
    "fp32": "PyTorch AMP and FSDP2: fp32 weights and gradients (4 + 4) and Adam (8), no fp16 copy",
}


def zero_bytes_per_device(
    n_parameters: float,
    stage: int,
    world_size: int,
    k: int = ADAM_MIXED_PRECISION_K,
    accounting: str = "paper",
) -> float:
    """Bytes of model states (weights, gradients, optimizer state) on one device.

    Activations and temporary buffers are not included, as in the paper's table. ``k`` is the
    paper's optimizer-state bytes (paper accounting only). ``accounting`` (see ACCOUNTINGS)
    says whose bytes: the paper's, DeepSpeed's estimators (stages 2 and 3; without the
    estimator's buffer for gathering the largest layer at stage 3), or fp32 weights as
    PyTorch's AMP and FSDP2 keep them.

    Example (the paper's 7.5B parameters on 64 devices, in GB):
        >>> [round(zero_bytes_per_device(7.5e9, s, 64) / 1e9, 1) for s in range(4)]
        [120.0, 31.4, 16.6, 1.9]
        >>> [round(zero_bytes_per_device(7.5e9, s, 64, accounting="deepspeed") / 1e9, 2)
        ...  for s in (2, 3)]
        [17.11, 2.11]
    """
    psi = real("n_parameters", n_parameters, 0)
    stage = choice("stage", whole("stage", stage, minimum=None), (0, 1, 2, 3))
    nd = whole("world_size", world_size)
    k = real("k", k, 0)
    accounting = choice("accounting", accounting, ACCOUNTINGS)
    if accounting == "deepspeed":
        if stage < 2:
            raise ValueError(
                f"DeepSpeed's memory estimators cover ZeRO stages 2 and 3, not stage {stage}; "
                "use accounting='paper' there."
            )
        return (2 * psi if stage == 2 else 0.0) + 18 * psi / nd
    if accounting == "fp32":
        weights, gradients, states = 4 * psi, 4 * psi, 8 * psi
    else:
        weights, gradients, states = 2 * psi, 2 * psi, k * psi
    if stage >= 1:
        states /= nd
    if stage >= 2:
        gradients /= nd
    if stage >= 3:
        weights /= nd
    return weights + gradients + states


@dataclass(frozen=True)
class BatchConfig:
    """DeepSpeed's three batch settings, consistent with each other and the world size."""

    train_batch_size: int
    train_micro_batch_size_per_gpu: int
    gradient_accumulation_steps: int
    world_size: int


def resolve_batch_config(
    world_size: int,
    train_batch_size: int | None = None,
    train_micro_batch_size_per_gpu: int | None = None,
    gradient_accumulation_steps: int | None = None,
) -> BatchConfig:
    """Fill in the missing one of DeepSpeed's batch settings, or check all three.

    DeepSpeed requires ``train_batch_size == train_micro_batch_size_per_gpu x
    gradient_accumulation_steps x world_size`` and derives the third from any two. This
    function is stricter on purpose (exercise 4.1): DeepSpeed also takes ``train_batch_size``
    or ``train_micro_batch_size_per_gpu`` alone, with accumulation silently 1; here a single
    setting is refused, so that accumulation is always stated.

    Example:
        >>> config = resolve_batch_config(4, train_batch_size=256, train_micro_batch_size_per_gpu=8)
        >>> config.gradient_accumulation_steps
        8
    """
    given = {
        "train_batch_size": train_batch_size,
        "train_micro_batch_size_per_gpu": train_micro_batch_size_per_gpu,
        "gradient_accumulation_steps": gradient_accumulation_steps,
    }
    world_size = whole("world_size", world_size)
    for name, value in given.items():
        if value is not None:
            given[name] = whole(name, value)
    missing = [name for name, value in given.items() if value is None]
    if len(missing) > 1:
        raise ValueError(
            f"Give at least two of the three batch settings; {' and '.join(missing)} are "
            "missing. (DeepSpeed would set gradient_accumulation_steps to 1 for a single "
            "setting; this course asks you to state it.)"
        )
    total, micro, accum = given.values()
    if total is None:
        total = micro * accum * world_size
    elif micro is None:
        micro, remainder = divmod(total, accum * world_size)
        if remainder or micro == 0:
            raise ValueError(
                f"train_batch_size {total} is not a multiple of gradient_accumulation_steps x "
                f"world_size = {accum} x {world_size} = {accum * world_size}."
            )
    elif accum is None:
        accum, remainder = divmod(total, micro * world_size)
        if remainder or accum == 0:
            raise ValueError(
                f"train_batch_size {total} is not a multiple of train_micro_batch_size_per_gpu "
                f"x world_size = {micro} x {world_size} = {micro * world_size}."
            )
    elif total != micro * accum * world_size:
        raise ValueError(
            f"Inconsistent batch settings: train_batch_size {total} != "
            f"train_micro_batch_size_per_gpu x gradient_accumulation_steps x world_size = "
            f"{micro} x {accum} x {world_size} = {micro * accum * world_size}."
        )
    return BatchConfig(total, micro, accum, world_size)


#: Communication per optimizer step with N micro-batches, in units of the model's size psi:
#: (per micro-batch, per step, how it arises). "zero1" and "zero2" are the paper's and
#: DeepSpeed's; "zero1_no_sync" is PyTorch's ZeroRedundancyOptimizer under DDP with no_sync.
COMMUNICATION = {
    "ddp": (2, 0, "an all-reduce (2 psi) in every micro-batch's backward"),
    "ddp_no_sync": (0, 2, "one all-reduce, in the last micro-batch's backward"),
    "zero1": (0, 2, "a reduce-scatter of the gradients, an all-gather of the new weights"),
    "zero1_no_sync": (0, 3, "PyTorch's ZeroRedundancyOptimizer: an all-reduce, then broadcasts"),
    "zero2": (1, 1, "a reduce-scatter every micro-batch, one all-gather of the weights"),
    "fsdp": (3, 0, "all-gather for forward and for backward, reduce-scatter: every micro-batch"),
    "fsdp_no_sync": (2, 1, "the all-gathers every micro-batch, one reduce-scatter at the end"),
}


def communication_formula(setup: str) -> str:
    """The volume per step as a formula in N, e.g. ``"2N + 1"``."""
    per_micro_batch, per_step, _ = COMMUNICATION[_setup(setup)]
    terms = [f"{per_micro_batch}N" if per_micro_batch > 1 else "N"] if per_micro_batch else []
    terms += [str(per_step)] if per_step else []
    return " + ".join(terms)


def communication_per_step(setup: str, accum_steps: int) -> float:
    """Data moved per optimizer step, in multiples of the model's size (see COMMUNICATION).

    Example:
        >>> [communication_per_step(s, 4) for s in ("ddp", "ddp_no_sync", "fsdp")]
        [8.0, 2.0, 12.0]
    """
    per_micro_batch, per_step, _ = COMMUNICATION[_setup(setup)]
    accum_steps = whole("accum_steps", accum_steps)
    return float(per_micro_batch * accum_steps + per_step)


#: The collectives behind each row of COMMUNICATION: kind -> (calls per micro-batch, per step).
#: zero1_no_sync's broadcasts are left out: each rank broadcasts its own (uneven) shard.
COLLECTIVES = {
    "ddp": {"all_reduce": (1, 0)},
    "ddp_no_sync": {"all_reduce": (0, 1)},
    "zero1": {"reduce_scatter": (0, 1), "all_gather": (0, 1)},
    "zero2": {"reduce_scatter": (1, 0), "all_gather": (0, 1)},
    "fsdp": {"all_gather": (2, 0), "reduce_scatter": (1, 0)},
    "fsdp_no_sync": {"all_gather": (2, 0), "reduce_scatter": (0, 1)},
}


def bytes_sent_per_process(
    setup: str, accum_steps: int, world_size: int, *, gloo: bool = True
) -> float:
    """What one process really sends per optimizer step, in multiples of the model's size.

    The paper counts an all-reduce as 2 psi and an all-gather or reduce-scatter as psi, the
    volume for many devices. A ring implementation on ``P`` processes sends ``(P - 1) / P``
    of that: an all-reduce 1 psi on 2 processes. gloo runs a reduce-scatter as a whole
    all-reduce (``gloo=True``), so it sends twice a ring's reduce-scatter.

    Example:
        >>> [bytes_sent_per_process(s, 4, world_size=2) for s in ("ddp", "fsdp", "zero2")]
        [4.0, 8.0, 4.5]
        >>> bytes_sent_per_process("fsdp", 4, world_size=2, gloo=False)  # a ring: 12 x 1/2
        6.0
    """
    if _setup(setup) == "zero1_no_sync":
        raise ValueError(
            "setup 'zero1_no_sync' has no single figure per process: after its all-reduce, "
            "each rank broadcasts its own shard of the weights, and the shards are uneven. "
            "Measure it (communication_run's bytes_sent)."
        )
    setup = choice("setup", setup, COLLECTIVES)
    accum_steps = whole("accum_steps", accum_steps)
    world_size = whole("world_size", world_size)
    share = (world_size - 1) / world_size
    factors = {"all_reduce": 2, "all_gather": 1, "reduce_scatter": 2 if gloo else 1}
    return float(
        sum(
            factors[kind] * share * (per_micro * accum_steps + per_step)
            for kind, (per_micro, per_step) in COLLECTIVES[setup].items()
        )
    )


def deepspeed_communication_per_step(
    stage: int, accum_steps: int, *, multi_rank_bucket_allreduce: bool = True
) -> float:
    """Data DeepSpeed moves per optimizer step at ZeRO stage 1 or 2, in the paper's units.

    With ``use_multi_rank_bucket_allreduce`` off, DeepSpeed moves the paper's volumes (2 and
    N + 1). With it on, its default, it all-reduces the full gradient (2 psi) where the paper
    reduce-scatters (psi): 3 psi per step at stage 1, 2N + 1 at stage 2. Measured on
    DeepSpeed 0.19.8 with its engine (the course's expert review). Stage 3 depends on how
    long the engine keeps gathered weights (``stage3_max_reuse_distance``): 3N with 0, and
    measured 2N on a small model with the default, so it has no single formula here.

    Example:
        >>> [deepspeed_communication_per_step(s, 4) for s in (1, 2)]
        [3.0, 9.0]
        >>> deepspeed_communication_per_step(2, 4, multi_rank_bucket_allreduce=False)
        5.0
    """
    stage = choice("stage", stage, (1, 2))
    accum_steps = whole("accum_steps", accum_steps)
    gradient_reduction = 2 if multi_rank_bucket_allreduce else 1
    if stage == 1:  # gradients kept whole: reduced once, at the boundary
        return float(gradient_reduction + 1)
    return float(gradient_reduction * accum_steps + 1)  # reduced every micro-batch


def _setup(setup) -> str:
    """``setup`` if the table has it; ZeRO-3 is named by its PyTorch twin."""
    if setup == "zero3":
        raise ValueError(
            "setup 'zero3' is not a row of its own: ZeRO stage 3 shards weights, gradients "
            "and optimizer state as FSDP does, and in the paper's accounting moves the same "
            "3N per step (DeepSpeed moves less while it keeps weights gathered); use 'fsdp'."
        )
    return choice("setup", setup, COMMUNICATION)
