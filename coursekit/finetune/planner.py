"""The planner: on your model and your card, the largest micro-batch that fits, and the
accumulation steps that reach your batch in tokens.

LLM recipes state the batch in tokens per optimizer step. With sequences of ``seq_len``
tokens that is ``ceil(tokens_per_step / seq_len)`` sequences per step; memory picks the
micro-batch (:func:`coursekit.finetune.estimate_memory`, within the card less a margin),
and :func:`coursekit.budget.plan_accumulation` splits the step's sequences into the fewest
micro-batches of sizes that differ by at most one. So a smaller card changes the number of
micro-batches, never the batch the optimizer sees.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from coursekit.arguments import real, whole
from coursekit.budget import NothingFits, largest_micro_batch, plan_accumulation
from coursekit.finetune.estimate import CONTEXT_GB, GIB, MemoryEstimate, estimate_memory
from coursekit.finetune.modes import mode_named
from coursekit.finetune.weights import ALL_LINEAR
from coursekit.parameters import ParameterError
from coursekit.units import format_bytes

#: What to try when a part is too big, by part (the keys of MemoryEstimate.parts()).
REMEDIES = {
    "weights": "a frozen base in a smaller format (LoRA on a bf16 base, or QLoRA on a 4-bit "
    "NF4 base), or a smaller model",
    "gradients": "LoRA (only the adapters have gradients)",
    "gradient temporaries": "LoRA, or untied embeddings",
    "optimizer state": "bitsandbytes' 8-bit AdamW (2 bytes per parameter instead of 8, but for the "
    "embeddings'), or "
    "LoRA (only the adapters have state)",
    "activations": "gradient checkpointing, or a shorter sequence",
    "logits and loss": "a shorter sequence, or a chunked/fused cross-entropy (Liger Kernel, "
    "Cut Cross-Entropy) that never holds every logit",
    "optimizer step temporaries": "AdamW(fused=True), or bitsandbytes' 8-bit AdamW",
    "CUDA context (assumed)": "a card with more memory",
}


def remedy(part: str, mode: str, checkpointing: bool) -> str:
    """What to try when ``part`` is the largest, given what ``mode`` already does."""
    current = mode_named(mode)
    if part == "weights" and current.weights == "nf4":
        return (
            "a smaller model or a card with more memory: the base is already 4-bit, and its "
            "embeddings and output layer stay in bf16"
        )
    if part == "activations" and checkpointing:
        return "a shorter sequence (checkpointing is already on)"
    if part in ("gradients", "gradient temporaries", "optimizer state") and current.lora:
        return "a smaller LoRA rank or fewer target modules"
    return REMEDIES[part]


@dataclass(frozen=True)
class FineTunePlan:
    """What :func:`plan_fine_tune` found; ``fits`` is False when not even one sequence does."""

    fits: bool
    mode: str
    checkpointing: bool
    seq_len: int
    tokens_per_step: int  # what was asked for
    micro_batch_sizes: tuple[int, ...]  # one optimizer step's micro-batches (empty: none fits)
    budget_bytes: int
    estimate: MemoryEstimate  # at the largest micro-batch, or at 1 when nothing fits

    @property
    def micro_batch_size(self) -> int:
        return max(self.micro_batch_sizes, default=0)

    @property
    def accum_steps(self) -> int:
        return len(self.micro_batch_sizes)

    @property
    def effective_tokens(self) -> int:
        """Tokens per optimizer step: at least ``tokens_per_step``, in whole sequences."""
        return sum(self.micro_batch_sizes) * self.seq_len

    def __str__(self) -> str:
        where = (
            f"{self.mode}{' with checkpointing' if self.checkpointing else ''}, "
            f"{self.seq_len} tokens per sequence, budget {format_bytes(self.budget_bytes)}"
        )
        if not self.fits:
            part = self.estimate.largest_part()
            size = self.estimate.parts()[part]
            return (
                f"Does not fit even at micro-batch 1 ({where}): it needs "
                f"{format_bytes(self.estimate.total_bytes)}. The largest part is {part}, "
                f"{format_bytes(size)}; try {remedy(part, self.mode, self.checkpointing)}."
                f"\n{self.estimate}"
            )
        sizes = self.micro_batch_sizes
        shape = f"{sizes.count(sizes[0])} x {sizes[0]}"
        if sizes[-1] != sizes[0]:
            shape += f" + {sizes.count(sizes[-1])} x {sizes[-1]}"
        extra = self.effective_tokens - self.tokens_per_step
        rounded = f" ({extra} more than asked: whole sequences)" if extra else ""
        return (
            f"micro-batch {self.micro_batch_size}, accumulation steps {self.accum_steps} "
            f"({shape} sequences): {self.effective_tokens:,} tokens per optimizer step"
            f"{rounded}; {where}. At that micro-batch:\n{self.estimate}"
        )


def plan_fine_tune(
    config,
    card_gb: float,
    mode: str,
    seq_len: int,
    tokens_per_step: int,
    *,
    checkpointing: bool = False,
    lora_rank: int = 16,
    lora_targets=ALL_LINEAR,
    margin: float = 0.1,
    context_gb: float = CONTEXT_GB,
) -> FineTunePlan:
    """The micro-batch and accumulation steps for fine-tuning ``config`` on a card of
    ``card_gb`` GiB in ``mode``, reaching ``tokens_per_step`` tokens per optimizer step.

    The micro-batch is the largest whose estimated step (:func:`estimate_memory`, with the
    CUDA context) stays within ``card_gb`` less ``margin`` (a tenth by default, as
    :func:`coursekit.real_model.tune`: fragmentation and what the model leaves out).
    ``card_gb`` is in GiB, the unit torch counts in: a card sold as 24 GB has 24 GiB of
    memory chips, of which ``torch.cuda.get_device_properties().total_memory`` reports less:
    a little on most cards (what the driver keeps), more where ECC is stored in the memory
    itself (a T4 sold as 16 GB reports 14.75 GiB). On the real card, pass its
    ``total_memory / 2**30``, as the notebook does with ``max_memory_gb=None``. LoRA adapts every
    linear layer but the output layer by default (``lora_targets="all-linear"``, as the
    QLoRA paper does; peft's own default for Llama and Qwen is ``q_proj`` and ``v_proj``
    only, fewer adapters and less memory: pass ``lora_targets=["q_proj", "v_proj"]``). Bad input
    raises :class:`coursekit.parameters.ParameterError`; a model that does not fit at all
    returns a plan with ``fits=False`` whose text says what dominates.

    Example:
        >>> plan = plan_fine_tune("Qwen2.5-1.5B", 12, "qlora-nf4", 1024, 65536)
        >>> plan.fits, plan.effective_tokens
        (True, 65536)
    """
    try:
        card_gb = real("card_gb", card_gb, 0, low_open=True)
        margin = real("margin", margin, 0, 1, high_open=True)
        seq_len = whole("seq_len", seq_len)
        tokens_per_step = whole("tokens_per_step", tokens_per_step)
        whole("lora_rank", lora_rank)
        real("context_gb", context_gb, 0)
        mode_named(mode)
    except (TypeError, ValueError) as error:
        raise ParameterError(str(error)) from None
    if not isinstance(checkpointing, bool):
        raise ParameterError(f"checkpointing must be True or False, got {checkpointing!r}.")
    if tokens_per_step < seq_len:
        raise ParameterError(
            f"tokens_per_step ({tokens_per_step}) is below seq_len ({seq_len}): one sequence "
            "already has more tokens than the step asks for. Give at least seq_len tokens."
        )
    budget = int(card_gb * GIB * (1 - margin))
    sequences = math.ceil(tokens_per_step / seq_len)

    def estimate(size: int) -> MemoryEstimate:
        return estimate_memory(
            config,
            mode,
            size,
            seq_len,
            checkpointing=checkpointing,
            lora_rank=lora_rank,
            lora_targets=lora_targets,
            context_gb=context_gb,
        )

    common = dict(
        mode=mode_named(mode).name,
        checkpointing=checkpointing,
        seq_len=seq_len,
        tokens_per_step=tokens_per_step,
        budget_bytes=budget,
    )
    try:
        largest = largest_micro_batch(lambda size: estimate(size).total_bytes <= budget, sequences)
    except NothingFits:
        return FineTunePlan(fits=False, micro_batch_sizes=(), estimate=estimate(1), **common)
    sizes = plan_accumulation(sequences, largest).sizes
    return FineTunePlan(fits=True, micro_batch_sizes=sizes, estimate=estimate(max(sizes)), **common)
