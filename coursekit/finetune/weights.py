"""What a fine-tune holds before any token arrives: the base's weights in each format, the
trainable parameters (all of them, or LoRA adapters), their gradients and optimizer state.

Every count walks the model built on the ``meta`` device (:func:`coursekit.finetune.meta_model`),
so it is exact for the architecture, tied embeddings counted once. What each format stores,
from the source of bitsandbytes 0.50.2 and transformers 5.25:

- **fp32, bf16**: 4 and 2 bytes per parameter.
- **int8** (LLM.int8, Dettmers et al. 2022, arXiv:2208.07339; ``load_in_8bit``): each
  quantized linear layer keeps its weight as int8 (1 byte per weight, ``Int8Params.CB``) and
  one float32 scale per output row (``Int8Params.SCB``, 4 bytes x ``out_features``).
- **nf4** (QLoRA, Dettmers et al. 2023, arXiv:2305.14314; ``load_in_4bit``,
  ``bnb_4bit_quant_type="nf4"``): two 4-bit weights per byte, one absmax constant per block
  of 64 weights (``Params4bit`` blocksize 64) and the 16-value NF4 code (64 bytes) per layer.
  Without double quantization the constants are float32 (4 bytes per block, 0.5 bit per
  weight). With it (``bnb_4bit_use_double_quant=True``, the QLoRA recipe) they are uint8
  (1 byte per block) after subtracting their mean (one float32 ``offset``), with a float32
  absmax per block of 256 constants (``quantize_blockwise(blocksize=256)``): 8/64 + 32/(64 x
  256) = 0.127 bit per weight, the paper's figure, plus the 256-value float32 code of that
  8-bit quantization (1 KiB), one copy per layer when transformers loads the model
  (counted on the CPU: :func:`coursekit.finetune.measured.compare_quantized_weights`).

Which layers are quantized: every ``nn.Linear`` (and GPT-2's ``Conv1D``) but those
transformers keeps in full precision (``get_keys_to_not_convert``: the output embedding and
tied weights). Everything else (embeddings, norms, biases, the output layer) stays in the
``torch_dtype``, bf16 here. peft's ``prepare_model_for_kbit_training`` casts those to
float32 (2 more bytes each); the counts below do not, as when it is not called.

Optimizer state per trainable parameter: ``torch.optim.AdamW`` keeps two moments of the
parameter's dtype (8 bytes for float32). bitsandbytes' ``AdamW8bit`` keeps both as uint8
(2 bytes) plus one float32 absmax per block of 256 for each (``Optimizer2State.init_state``),
except for tensors of fewer than 4,096 elements (``min_8bit_size``), whose two states stay
float32 (8 bytes), and its two 256-value float32 quantization maps (2 KiB), shared by every
parameter, once. The estimate follows the HF Trainer's ``optim="adamw_bnb_8bit"``, which
registers every ``nn.Embedding`` weight with ``optim_bits=32`` (``Trainer.create_optimizer``,
transformers 5.25): those keep two float32 states, 8 bytes per parameter (a tied output
layer shares them; an untied one is an ``nn.Linear`` and stays 8-bit). At Qwen2.5's 152k
vocabulary that is 0.76 GiB more than 8-bit states at 0.5B, 3.0 GiB at 7B.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from torch import nn

from coursekit.arguments import choice, whole

WEIGHT_FORMATS = ("fp32", "bf16", "int8", "nf4")
_BYTES = {"fp32": 4, "bf16": 2}
NF4_BLOCK = 64  # bitsandbytes Params4bit's default blocksize
DOUBLE_QUANT_BLOCK = 256  # quantize_blockwise's blocksize for the absmax constants
NF4_CODE_BYTES = 16 * 4  # the 16 NF4 values, float32, kept per layer
DOUBLE_QUANT_CODE_BYTES = 256 * 4  # the 8-bit dynamic map of the nested quantization
ADAM8BIT_BLOCK = 256
ADAM8BIT_MIN_SIZE = 4096  # bitsandbytes' min_8bit_size
#: LoRA's default target: every linear layer but the output layer (peft's "all-linear").
ALL_LINEAR = "all-linear"


def _is_linear(module: nn.Module) -> bool:
    # GPT-2's Conv1D is a linear layer with its weight stored (in, out)
    return isinstance(module, nn.Linear) or type(module).__name__ == "Conv1D"


def _in_out(module: nn.Module) -> tuple[int, int]:
    if isinstance(module, nn.Linear):
        return module.in_features, module.out_features
    rows, cols = module.weight.shape  # Conv1D: (in, out)
    return rows, cols


def kept_in_full_precision(model: nn.Module) -> set[str]:
    """Names of the modules transformers never quantizes (its ``get_keys_to_not_convert``)."""
    from transformers.quantizers.base import get_keys_to_not_convert

    return set(get_keys_to_not_convert(model))


def quantized_linears(model: nn.Module) -> dict[str, nn.Module]:
    """The linear layers ``load_in_8bit`` / ``load_in_4bit`` replace, by name."""
    keep = kept_in_full_precision(model)
    return {
        name: module
        for name, module in model.named_modules()
        if _is_linear(module) and not any(name == k or name.startswith(k + ".") for k in keep)
    }


def nf4_layer_bytes(numel: int, double_quant: bool = True) -> int:
    """Bytes of one NF4 layer of ``numel`` weights: packed weights and their constants."""
    blocks = math.ceil(numel / NF4_BLOCK)
    if double_quant:
        nested = 4 * math.ceil(blocks / DOUBLE_QUANT_BLOCK) + 4 + DOUBLE_QUANT_CODE_BYTES
        constants = blocks + nested  # uint8 absmax; theirs in float32, the offset, the code
    else:
        constants = 4 * blocks
    return math.ceil(numel / 2) + constants + NF4_CODE_BYTES


def weight_bytes(model: nn.Module, weight_format: str, double_quant: bool = True) -> int:
    """Bytes of the model's weights stored in ``weight_format`` (see the module docstring).

    Example:
        >>> from coursekit.finetune import meta_model
        >>> weight_bytes(meta_model("gpt2"), "bf16")
        248879616
    """
    weight_format = choice("weight_format", weight_format, WEIGHT_FORMATS)
    params = {id(p): p for p in model.parameters()}
    if weight_format in _BYTES:
        return _BYTES[weight_format] * sum(p.numel() for p in params.values())
    total = 0
    for module in quantized_linears(model).values():
        weight = module.weight
        params.pop(id(weight), None)
        if weight_format == "int8":
            total += weight.numel() + 4 * _in_out(module)[1]
        else:
            total += nf4_layer_bytes(weight.numel(), double_quant)
    return total + 2 * sum(p.numel() for p in params.values())  # the rest in bf16


def lora_targets_of(model: nn.Module, targets: str | Iterable[str] = ALL_LINEAR) -> dict:
    """The linear layers LoRA adapts: with ``"all-linear"`` every one but the output layer
    (peft's rule), else those whose name ends in one of ``targets`` (``"q_proj"``, ...)."""
    output = model.get_output_embeddings()
    linears = {name: m for name, m in model.named_modules() if _is_linear(m) and m is not output}
    if targets == ALL_LINEAR:
        return linears
    if isinstance(targets, str):
        targets = [targets]
    targets = list(targets)
    chosen = {n: m for n, m in linears.items() if n.rsplit(".", 1)[-1] in targets}
    if not targets or not chosen:
        from coursekit.parameters import ParameterError

        names = sorted({n.rsplit(".", 1)[-1] for n in linears})
        raise ParameterError(
            f"lora_targets {targets!r} match no linear layer of this model; its layers are "
            f"named {', '.join(names)} (or pass 'all-linear')."
        )
    return chosen


def lora_parameter_shapes(
    model: nn.Module, rank: int, targets: str | Iterable[str] = ALL_LINEAR
) -> list[int]:
    """The element counts of every LoRA matrix: ``A`` (rank x in) and ``B`` (out x rank) for
    each adapted layer (peft's ``LoraLayer``; no bias)."""
    rank = whole("lora_rank", rank)
    sizes = []
    for module in lora_targets_of(model, targets).values():
        fan_in, fan_out = _in_out(module)
        sizes += [rank * fan_in, fan_out * rank]
    return sizes


def adam8bit_state_bytes(sizes: Iterable[int], full_precision: Iterable[int] = ()) -> int:
    """Bytes of bitsandbytes ``AdamW8bit``'s state for parameters of these element counts;
    those in ``full_precision`` (element counts too) are registered with ``optim_bits=32``,
    as the HF Trainer registers the embeddings, and keep two float32 states."""
    total, quantized = 8 * sum(full_precision), False
    for n in sizes:
        if n < ADAM8BIT_MIN_SIZE:
            total += 8 * n
        else:
            total += 2 * n + 2 * 4 * math.ceil(n / ADAM8BIT_BLOCK)
            quantized = True
    return total + (2 * 256 * 4 if quantized else 0)


@dataclass(frozen=True)
class Trainable:
    """What training adds to the frozen weights: trainable parameters (their own bytes when
    they are adapters), their gradients, the optimizer state, and the optimizer step's
    temporaries."""

    parameters: int
    adapter_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    step_temporary_bytes: int
    gradient_temporary_bytes: int


def trainable_state(
    model: nn.Module, mode_parts, lora_rank: int = 16, lora_targets=ALL_LINEAR
) -> Trainable:
    """The trainable part of a mode (a :class:`coursekit.finetune.modes.Mode`).

    Full fine-tuning trains every weight in the base's dtype (bf16 gradients for a bf16
    model). LoRA trains float32 adapters (peft upcasts them: ``autocast_adapter_dtype``).
    ``torch.optim.AdamW``'s default foreach step on CUDA makes one more tensor of the
    parameter's dtype per parameter (``torch._foreach_sqrt`` of the second moments, torch
    2.13 ``adam.py``) while every state exists, and the estimate counts it; the fused step
    (``fused=True``, the HF Trainer's default ``adamw_torch_fused`` since torch 2.8) has no
    such temporary, nor does bitsandbytes' 8-bit step, which works in place. With
    bitsandbytes the embeddings' states are float32, as the HF Trainer registers them (the
    module docstring says why).

    Gradient temporaries: from a window's second micro-batch on, backward makes each
    parameter's new gradient as a tensor of its own and then adds it to ``.grad``. The
    largest is the embedding's, at the very end of backward, once the activations are gone.
    Measured (``peak_live_bytes``, transformers 5.25, torch 2.13): an untied embedding
    peaks at one more copy of its gradient; a tied one at three (the output layer's
    contribution, held by autograd until the embedding's arrives, the embedding's, and
    their sum).
    """
    tied = 1
    if mode_parts.lora:
        sizes = lora_parameter_shapes(model, lora_rank, lora_targets)
        element, adapter_bytes = 4, 4 * sum(sizes)
    else:
        sizes = [p.numel() for p in model.parameters()]
        element, adapter_bytes = _BYTES[mode_parts.weights], 0
        output = model.get_output_embeddings()
        embedding = model.get_input_embeddings()
        if output is not None and output.weight is embedding.weight:
            tied = 3
    n = sum(sizes)
    if mode_parts.optimizer == "adamw8bit":
        if mode_parts.lora:  # adapters only: no embedding among them
            optimizer = adam8bit_state_bytes(sizes)
        else:
            embeddings = _embedding_weights(model)
            rest = [p.numel() for p in model.parameters() if id(p) not in embeddings]
            optimizer = adam8bit_state_bytes(rest, [p.numel() for p in embeddings.values()])
        temporary = 0
    else:
        optimizer, temporary = 2 * element * n, element * n
    gradient_temporary = tied * element * max(sizes)
    return Trainable(n, adapter_bytes, element * n, optimizer, temporary, gradient_temporary)


def _embedding_weights(model: nn.Module) -> dict[int, nn.Parameter]:
    """The weights of every ``nn.Embedding``, by id: those the HF Trainer's 8-bit AdamW
    keeps in 32-bit (a tied output layer's weight is the same parameter)."""
    return {
        id(module.weight): module.weight
        for module in model.modules()
        if isinstance(module, nn.Embedding)
    }
