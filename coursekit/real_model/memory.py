"""Where a language model's training memory goes, measured for each way of saving it.

One training step of a causal LM holds its weights, their gradients, the optimizer's state
and, for the length of the step, the activations backward needs; only those grow with the
micro-batch and the sequence length. Each *mode* below changes one of them:

- ``fp32``: everything in float32;
- ``checkpointing``: ``gradient_checkpointing_enable()`` keeps only each block's input and
  recomputes the rest in backward (activations fall, compute rises by about a third);
- ``fp16``: autocast to float16 with a ``GradScaler``, for GPUs that do not compute in
  bfloat16 (before compute capability 8.0: the T4, Colab's usual GPU, only emulates it);
  ``bf16``: autocast to bfloat16, no scaler. Both halve most activations, not the float32
  weights, gradients or optimizer state;
- ``lora``: LoRA adapters (``peft``) on the attention: the base weights are frozen, so they
  need no gradients and no optimizer state, and only the adapters train.

On a GPU the peak is the CUDA allocator's (``torch.cuda.max_memory_allocated``), from a fresh
peak count before the step, less what was allocated before it: whatever else the process
holds (the notebook's own copy of the model, another probe) is not this step's memory. On a
CPU no allocator keeps one, so the live tensors the step creates stand in, watched one
allocation at a time (:func:`coursekit.memory.peak_live_bytes`). Beside it, on both, the
course's estimate: what autograd saves for backward (:func:`coursekit.memory.activation_bytes`)
plus the gradients. Each adds the model's weights and AdamW's two float32 moments per
trainable parameter, which exist before the step.

Neither counts the optimizer step's own moment: on a GPU, PyTorch's default AdamW (its
``foreach`` implementation) allocates about 4 more bytes per trainable parameter for a
temporary (the square root of the second moment) while weights, gradients and both moments
are live; ``fused=True`` avoids most of it. The tuner's 10% margin is there for this, and
for fragmentation.
"""

from __future__ import annotations

import copy
import time
import warnings
from collections.abc import Callable, Iterable
from contextlib import nullcontext
from dataclasses import dataclass

import torch
from torch import nn

from coursekit.memory import activation_bytes, peak_live_bytes
from coursekit.progress import Progress
from coursekit.real_model.language_model import IGNORE, LanguageModel, collate, summed_loss
from coursekit.real_model.tuning import free_memory

# transformers 5.x warns, from inside its own forward pass, that the names it calls for
# checkpointing are deprecated; nothing a student can act on.
warnings.filterwarnings("ignore", message=r".*is deprecated and will be removed in v6.*")

MODES = ("fp32", "checkpointing", "fp16", "bf16", "lora")
#: What each mode changes, as the sweep's legend says it.
PARTS = ("checkpointing", "fp16", "bf16", "lora")
ADAM_BYTES = 8  # AdamW's two float32 moments per trainable parameter


@dataclass(frozen=True)
class Measurement:
    """One mode at one micro-batch size and sequence length."""

    mode: str
    micro_batch: int
    seq_len: int
    peak_bytes: int  # measured: the allocator's peak on a GPU, live tensors on a CPU
    estimate_bytes: int | None  # the course's estimate (None where it was not computed)
    tokens_per_second: float


def parts_of(mode: str) -> set[str]:
    """The parts of a mode: ``"checkpointing+bf16+lora"`` is all three at once."""
    parts = set(mode.split("+")) - {"fp32"}
    if not mode or parts - set(PARTS) or {"fp16", "bf16"} <= parts:
        raise ValueError(
            f"mode must be fp32, or some of {', '.join(PARTS)} joined by '+' (fp16 or bf16, "
            f"not both); got {mode!r}."
        )
    return parts


def enable_checkpointing(model: nn.Module) -> None:
    """Turn on a transformers model's activation checkpointing (non-reentrant), and its
    cache off, which checkpointing cannot keep."""
    # activation_checkpointing_enable is the name from transformers 5.x on
    enable = getattr(model, "activation_checkpointing_enable", None)
    if enable is not None:
        enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False


def with_mode(lm: LanguageModel, mode: str) -> nn.Module:
    """A copy of ``lm.model`` set up for ``mode`` (the original is left as it was)."""
    parts = parts_of(mode)
    model = copy.deepcopy(lm.model).train()
    if "checkpointing" in parts:
        enable_checkpointing(model)
    if "lora" in parts:
        from peft import LoraConfig, get_peft_model

        # peft knows each architecture's attention projections (GPT-2's c_attn, Llama's
        # q_proj and v_proj), so target_modules can be left to it
        with warnings.catch_warnings():  # GPT-2's Conv1D: peft says it sets fan_in_fan_out
            warnings.simplefilter("ignore", UserWarning)
            model = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", r=8, lora_alpha=16))
    return model


def autocast_for(mode: str, device: torch.device):
    """The autocast context of a mode (fp16 and bf16), or a context that does nothing."""
    parts = parts_of(mode)
    if "fp16" in parts:
        return torch.autocast(device.type, dtype=torch.float16)
    if "bf16" in parts:
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return nullcontext()


def needs_scaler(mode: str) -> bool:
    """fp16's gradients underflow without a GradScaler; bf16 has float32's range."""
    return "fp16" in parts_of(mode)


def static_bytes(model: nn.Module) -> int:
    """Weights, plus AdamW's state for the trainable ones: what exists before a step."""
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return weights + ADAM_BYTES * trainable


def step(model: nn.Module, batch: dict, mode: str, scaler=None) -> None:
    """One micro-batch's forward and backward pass in ``mode`` (gradients left in .grad)."""
    device = batch["input_ids"].device
    with autocast_for(mode, device):
        loss = summed_loss(model, batch) / max(1, int((batch["labels"][:, 1:] != IGNORE).sum()))
    (scaler.scale(loss) if scaler is not None else loss).backward()


def measure(
    model: nn.Module, batch: dict, mode: str, estimate: bool = True
) -> tuple[int, int | None]:
    """(peak bytes of one training step, the course's estimate, or None with
    ``estimate=False``), both counting the weights and AdamW's state (module docstring)."""
    device = batch["input_ids"].device
    scaler = torch.amp.GradScaler(device.type) if needs_scaler(mode) else None
    model.zero_grad(set_to_none=True)
    try:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            before = torch.cuda.memory_allocated(device)
            torch.cuda.reset_peak_memory_stats(device)
            step(model, batch, mode, scaler)
            torch.cuda.synchronize(device)
            added = torch.cuda.max_memory_allocated(device) - before
        else:
            added = peak_live_bytes(lambda: step(model, batch, mode, scaler))
        model.zero_grad(set_to_none=True)
        if not estimate:
            return static_bytes(model) + added, None
        saved = _saved_bytes(model, batch, mode)
        grads = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
        return static_bytes(model) + added, static_bytes(model) + saved + grads
    finally:
        model.zero_grad(set_to_none=True)


def _saved_bytes(model: nn.Module, batch: dict, mode: str) -> int:
    def loss(output, labels):
        logits = output.logits[:, :-1].float().flatten(0, 1)
        return nn.functional.cross_entropy(logits, labels[:, 1:].flatten(), ignore_index=IGNORE)

    with autocast_for(mode, batch["input_ids"].device):
        return activation_bytes(model, batch["input_ids"], batch["labels"], loss)


def tokens_per_second(model: nn.Module, batch: dict, mode: str, repeats: int = 2) -> float:
    """Predicted tokens per second of forward and backward, after one unmeasured step."""
    device = batch["input_ids"].device
    scaler = torch.amp.GradScaler(device.type) if needs_scaler(mode) else None
    tokens = int((batch["labels"][:, 1:] != IGNORE).sum())
    step(model, batch, mode, scaler)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(repeats):
        step(model, batch, mode, scaler)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    model.zero_grad(set_to_none=True)
    return repeats * tokens / (time.perf_counter() - start)


def make_batch(lm: LanguageModel, size: int, seq_len: int, device) -> dict:
    """``size`` sequences of exactly ``seq_len`` tokens, from the course text repeated: the
    longest micro-batch a run meets, which is the one memory must hold."""
    from coursekit.real_model.language_model import sequences

    pool = [ids for ids in sequences(lm.tokenizer, seq_len) if len(ids) == seq_len] or [
        (sum(sequences(lm.tokenizer, seq_len), []) * seq_len)[:seq_len]
    ]
    rows = [pool[i % len(pool)] for i in range(size)]
    return collate(rows, lm.tokenizer.pad_token_id, device)


def sweep(
    lm: LanguageModel,
    micro_batches: Iterable[int],
    seq_lens: Iterable[int],
    modes: Iterable[str] = MODES,
    device: torch.device | None = None,
    progress: bool = True,
    skip: Callable[[str], str | None] = lambda mode: None,
) -> list[Measurement]:
    """Measure every mode at every micro-batch size and sequence length.

    ``skip(mode)`` may return a reason to leave a mode out (bf16 on a GPU without it); the
    reason is printed once. Where a mode runs out of memory, that size and the larger ones
    of the same sequence length are left out of the list.
    """
    device = device or next(lm.model.parameters()).device
    micro_batches, seq_lens, modes = list(micro_batches), list(seq_lens), list(modes)
    rows: list[Measurement] = []
    total = len(modes) * len(micro_batches) * len(seq_lens)
    with Progress(total, "measuring memory", enabled=progress) as bar:
        for mode in modes:
            reason = skip(mode)
            if reason:
                print(f"{mode}: skipped ({reason})")
                for _ in range(len(micro_batches) * len(seq_lens)):
                    bar.step(f"{mode}: skipped")
                continue
            model = with_mode(lm, mode)
            for seq_len in seq_lens:
                for size in micro_batches:
                    measured = None
                    try:
                        batch = make_batch(lm, size, seq_len, device)
                        peak, estimate = measure(model, batch, mode)
                        speed = tokens_per_second(model, batch, mode, 1 + (device.type == "cuda"))
                        measured = Measurement(mode, size, seq_len, peak, estimate, speed)
                    except torch.OutOfMemoryError:
                        pass  # freed below, once the exception and its tensors are gone
                    if measured is None:
                        batch = None
                        free_memory()
                        bar.step(f"{mode}, {size} x {seq_len}: out of memory")
                        break
                    rows.append(measured)
                    bar.step(f"{mode}, {size} x {seq_len}")
            del model
            free_memory()
    return rows


class Probe:
    """``try_step(b)`` for :func:`coursekit.real_model.tune` on a GPU: one real training step
    of ``b`` sequences of ``seq_len`` tokens in ``mode`` on a copy of the model, returning its
    peak bytes (:func:`measure`) and raising ``torch.OutOfMemoryError`` where the card runs
    out.

    The copy stays on the card until :meth:`close`, so use it in a ``with`` block: a probe
    left in a notebook variable keeps a whole copy of the weights resident, and every later
    search on the same card then runs with that much less memory.

    Example::

        with memory.probe(lm, "fp32", 256) as try_step:
            tuning = tune(try_step, 256, max_memory_gb=8)
    """

    def __init__(self, lm: LanguageModel, mode: str, seq_len: int):
        self.lm, self.mode, self.seq_len = lm, mode, seq_len
        self.model: nn.Module | None = with_mode(lm, mode)

    def __call__(self, size: int) -> int:
        if self.model is None:
            raise RuntimeError("this probe is closed; make a new one with memory.probe(...)")
        device = next(self.model.parameters()).device
        batch = make_batch(self.lm, size, self.seq_len, device)
        return measure(self.model, batch, self.mode, estimate=False)[0]

    def close(self) -> None:
        """Drop the model's copy and give its memory back to the card."""
        self.model = None
        free_memory()

    def __enter__(self) -> Probe:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def probe(lm: LanguageModel, mode: str, seq_len: int) -> Probe:
    """A :class:`Probe` of ``lm`` in ``mode`` at ``seq_len`` tokens (close it after use)."""
    return Probe(lm, mode, seq_len)


def simulated_card(rows: list[Measurement], mode: str, seq_len: int, capacity_gb: float):
    """A :class:`coursekit.real_model.SimulatedDevice` of ``capacity_gb`` whose steps
    need what the sweep measured for ``mode`` at ``seq_len``: the line through its two
    largest micro-batches (memory grows linearly with the micro-batch). On a CPU, where
    nothing runs out of memory at a card's size, it stands in for the card."""
    from coursekit.real_model.simulated_device import GIB, SimulatedDevice

    points = sorted(
        (r.micro_batch, r.peak_bytes) for r in rows if (r.mode, r.seq_len) == (mode, seq_len)
    )
    if len(points) < 2:
        raise ValueError(f"the sweep has fewer than two sizes for {mode} at {seq_len} tokens")
    (b1, m1), (b2, m2) = points[-2:]
    per_sample = max(1, round((m2 - m1) / (b2 - b1)))
    base = max(0, m2 - per_sample * b2)
    return SimulatedDevice(int(capacity_gb * GIB), base, per_sample, max_calls=200)
