"""The memory model against what torch actually holds, on the CPU: weights, gradients,
optimizer state, saved activations and the peak of a micro-batch with the window's
gradients held, for the course's tiny model and a GPT-2-sized one (``GPT2Config()``, random
weights).

What is measured, and how: weights and gradients are the bytes of ``model.parameters()`` and
their ``.grad``; optimizer state is :func:`coursekit.memory.optimizer_state_bytes` after one
real step; saved activations are :func:`coursekit.memory.activation_bytes` (every tensor
autograd saves, each storage once, parameters left out) of a forward pass; the peak is
:func:`coursekit.memory.peak_live_bytes` (every storage the step creates, from creation to
free) of a second micro-batch's forward and backward, the first one's gradients held, plus
what existed before it (weights, gradients, optimizer state). A CPU has no CUDA context and
no caching allocator, so the CUDA context is left out of the prediction here.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass

import torch
from torch import nn

from coursekit.arguments import choice, whole
from coursekit.finetune.activations import _with_lora, saved_bytes_per_token
from coursekit.finetune.estimate import estimate_memory
from coursekit.finetune.modes import mode_named
from coursekit.memory import activation_bytes, peak_live_bytes
from coursekit.parameters import ParameterError
from coursekit.real_model.language_model import name_default_loss
from coursekit.real_model.memory import enable_checkpointing


class _NoHubKernelNotice(logging.Filter):
    """On a CPU with AVX-512 BF16, importing bitsandbytes tries to fetch an optional faster
    4-bit kernel from the Hugging Face Hub (the ``kernels`` package) and, offline or where
    the kernel's publisher is not trusted, logs that it fell back to its built-in one. That
    built-in kernel is what these measurements use; only that one notice is dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Failed to load CPU gemm_4bit_forward")


logging.getLogger("bitsandbytes.backends.cpu.ops").addFilter(_NoHubKernelNotice())

MEASURABLE_MODES = (
    "full-fp32",
    "full-bf16-adam8bit",
    "lora-fp32",
    "lora-bf16",
    "lora-int8",
    "qlora-nf4",
)
MODELS = ("tiny", "gpt2")


@dataclass(frozen=True)
class Comparison:
    """One part: the model's prediction and what torch held."""

    part: str
    predicted_bytes: int
    measured_bytes: int
    note: str = ""

    @property
    def ratio(self) -> float:
        """predicted / measured (1.0: exact)."""
        return self.predicted_bytes / max(1, self.measured_bytes)


def cpu_config(model: str):
    """The configuration of ``"tiny"`` (module 7's model) or ``"gpt2"`` (GPT2Config()
    defaults, 124 M parameters), dropout off as the course trains."""
    from transformers import GPT2Config

    from coursekit.real_model.language_model import tiny_config

    model = choice("model", model, MODELS)
    if model == "tiny":
        return tiny_config(vocab_size=1024, end_of_text=0)
    return GPT2Config(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)


def cpu_model(config, mode, checkpointing: bool = False, seed: int = 0) -> nn.Module:
    """The model of ``config`` on the CPU, random weights, set up for ``mode`` as the
    estimate assumes (for the GPT-2 family of :func:`cpu_config`, which has no buffers)."""
    from transformers import AutoModelForCausalLM

    mode = mode_named(mode)
    # built on meta and filled with normal(0, 0.02) numbers: the weights' values change no
    # byte of memory, and this is twice as fast as transformers' initialisation on GPT-2
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    model = model.to_empty(device="cpu")
    model.tie_weights()  # to_empty gives the tied output layer a storage of its own
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.02, generator=generator)
    if mode.weights in ("int8", "nf4"):
        model = _quantized(model, mode.weights)
    elif mode.compute == "bf16":
        model = model.to(torch.bfloat16)
    model.train()
    name_default_loss(model)  # the loss transformers falls back to for GPT-2, without its warning
    if checkpointing:
        enable_checkpointing(model)
    if mode.lora:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = _with_lora(model, 16, "all-linear")
    return model


def _optimizer(model: nn.Module, mode):
    params = [p for p in model.parameters() if p.requires_grad]
    if mode.optimizer == "adamw8bit":
        import bitsandbytes as bnb  # the caller checked it imports

        return bnb.optim.AdamW8bit(params, lr=1e-5)
    return torch.optim.AdamW(params, lr=1e-5, foreach=False)


def _first_step(optimizer, model: nn.Module) -> None:
    """The optimizer's first step, which creates its state. For bitsandbytes, the
    embeddings are registered with ``optim_bits=32`` first, as the HF Trainer's
    ``adamw_bnb_8bit`` does; the registration lives in bitsandbytes' process-wide
    ``GlobalOptimManager``, so it is taken out again once the state exists."""
    if type(optimizer).__module__.startswith("torch."):
        optimizer.step()
        return
    import bitsandbytes as bnb

    manager = bnb.optim.GlobalOptimManager.get_instance()
    config = {"optim_bits": 32}
    added = [
        (module, "weight", config) for module in model.modules() if isinstance(module, nn.Embedding)
    ]
    manager.module_weight_config_triple.extend(added)
    try:
        optimizer.step()
    finally:
        manager.module_weight_config_triple[:] = [
            t for t in manager.module_weight_config_triple if t[2] is not config
        ]
        for table in (manager.pid2config, manager.index2config):
            for key in [k for k, v in table.items() if v is config]:
                del table[key]


def compare_with_measurement(
    model: str = "tiny",
    mode: str = "full-fp32",
    micro_batch_size: int = 2,
    seq_len: int = 32,
    checkpointing: bool = False,
) -> list[Comparison]:
    """Predicted against measured, part by part (see the module docstring). The 8-bit
    optimizer row needs bitsandbytes; without it that row is left out."""
    micro_batch_size = whole("micro_batch_size", micro_batch_size)
    seq_len = whole("seq_len", seq_len)
    mode = mode_named(choice("mode", mode, MEASURABLE_MODES))
    config = cpu_config(model)
    lm = cpu_model(config, mode, checkpointing)
    predicted = estimate_memory(
        config, mode.name, micro_batch_size, seq_len, checkpointing=checkpointing, context_gb=0
    )
    tokens = micro_batch_size * seq_len
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, config.vocab_size, (micro_batch_size, seq_len), generator=gen)
    params = list(lm.parameters())
    weights = _held_bytes(lm)  # parameters and any quantization constants, each storage once
    rows = [Comparison("weights", predicted.weights_bytes, weights)]
    if not checkpointing:  # a checkpointed layer's tensors are saved by the checkpoint itself
        saved = saved_bytes_per_token(config, mode)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            measured_saved = activation_bytes(lm, ids)
        predicted_saved = round(tokens * saved.total(config.num_hidden_layers))
        rows.append(Comparison("saved activations", predicted_saved, measured_saved))

    def step() -> None:
        lm(input_ids=ids, labels=ids).loss.backward()  # the output dropped, as the Trainer does

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step()  # the first micro-batch: its gradients are held through the window
        grads = _bytes([p.grad for p in params if p.grad is not None])
        rows.append(Comparison("gradients", predicted.gradients_bytes, grads))
        optimizer = None
        if mode.optimizer != "adamw8bit" or _has_bitsandbytes():
            optimizer = _optimizer(lm, mode)
            _first_step(optimizer, lm)  # creates the state; the gradients stay
            state = _state_bytes(optimizer)
            rows.append(Comparison("optimizer state", predicted.optimizer_bytes, state))
        held = weights + grads + (state if optimizer is not None else 0)
        live = peak_live_bytes(step)
    # without bitsandbytes the prediction's 8-bit state is added to both sides
    missing = 0 if optimizer is not None else predicted.optimizer_bytes
    note = "" if optimizer is not None else "8-bit optimizer state not measured (no bitsandbytes)"
    peak = Comparison("micro-batch peak", predicted.training_bytes, held + live + missing, note)
    return [*rows, peak]
    return rows


def _state_bytes(optimizer) -> int:
    """The optimizer's state tensors, each storage once: bitsandbytes' 8-bit AdamW shares
    its two quantization maps between parameters, which
    :func:`coursekit.memory.optimizer_state_bytes` would count once per parameter."""
    storages = {}
    for state in optimizer.state.values():
        for value in state.values():
            if torch.is_tensor(value) and value.dim() > 0:
                storages[value.untyped_storage().data_ptr()] = value.untyped_storage().nbytes()
    return sum(storages.values())


def compare_quantized_weights(model: str = "tiny", weight_format: str = "nf4") -> Comparison:
    """Load ``model`` (random weights, saved to a temporary folder) the way students load a
    quantized base, ``from_pretrained(..., quantization_config=BitsAndBytesConfig(...))``
    (NF4 with double quantization, or LLM.int8), on the CPU, and count every storage it
    holds (weights, quantization constants and codes, each once) against
    :func:`coursekit.finetune.weight_bytes`. Needs bitsandbytes (the ``quantization``
    extra; run here with 0.50.2, whose CPU backend quantizes and multiplies)."""
    from transformers import AutoModelForCausalLM

    from coursekit.finetune.configs import meta_model
    from coursekit.finetune.weights import weight_bytes

    weight_format = choice("weight_format", weight_format, ("nf4", "int8"))
    config = cpu_config(model)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        quantized = _quantized(AutoModelForCausalLM.from_config(config), weight_format)
    return Comparison(
        f"{weight_format} weights",
        weight_bytes(meta_model(config), weight_format),
        _held_bytes(quantized),
    )


def _quantized(model: nn.Module, weight_format: str) -> nn.Module:
    """``model`` saved and loaded again as students load a quantized base: NF4 with double
    quantization and bf16 compute, or LLM.int8; everything else in bf16."""
    import tempfile

    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    if not _has_bitsandbytes():
        raise ParameterError(
            f"{weight_format} needs bitsandbytes: pip install 'coursekit[quantization]'."
        )
    if weight_format == "nf4":
        quantization = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch.bfloat16,
        )
    else:
        quantization = BitsAndBytesConfig(load_in_8bit=True)
    with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.save_pretrained(folder)
        return AutoModelForCausalLM.from_pretrained(
            folder,
            quantization_config=quantization,
            dtype=torch.bfloat16,
            device_map="cpu",
            attn_implementation="sdpa",
        )


def _held_bytes(model: nn.Module) -> int:
    storages: dict[int, int] = {}

    def add(tensor) -> None:
        if torch.is_tensor(tensor):
            storages[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()

    for module in model.modules():
        for tensor in [*module.parameters(recurse=False), *module.buffers(recurse=False)]:
            add(tensor)
            add(getattr(tensor, "SCB", None))  # LLM.int8's row scales
            state = getattr(tensor, "quant_state", None)  # NF4's constants
            if state is not None:
                for name in ("absmax", "offset", "code"):
                    add(getattr(state, name, None))
                if state.state2 is not None:
                    add(state.state2.absmax)
                    add(state.state2.code)
    return sum(storages.values())


def _bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _has_bitsandbytes() -> bool:
    try:
        import bitsandbytes  # noqa: F401
    except Exception:  # an ImportError, or a broken native library
        return False
    return True


def comparison_table(rows: list[Comparison]) -> str:
    """The rows as aligned text."""
    lines = [f"{'part':<18} {'predicted':>14} {'measured':>14} {'ratio':>7}"]
    for row in rows:
        note = f"  ({row.note})" if row.note else ""
        lines.append(
            f"{row.part:<18} {row.predicted_bytes:>14,} {row.measured_bytes:>14,} "
            f"{row.ratio:>7.3f}{note}"
        )
    return "\n".join(lines)
