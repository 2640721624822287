"""Fine-tuning a causal LM with the whole recipe, and the same run in the HF Trainer.

The recipe of modules 1-5 on a real model: a window of micro-batches per optimizer step
(their sizes from :func:`coursekit.real_model.tune`), each micro-batch's summed token loss
divided by the *window's* token count (the sequences have different lengths, so a mean per
micro-batch would weigh a short micro-batch's tokens more), the learning-rate schedule counted
in optimizer steps, gradient clipping once per window on the unscaled gradients, and any of
the memory modes of :mod:`coursekit.real_model.memory` (checkpointing, fp16 with a GradScaler, bf16,
LoRA).

Run with one micro-batch per window holding the whole effective batch, the same function is
the large-batch run that accumulation reproduces: same samples, same order, same steps.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from coursekit.progress import Progress
from coursekit.real_model.language_model import (
    IGNORE,
    LanguageModel,
    collate,
    predicted_tokens,
    summed_loss,
)
from coursekit.real_model.memory import autocast_for, needs_scaler, parts_of, with_mode
from coursekit.schedules import warmup_cosine

LR = 3e-3
CLIP = 1.0


@dataclass
class TrainingRun:
    """What one run leaves: the loss and learning rate of every optimizer step, its weights,
    and how fast it went."""

    name: str
    losses: list[float] = field(default_factory=list)  # the window's mean token loss
    learning_rates: list[float] = field(default_factory=list)
    weights: dict[str, torch.Tensor] = field(default_factory=dict)
    skipped_steps: int = 0  # fp16: windows the GradScaler skipped (an inf or nan gradient)
    tokens: int = 0  # predicted tokens trained on, in all windows
    seconds: float = 0.0  # the training loop's time (not the model's copy or set-up)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


def windows(
    sequences: Sequence[list[int]], sizes: Sequence[int], steps: int
) -> list[list[list[list[int]]]]:
    """``steps`` windows of micro-batches of the given ``sizes``, taking the sequences in
    order and starting again at the first when they run out (the next epoch)."""
    window_size = sum(sizes)
    taken = [sequences[i % len(sequences)] for i in range(steps * window_size)]
    result = []
    for start in range(0, len(taken), window_size):
        window, position = [], start
        for size in sizes:
            window.append(taken[position : position + size])
            position += size
        result.append(window)
    return result


def train(
    lm: LanguageModel,
    sequences: Sequence[list[int]],
    sizes: Sequence[int],
    steps: int,
    mode: str = "fp32",
    lr: float = LR,
    warmup_steps: int = 1,
    name: str | None = None,
    progress: bool = True,
) -> TrainingRun:
    """Fine-tune a copy of ``lm.model`` for ``steps`` optimizer steps, each a window of
    micro-batches of ``sizes`` (``[256]``: the large batch; ``[32] * 8``: accumulation)."""
    model = with_mode(lm, mode)
    device = next(model.parameters()).device
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=lr, weight_decay=0.0)
    scheduler = warmup_cosine(optimizer, min(warmup_steps, steps - 1), steps)
    scaler = torch.amp.GradScaler(device.type) if needs_scaler(mode) else None
    run = TrainingRun(name or f"{len(sizes)} x {max(sizes)} ({mode})")
    pad = lm.tokenizer.pad_token_id
    start = time.perf_counter()
    with Progress(steps, f"training: {run.name}", enabled=progress) as bar:
        for window in windows(sequences, sizes, steps):
            batches = [collate(rows, pad, device) for rows in window]
            tokens = sum(predicted_tokens(b) for b in batches)  # the window's, not each one's
            run.tokens += tokens
            total = 0.0
            for batch in batches:
                with autocast_for(mode, device):
                    loss = summed_loss(model, batch) / tokens
                (scaler.scale(loss) if scaler else loss).backward()
                total += loss.item()
            if scaler:
                scaler.unscale_(optimizer)  # once per window, before clipping
            torch.nn.utils.clip_grad_norm_(trainable, CLIP)
            run.learning_rates.append(optimizer.param_groups[0]["lr"])
            if scaler:
                before = scaler.get_scale()
                scaler.step(optimizer)
                scaler.update()
                run.skipped_steps += scaler.get_scale() < before
            else:
                optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            run.losses.append(total)  # .item() waited for the device: the time is real
            bar.step(f"loss {total:.3f}")
    run.seconds = time.perf_counter() - start
    run.weights = _trainable_weights(model)
    return run


def _trainable_weights(model: nn.Module) -> dict[str, torch.Tensor]:
    return {
        name: p.detach().float().cpu().clone()
        for name, p in model.named_parameters()
        if p.requires_grad
    }


def max_weight_difference(a: TrainingRun, b: TrainingRun) -> float:
    """The largest difference between two runs' weights, relative to the largest weight."""
    diff = max((a.weights[k] - b.weights[k]).abs().max().item() for k in a.weights)
    scale = max(w.abs().max().item() for w in a.weights.values())
    return diff / scale


def with_hf_trainer(
    lm: LanguageModel,
    sequences: Sequence[list[int]],
    micro_batch: int,
    accum_steps: int,
    steps: int,
    lr: float = LR,
    warmup_steps: int = 1,
    mode: str = "fp32",
) -> TrainingRun:
    """The same fine-tuning in ``transformers.Trainer`` with ``gradient_accumulation_steps``:
    the same model copy in the same ``mode`` (:func:`train`'s: ``bf16`` or ``fp16`` become the
    Trainer's ``bf16=True`` or ``fp16=True``, a GradScaler included), sequences in the same
    order, AdamW and schedule, clipping at 1.0.

    The Trainer divides the window's summed loss by its own count, ``num_items_in_batch``:
    the labels that are not -100, counted from the second position on (``labels[..., 1:]``,
    the tokens the loss scores) only for models whose ``loss_type`` maps to transformers'
    causal-LM loss (class names containing ``ForCausalLM``, or ``ForConditionalGeneration``
    for a decoder-only model). For GPT-2 (``GPT2LMHeadModel``, this module's model) it counts
    every label, the first of each sequence too, so its loss and gradient come out smaller
    than :func:`train`'s by predicted / labelled tokens (module 7 measures it; transformers
    5.25). ``seconds`` is the Trainer's own ``train_runtime``.
    """
    from transformers import PrinterCallback, Trainer, TrainingArguments

    parts = parts_of(mode)
    model = with_mode(lm, mode)
    device = next(model.parameters()).device
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=lr, weight_decay=0.0)
    scheduler = warmup_cosine(optimizer, min(warmup_steps, steps - 1), steps)
    taken = [sequences[i % len(sequences)] for i in range(steps * micro_batch * accum_steps)]
    dataset = [{"input_ids": ids} for ids in taken]
    pad = lm.tokenizer.pad_token_id

    class InOrder(Trainer):
        """Takes the samples in the dataset's order, as the course's loop does."""

        def _get_train_sampler(self, *args, **kwargs):
            return torch.utils.data.SequentialSampler(self.train_dataset)

    with tempfile.TemporaryDirectory() as root:
        args = TrainingArguments(
            output_dir=root,
            max_steps=steps,
            per_device_train_batch_size=micro_batch,
            gradient_accumulation_steps=accum_steps,
            learning_rate=lr,
            max_grad_norm=CLIP,
            logging_strategy="steps",
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            disable_tqdm=True,
            use_cpu=device.type == "cpu",
            bf16="bf16" in parts,
            fp16="fp16" in parts,
            dataloader_pin_memory=False,
            remove_unused_columns=False,
        )
        trainer = InOrder(
            model=model,
            args=args,
            train_dataset=dataset,
            data_collator=lambda items: collate([i["input_ids"] for i in items], pad),
            optimizers=(optimizer, scheduler),
        )
        trainer.remove_callback(PrinterCallback)
        output = trainer.train()
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    run = TrainingRun(f"HF Trainer ({micro_batch} x {accum_steps}, {mode})")
    run.seconds = float(output.metrics["train_runtime"])
    run.tokens = sum(
        predicted_tokens(collate(rows, pad))
        for window in windows(sequences, [micro_batch] * accum_steps, steps)
        for rows in window
    )
    run.losses = [entry["loss"] for entry in logs]
    run.learning_rates = [entry["learning_rate"] for entry in logs]
    run.weights = _trainable_weights(model)
    return run


__all__ = [
    "IGNORE",
    "TrainingRun",
    "max_weight_difference",
    "train",
    "windows",
    "with_hf_trainer",
]
