"""One training step's memory on a card, part by part: the memory model behind the planner
and the "what fits" table.

The step's peak, with gradient accumulation (the gradients of the window's earlier
micro-batches are held while the next micro-batch's activations are saved, so every part
below is alive at once from the second micro-batch on):

- **weights**: the base in its format, plus LoRA adapters (:mod:`coursekit.finetune.weights`);
- **gradients**: one per trainable parameter, in its dtype; and at the end of backward,
  while a micro-batch's gradient is added to the window's, the embedding's gradient once
  or three times more (**gradient temporaries**: ``Trainable`` in
  :mod:`coursekit.finetune.weights` says why); by then the activations are freed, so the
  peak holds the larger of the two moments;
- **optimizer state**: AdamW's two moments, or bitsandbytes' 8-bit ones (the embeddings'
  in float32, as the HF Trainer's ``adamw_bnb_8bit`` keeps them);
- **activations**: what autograd saves, measured per token on small copies of the
  architecture (:mod:`coursekit.finetune.activations`), times ``micro_batch x seq_len``;
  with checkpointing each layer keeps only its input (plus, under LoRA, the gradients of
  the embeddings' output: :data:`INPUT_GRAD_VECTORS`), and backward recomputes one layer at
  a time (**recomputed layer**: its activations, alive after the loss's backward is done,
  so the peak holds the larger of the two);
- **logits and loss**: the output layer's ``micro_batch x seq_len x vocab`` logits, the
  float32 log-probabilities the loss saves and the gradient backward makes of them:
  :data:`LOSS_BYTES_PER_LOGIT` bytes per logit, measured on the CPU with transformers' own
  loss (``labels=``), the model's output dropped before ``backward()`` as the HF Trainer does
  (``tests/test_finetune_estimate.py`` measures it again): 12 bytes in float32 and in bf16
  alike. At a 152k vocabulary and 1,024 tokens that is 1.7 GiB per sequence: often the
  largest single part;
- **CUDA context**: the driver's and the kernels' memory, which the allocator never counts.
  :data:`CONTEXT_GB` is an *assumption*, not a measurement (no GPU was at hand): its size
  depends on the GPU, the driver, the CUDA version and lazy kernel loading. To measure
  yours: the card's total less ``torch.cuda.mem_get_info()[0]`` after the first CUDA call,
  less ``torch.cuda.memory_reserved()``.

Checked against the CPU (``benchmarks/finetune_memory.py``, the tiny model and a
GPT-2-sized one, 48 mode, size and checkpointing cases): weights, gradients, optimizer state
and saved activations exact; the peak of a micro-batch within 1% (QLoRA on a real NF4
base, bitsandbytes on the CPU, included), except LoRA on an LLM.int8 base, 1.4-12% under
(:func:`coursekit.finetune.saved_bytes_per_token` says why).

The optimizer step has a peak of its own: ``torch.optim.AdamW``'s default foreach step on
CUDA makes a temporary the size of the trainable parameters while all states exist (torch
2.13 ``adam.py``), and the estimate counts it; the HF Trainer's default since torch 2.8,
``adamw_torch_fused``, has no such temporary, so with it the step's peak is lower by that much.
The larger of the two peaks counts.
What the model leaves out, and a margin must cover: the allocator's fragmentation, the
temporaries of one layer's backward (the gradients of its activations: measured about
``i + 2h`` numbers per token for full fine-tuning, which matter beside a recomputed layer
when the vocabulary is small; at Qwen2.5's 152k vocabulary the loss's logits are 3.5 to 26
times larger and set that moment's peak), the temporaries inside kernels (a 4-bit matrix product may
dequantize a layer's weight to bf16 inside its kernel: up to 2 bytes per weight of the
largest layer, 136 MB for Qwen2.5-7B's MLP), and everything a framework adds (a
DataLoader's pinned buffers, an evaluation pass).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass

from coursekit.arguments import real, whole
from coursekit.finetune.activations import saved_bytes_per_token
from coursekit.finetune.configs import as_config, meta_model
from coursekit.finetune.modes import mode_named
from coursekit.finetune.weights import ALL_LINEAR, Trainable, trainable_state, weight_bytes
from coursekit.units import format_bytes

GIB = 2**30
#: The CUDA context's memory, in GiB: an assumption (see the module docstring).
CONTEXT_GB = 0.5
#: With checkpointing and a frozen embedding, transformers' ``activation_checkpointing_enable``
#: calls ``enable_input_require_grads`` (modeling_utils.py, transformers 5.25), so backward
#: computes gradients for the embeddings' output too: this many hidden-size vectors per
#: token more at the peak (measured on the CPU, LoRA and QLoRA, tiny and GPT-2-sized).
INPUT_GRAD_VECTORS = 2
#: Bytes per logit (token x vocabulary entry) at the loss's peak, by compute dtype: measured.
LOSS_BYTES_PER_LOGIT = {"fp32": 12, "bf16": 12}


@dataclass(frozen=True)
class MemoryEstimate:
    """A training step's memory by part, in bytes (see the module docstring)."""

    weights_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    logits_bytes: int
    step_temporary_bytes: int
    context_bytes: int
    gradient_temporary_bytes: int = 0
    recompute_bytes: int = 0  # with checkpointing: one layer's activations, in backward

    @property
    def training_bytes(self) -> int:
        """Forward and backward of a micro-batch, with the window's gradients held."""
        return (
            self.weights_bytes
            + self.gradients_bytes
            + self.optimizer_bytes
            + max(
                # early in backward: every activation, then the loss's or a recomputed layer's
                self.activations_bytes + max(self.logits_bytes, self.recompute_bytes),
                # at its end, the activations freed: the embedding's gradient temporaries
                self.gradient_temporary_bytes,
            )
        )

    @property
    def step_bytes(self) -> int:
        """The optimizer step: weights, gradients, states and the step's temporaries."""
        static = self.weights_bytes + self.gradients_bytes + self.optimizer_bytes
        return static + self.step_temporary_bytes

    @property
    def total_bytes(self) -> int:
        """The card memory the step needs: the larger peak, plus the CUDA context."""
        return max(self.training_bytes, self.step_bytes) + self.context_bytes

    def parts(self) -> dict[str, int]:
        return {
            "weights": self.weights_bytes,
            "gradients": self.gradients_bytes,
            "gradient temporaries": self.gradient_temporary_bytes,
            "optimizer state": self.optimizer_bytes,
            "activations": self.activations_bytes,
            "logits and loss": self.logits_bytes,
            "recomputed layer": self.recompute_bytes,
            "optimizer step temporaries": self.step_temporary_bytes,
            "CUDA context (assumed)": self.context_bytes,
        }

    def largest_part(self) -> str:
        """The name of the part that takes the most memory at the step's peak."""
        parts = self.parts()
        if self.step_bytes > self.training_bytes:  # activations and logits are gone by then
            for name in ("activations", "logits and loss", "recomputed layer"):
                del parts[name]
            del parts["gradient temporaries"]
        else:
            del parts["optimizer step temporaries"]
        return max(parts.items(), key=lambda item: item[1])[0]

    def __str__(self) -> str:
        total = self.total_bytes
        peak = "the optimizer step" if self.step_bytes > self.training_bytes else "backward"
        rows = [
            f"{name:>26}: {format_bytes(n):>10}  {100 * n / total:4.0f}%"
            for name, n in self.parts().items()
        ]
        rows.append(f"{'total':>26}: {format_bytes(total):>10}  (the peak is in {peak})")
        return "\n".join(rows)


def estimate_memory(
    config,
    mode: str,
    micro_batch_size: int,
    seq_len: int,
    *,
    checkpointing: bool = False,
    lora_rank: int = 16,
    lora_targets=ALL_LINEAR,
    context_gb: float = CONTEXT_GB,
) -> MemoryEstimate:
    """The memory of one training step of ``config`` in ``mode`` (:data:`MODES`) at
    ``micro_batch_size`` sequences of ``seq_len`` tokens.

    ``config`` is a transformers configuration, a dict from a ``config.json`` or a name in
    :data:`PUBLISHED_CONFIGS`. Example:

        >>> e = estimate_memory("Qwen2.5-0.5B", "qlora-nf4", 4, 1024, checkpointing=True)
        >>> e.largest_part()
        'logits and loss'
    """
    micro_batch_size = whole("micro_batch_size", micro_batch_size)
    seq_len = whole("seq_len", seq_len)
    lora_rank = whole("lora_rank", lora_rank)
    context_gb = real("context_gb", context_gb, 0)
    mode = mode_named(mode)
    config = as_config(config)
    targets = lora_targets if isinstance(lora_targets, str) else tuple(lora_targets)
    fixed = _fixed_parts(_key(config), mode.name, lora_rank, targets)
    saved = saved_bytes_per_token(config, mode, lora_rank, lora_targets)
    tokens = micro_batch_size * seq_len
    activations = tokens * saved.total(config.num_hidden_layers, checkpointing)
    if checkpointing and mode.lora:  # the embeddings' output made to require grad
        activations += tokens * INPUT_GRAD_VECTORS * config.hidden_size * mode.compute_bytes
    return MemoryEstimate(
        weights_bytes=fixed.weights_bytes,
        gradients_bytes=fixed.trainable.gradients_bytes,
        optimizer_bytes=fixed.trainable.optimizer_bytes,
        activations_bytes=round(activations),
        recompute_bytes=round(tokens * saved.per_layer) if checkpointing else 0,
        logits_bytes=tokens * fixed.vocab * LOSS_BYTES_PER_LOGIT[mode.compute],
        step_temporary_bytes=fixed.trainable.step_temporary_bytes,
        context_bytes=int(context_gb * GIB),
        gradient_temporary_bytes=fixed.trainable.gradient_temporary_bytes,
    )


@dataclass(frozen=True)
class _Fixed:
    weights_bytes: int
    trainable: Trainable
    vocab: int


def _key(config) -> str:
    """A configuration as text: the cache key of what depends only on it."""
    values = config.to_diff_dict()
    values["model_type"] = config.model_type
    values.pop("transformers_version", None)
    return json.dumps(values, sort_keys=True)


@functools.lru_cache(maxsize=64)
def _fixed_parts(config_json: str, mode_name: str, lora_rank: int, targets) -> _Fixed:
    """What does not depend on the tokens, counted once per model and mode on ``meta``."""
    from transformers import AutoConfig

    values = json.loads(config_json)
    model = meta_model(AutoConfig.for_model(values.pop("model_type"), **values))
    mode = mode_named(mode_name)
    trainable = trainable_state(model, mode, lora_rank, targets)
    weights = weight_bytes(model, mode.weights) + trainable.adapter_bytes
    return _Fixed(weights, trainable, model.get_output_embeddings().weight.shape[0])
