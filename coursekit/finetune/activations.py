"""What autograd saves for backward, per token, for a real architecture: measured on small
copies of it, and the published formula beside it.

**The formula.** Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
Transformer Models", arXiv:2205.05198, section 4.1) count, for one GPT-style layer in 16-bit
with dropout, ``s b h (34 + 5 a s / h)`` bytes (sequence ``s``, micro-batch ``b``, hidden
``h``, ``a`` heads): attention ``11 sbh + 5 a s^2 b`` (its input, Q and K, V, the output
projection's input, a dropout mask; the ``s x s`` scores, softmax and its dropout), the MLP
``19 sbh`` (the inputs of its two matrices, 2 and 8 sbh, GeLU's input, a mask), the two
LayerNorms ``4 sbh`` (:func:`korthikanti_layer_bytes`).

**What PyTorch saves instead** (transformers 5.25, torch 2.13, listed one saved tensor at a
time with ``saved_tensors_hooks``; the course's models train without dropout):

- no dropout masks (dropout is off), and no ``a s^2`` term: ``scaled_dot_product_attention``
  (transformers' default, ``attn_implementation="sdpa"``, which this model assumes) saves
  Q, K, V, its output and one float32 log-sum-exp per head and token, never the score
  matrix. Eager attention (``attn_implementation="eager"``) saves the softmax's
  probabilities, ``a s`` numbers per token and layer (measured: 4 a s bytes in float32 on
  GPT-2 and Qwen2 copies), where the paper's ``5 a s`` is the 16-bit softmax output, its
  dropout mask and the dropout's output;
- GPT-2's ``gelu_new`` is written in Python (``0.5 x (1 + tanh(...))``) and saves four
  tensors of the MLP's width where a fused GeLU saves one; per layer and token GPT-2 saves
  ``10 h + 5 i + a + 4`` numbers (``i = 4h`` the MLP width): about 30 h numbers, where the
  paper's ``34 h`` bytes of 16-bit activations and masks are 17 h;
- a Llama-style layer (Qwen2, RMSNorm, rotary, SwiGLU, grouped-query attention with
  ``kv`` = key/value width) saves ``8 h + 2 kv + 4 i + a + 2`` in float32; in bf16 its
  RMSNorm still saves float32 copies (it upcasts), so bytes are not simply halved;
- a frozen linear layer saves nothing of its own (only a trainable weight needs the input),
  so LoRA saves less than full fine-tuning: the adapters' own inputs instead (peft casts
  them to float32 for float32 adapters), and each adapter's rank-wide middle.

Rather than a hand count per architecture, dtype and mode, which breaks on the next model,
:func:`saved_bytes_per_token` measures it: the same architecture built with every width
divided by ``k`` (head dimension, hidden, MLP, key/value; the head counts kept), one and two
layers, for two ``k``. Saved bytes per token are a sum of tensor widths, so they are linear
in the width, and four small measurements give the per-layer and the rest-of-model terms at
full width exactly (up to the rotary tables, made once per forward pass and shared by the
batch: under 0.1% of a real model's total). The measurements run on the CPU in a fraction
of a second and are cached; :func:`coursekit.finetune.compare_with_measurement` checks the
result against a full-size GPT-2 forward. On a GPU the attention kernels are other ones
(flash, memory-efficient); FlashAttention too keeps the output and the log-sum-exp for
backward, never the score matrix (Dao et al. 2022, arXiv:2205.14135), but what each GPU
kernel saves was not measured here.
"""

from __future__ import annotations

import copy
import functools
import json
import warnings
from dataclasses import dataclass

import torch
from torch import nn

from coursekit.finetune.configs import as_config
from coursekit.finetune.modes import mode_named
from coursekit.memory import activation_bytes
from coursekit.parameters import ParameterError

_TOKENS = (2, 16)  # the calibration's micro-batch and sequence length
_HEAD_DIMS = (8, 16)  # the small copies' head dimensions


def korthikanti_layer_bytes(seq_len: int, micro_batch: int, hidden: int, heads: int) -> int:
    """One transformer layer's activations in 16-bit with dropout, without recomputation:
    ``s b h (34 + 5 a s / h)`` (Korthikanti et al. 2022, equation 1)."""
    s, b, h, a = seq_len, micro_batch, hidden, heads
    return s * b * h * 34 + 5 * a * s * s * b


@dataclass(frozen=True)
class SavedPerToken:
    """Bytes autograd saves per token: in each transformer layer, and in the rest of the
    model (embeddings, the final norm, the output layer's input). The loss is apart
    (:mod:`coursekit.finetune.estimate`)."""

    per_layer: float
    rest: float
    layer_input: float  # one layer's input: all checkpointing keeps of a layer

    def total(self, layers: int, checkpointing: bool = False) -> float:
        """Per token, what the forward pass leaves saved; with checkpointing each layer keeps
        only its input (backward then recomputes one layer at a time: ``per_layer`` more,
        for that layer)."""
        if checkpointing:
            return layers * self.layer_input + self.rest
        return layers * self.per_layer + self.rest


def _head_dim(config) -> int:
    explicit = getattr(config, "head_dim", None)
    return int(explicit) if explicit else config.hidden_size // config.num_attention_heads


def _shrunk(config, head_dim: int, layers: int):
    """``config`` with every width scaled by ``head_dim / its head dimension`` and
    ``layers`` layers; head counts, kinds of layers and flags are kept."""
    small = copy.deepcopy(config)
    scale = head_dim / _head_dim(config)
    small.hidden_size = config.num_attention_heads * head_dim
    if getattr(config, "head_dim", None):
        try:
            small.head_dim = head_dim
        except AttributeError:  # a property computed from the hidden size (Falcon)
            pass
    for name in ("intermediate_size", "n_inner"):
        width = getattr(config, name, None)
        if width:
            setattr(small, name, max(1, round(width * scale)))
    small.num_hidden_layers = layers
    small.vocab_size = 64
    if getattr(small, "pad_token_id", None) is not None:  # inside the small vocabulary
        small.pad_token_id = 0
    for name in ("layer_types", "sliding_window"):  # per-layer lists follow the layer count
        value = getattr(small, name, None)
        if isinstance(value, list):
            setattr(small, name, value[:layers])
    for name in ("resid_pdrop", "embd_pdrop", "attn_pdrop", "attention_dropout"):
        if hasattr(small, name):
            setattr(small, name, 0.0)
    return small


def _measure(config, mode, lora_rank: int, lora_targets) -> float:
    """Saved bytes per token of one forward pass of the model of ``config`` in ``mode``."""
    from transformers import AutoModelForCausalLM

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    if mode.compute == "bf16":
        model = model.to(torch.bfloat16)
    model.train()
    if mode.lora:
        model = _with_lora(model, lora_rank, lora_targets)
    batch, seq_len = _TOKENS
    ids = torch.randint(0, config.vocab_size, (batch, seq_len))
    return activation_bytes(model, ids) / (batch * seq_len)


def _quietly(fn, *args):
    """Run ``fn`` without the warnings peft and transformers print about names they will
    rename and GPT-2's Conv1D (``fan_in_fan_out``): nothing a student can act on."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("ignore", FutureWarning)
        return fn(*args)


def _with_lora(model: nn.Module, rank: int, targets):
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise ParameterError(
            "LoRA modes need peft: pip install 'coursekit[frameworks]' (or pip install peft)."
        ) from None
    return get_peft_model(model, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=targets))


@functools.lru_cache(maxsize=64)
def _calibrated(config_json: str, mode_name: str, lora_rank: int, targets) -> SavedPerToken:
    from transformers import AutoConfig

    values = json.loads(config_json)
    config = AutoConfig.for_model(values.pop("model_type"), **values)
    mode = mode_named(mode_name)
    points = {}
    for head_dim in _HEAD_DIMS:
        one, two = (
            _quietly(_measure, _shrunk(config, head_dim, layers), mode, lora_rank, targets)
            for layers in (1, 2)
        )
        points[head_dim] = (two - one, 2 * one - two)  # (per layer, rest)
    (d1, (layer1, rest1)), (d2, (layer2, rest2)) = sorted(points.items())
    full = _head_dim(config)

    def extrapolate(at1: float, at2: float) -> float:  # linear in the width
        return at1 + (at2 - at1) * (full - d1) / (d2 - d1)

    return SavedPerToken(
        per_layer=extrapolate(layer1, layer2),
        rest=extrapolate(rest1, rest2),
        layer_input=config.hidden_size * mode.compute_bytes,
    )


def saved_bytes_per_token(config, mode, lora_rank: int = 16, lora_targets="all-linear"):
    """:class:`SavedPerToken` for ``config`` in ``mode``, measured on small copies (see the
    module docstring). Modes on an int8 or NF4 base are measured as LoRA on a bf16 base.
    For NF4 that is exact: bitsandbytes' ``MatMul4Bit`` keeps only the quantized weight for
    backward, and LoRA on a real NF4 base saves the same bytes as on bf16 (measured with
    bitsandbytes 0.50.2 on the CPU: ``compare_with_measurement(mode="qlora-nf4")``). For
    LLM.int8 it is an underestimate: ``MatMul8bitLt`` keeps each layer's input in
    ``ctx.tensors``, where saved-tensor hooks do not see it (on the CPU the measured peak
    is 1.4-12% above the estimate, tiny and GPT-2-sized models)."""
    config = as_config(config)
    mode = mode_named(mode)
    if mode.weights in ("int8", "nf4"):
        mode = mode_named("lora-bf16")
    values = config.to_diff_dict()
    values["model_type"] = config.model_type
    values.pop("transformers_version", None)
    targets = lora_targets if isinstance(lora_targets, str) else tuple(lora_targets)
    try:
        return _calibrated(json.dumps(values, sort_keys=True), mode.name, lora_rank, targets)
    except (AttributeError, TypeError, RuntimeError, ValueError, AssertionError) as error:
        raise ParameterError(
            f"Could not measure the activations of {type(config).__name__} on small copies "
            f"({type(error).__name__}: {str(error)[:300]}). The course measures decoders "
            "whose transformers class runs with attn_implementation='sdpa' (GPT-2, Llama, "
            "Qwen, Mistral, Gemma, OLMo, GPT-NeoX, OPT, ...)."
        ) from None
