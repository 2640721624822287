"""The same small training run in the course's own loop, HF Accelerate, PyTorch Lightning
and the HF Trainer, so that module 5 can show where the frameworks' accumulation differs.

Every run trains the same seeded :func:`~coursekit.models.tiny_lm` on the same padded token
micro-batches, in the same order, for one epoch on the CPU in float32, with plain SGD (no
momentum: Adam would hide a scaled gradient) and the same warm-up and linear-decay schedule
counted in optimizer steps, and hands back a :class:`FrameworkRun` in units every framework
shares; :mod:`coursekit.framework_comparison` then says how far each run's weights end up
from the course's own loop. The frameworks are an optional extra (``pip install
"coursekit[frameworks]"``): they are imported inside the functions, so importing this module
needs none of them (:func:`coursekit.frameworks.missing` says what to install), and their
banners, warnings and progress output are kept out of the notebook.

What the runs show (module 5): Accelerate and Lightning divide every micro-batch's mean loss
by ``accum_steps``, the last, shorter window's too; the HF Trainer divides the last window by
its real length, and normalises by the window's real tokens when the model accepts
``num_items_in_batch``.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import random
import tempfile
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import numpy as np
import torch
from torch import nn

from coursekit.models import tiny_lm
from coursekit.schedules import optimizer_steps
from coursekit.tokens import TokenBatch, count_tokens, lm_loss, make_token_batches
from coursekit.tokens import split_token_batches as _split

LR = 0.5  # plain SGD; large enough that a mis-scaled window moves the weights visibly
VOCAB_SIZE = 32


@dataclass
class FrameworkRun:
    """What one training run did, in units every framework shares.

    Attributes:
        name: who trained, with the version, e.g. ``"HF Accelerate 1.16.0"``.
        losses: per optimizer step, the window's loss as the framework hands it back: the sum
            of the losses its backward received, so a window divided by ``accum_steps`` instead
            of its length shows up as a smaller loss. Course loop and Accelerate (which reports
            none itself): the micro-batch losses after their division. Lightning: the
            ``outputs["loss"]`` its ``on_train_batch_end`` hook receives. HF Trainer:
            ``"loss"`` in ``trainer.state.log_history``, logged every step.
        learning_rates: the learning rate each optimizer step used.
        optimizer_steps: how many times the optimizer stepped.
        parameters: the final weights of the ``tiny_lm``, by name; detached copies.
        details: framework-specific facts measured during the run.
    """

    name: str
    losses: list[float]
    learning_rates: list[float]
    optimizer_steps: int
    parameters: dict[str, torch.Tensor]
    details: dict[str, Any] = field(default_factory=dict)


def token_micro_batches(n_micro_batches: int = 10, seed: int = 0) -> list[TokenBatch]:
    """Padded token micro-batches of 1 to 4 sequences each, with unequal token counts.

    Ten of them with ``accum_steps=4`` leave a last window of 2, so both a last window
    divided by 4 and a mean per micro-batch (instead of per token) change the weights.
    """
    sizes = [1 + (3 * index + seed) % 4 for index in range(n_micro_batches)]
    inputs, labels = make_token_batches(sum(sizes), vocab_size=VOCAB_SIZE, seed=seed)
    return _split(inputs, labels, sizes)


def warmup_linear(warmup_steps: int, total_steps: int) -> Callable[[int], float]:
    """The learning-rate factor at optimizer step ``s`` (from 0), for ``LambdaLR``.

    Linear warm-up to 1 over ``warmup_steps``, the first step at ``1 / warmup_steps``, then
    linear decay to 0 at ``total_steps`` (as :func:`coursekit.schedules.warmup_linear_decay`).
    Every run gets it, so learning rates differ only where a framework steps it differently.
    """

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        return max(0.0, (total_steps - step) / (total_steps - warmup_steps))

    return factor


def _schedule(optimizer: torch.optim.Optimizer, warmup_steps: int, total_steps: int):
    return torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_linear(warmup_steps, total_steps))


def _weights(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: param.detach().clone() for name, param in model.named_parameters()}


def _version(module: str) -> str:
    return importlib.import_module(module).__version__


@contextlib.contextmanager
def _quiet(modules: Sequence[str], **environment: str) -> Iterator[None]:
    """Import ``modules``, then run the block with their warnings and info logs off, under
    ``environment``; restore the caller's log levels, environment and global RNGs after.

    The modules are imported first because importing Lightning sets its loggers to INFO;
    the RNGs are restored because the HF Trainer reseeds Python's, NumPy's and torch's.
    """
    saved_environment, levels = dict(os.environ), {}
    rngs = random.getstate(), np.random.get_state(), torch.random.get_rng_state()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            os.environ.update(environment)
            for module in modules:
                importlib.import_module(module)
                levels[module] = logging.getLogger(module).level
                logging.getLogger(module).setLevel(logging.ERROR)
            yield
    finally:
        for module, level in levels.items():
            logging.getLogger(module).setLevel(level)
        os.environ.clear()
        os.environ.update(saved_environment)
        random.setstate(rngs[0])
        np.random.set_state(rngs[1])
        torch.random.set_rng_state(rngs[2])


def course_loop(
    micro_batches: Sequence[TokenBatch],
    accum_steps: int,
    *,
    lr: float = LR,
    warmup_steps: int = 1,
    normalisation: str = "tokens",
    last_window: str = "own_length",
    seed: int = 0,
) -> FrameworkRun:
    """The course's own loop, with the frameworks' choices as switches.

    Args:
        normalisation: ``"tokens"`` (right): each micro-batch's summed loss divided by the
            window's real tokens. ``"mean_of_means"``: each micro-batch's mean loss divided by
            the window's number of micro-batches: all a loop that sees mean losses can do.
        last_window: ``"own_length"`` (right): a last window of ``r`` micro-batches is
            normalised by its own length or tokens. ``"divided_by_n"``: its loss gets only
            ``r / accum_steps`` of that, as when every loss is divided by ``accum_steps``.

    Example:
        >>> run = course_loop(token_micro_batches(10), accum_steps=4)
        >>> run.optimizer_steps, run.learning_rates
        (3, [0.5, 0.5, 0.25])
    """
    if normalisation not in ("tokens", "mean_of_means"):
        raise ValueError(
            f"normalisation must be 'tokens' or 'mean_of_means'; got {normalisation!r}."
        )
    if last_window not in ("own_length", "divided_by_n"):
        raise ValueError(
            f"last_window must be 'own_length' or 'divided_by_n'; got {last_window!r}."
        )
    model = tiny_lm(VOCAB_SIZE, seed=seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    scheduler = _schedule(optimizer, warmup_steps, optimizer_steps(len(micro_batches), accum_steps))
    divided_by_n = last_window == "divided_by_n"
    losses, learning_rates = [], []
    for start in range(0, len(micro_batches), accum_steps):
        window = micro_batches[start : start + accum_steps]
        divisor = accum_steps if divided_by_n else len(window)  # of a mean per micro-batch
        share = len(window) / accum_steps if divided_by_n else 1.0  # of the per-token mean
        window_tokens = sum(count_tokens(labels) for _, labels in window)
        logged = 0.0
        for inputs, labels in window:
            if normalisation == "tokens":
                loss = lm_loss(model(inputs), labels, "sum") / window_tokens * share
            else:
                loss = lm_loss(model(inputs), labels) / divisor
            loss.backward()
            logged += loss.item()
        learning_rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
        losses.append(logged)
    name = f"course loop ({normalisation}, last window {last_window})"
    return FrameworkRun(name, losses, learning_rates, len(losses), _weights(model))


def with_accelerate(
    micro_batches: Sequence[TokenBatch],
    accum_steps: int,
    *,
    lr: float = LR,
    warmup_steps: int = 1,
    seed: int = 0,
    prepare_dataloader: bool = True,
) -> FrameworkRun:
    """The loop of Accelerate's gradient-accumulation guide: ``accelerator.accumulate(model)``
    and ``accelerator.backward``, with model, optimizer, scheduler and dataloader prepared.

    ``prepare_dataloader=False`` iterates the plain DataLoader instead: Accelerate then does
    not see the end of the data and keeps counting micro-batches across epochs. In this
    one-epoch run the last, shorter window is therefore never stepped; over several epochs an
    epoch's leftover micro-batches would share a window with the next epoch's first ones.
    """
    with _quiet(["accelerate"]):
        from accelerate import Accelerator

        accelerator = Accelerator(gradient_accumulation_steps=accum_steps, cpu=True)
        model = tiny_lm(VOCAB_SIZE, seed=seed)
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        total_steps = optimizer_steps(len(micro_batches), accum_steps)
        scheduler = _schedule(optimizer, warmup_steps, total_steps)
        # batch_size=None: each item is a whole prepared micro-batch, taken in order.
        dataloader = torch.utils.data.DataLoader(list(micro_batches), batch_size=None)
        model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
        if prepare_dataloader:
            dataloader = accelerator.prepare(dataloader)
        losses, learning_rates, logged = [], [], 0.0
        for inputs, labels in dataloader:
            with accelerator.accumulate(model):
                loss = lm_loss(model(inputs), labels)
                accelerator.backward(loss)  # divides by gradient_accumulation_steps
                logged += loss.item() / accelerator.gradient_accumulation_steps
                if accelerator.sync_gradients:
                    learning_rates.append(optimizer.param_groups[0]["lr"])
                    losses.append(logged)
                    logged = 0.0
                optimizer.step()  # these three do nothing unless sync_gradients
                scheduler.step()
                optimizer.zero_grad()
        details = {
            "scheduler_steps": scheduler.scheduler.last_epoch,
            "adjust_scheduler": accelerator.gradient_state.adjust_scheduler,
            "gradient_left_over": any(p.grad is not None for p in model.parameters()),
        }
        accelerator.free_memory()
    name = f"HF Accelerate {_version('accelerate')}"
    return FrameworkRun(name, losses, learning_rates, len(losses), _weights(model), details)


def with_lightning(
    micro_batches: Sequence[TokenBatch],
    accum_steps: int,
    *,
    lr: float = LR,
    warmup_steps: int = 1,
    seed: int = 0,
) -> FrameworkRun:
    """``lightning.Trainer(accumulate_grad_batches=accum_steps)``, its scheduler stepped every
    optimizer step (``interval="step"``) over ``trainer.estimated_stepping_batches`` steps.
    """
    with _quiet(["lightning.fabric", "lightning.pytorch"]):
        import lightning.pytorch as pl

        lm = tiny_lm(VOCAB_SIZE, seed=seed)
        seen: dict[str, list] = {"lr": [], "step_ends": [], "returned": [], "hook": []}

        class TokenLM(pl.LightningModule):
            def __init__(self) -> None:
                super().__init__()
                self.lm = lm

            def training_step(self, batch: TokenBatch, batch_idx: int) -> torch.Tensor:
                loss = lm_loss(self.lm(batch[0]), batch[1])
                seen["returned"].append(loss.item())
                return loss

            def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
                seen["hook"].append(outputs["loss"].item())

            def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
                seen["lr"].append(optimizer.param_groups[0]["lr"])
                seen["step_ends"].append(len(seen["returned"]))

            def configure_optimizers(self) -> dict[str, Any]:
                optimizer = torch.optim.SGD(self.parameters(), lr=lr)
                seen["total_steps"] = self.trainer.estimated_stepping_batches
                scheduler = _schedule(optimizer, warmup_steps, seen["total_steps"])
                schedule = {"scheduler": scheduler, "interval": "step"}
                return {"optimizer": optimizer, "lr_scheduler": schedule}

        with tempfile.TemporaryDirectory() as root:
            trainer = pl.Trainer(
                accelerator="cpu",
                devices=1,
                max_epochs=1,
                accumulate_grad_batches=accum_steps,
                logger=False,
                enable_checkpointing=False,
                enable_progress_bar=False,
                enable_model_summary=False,
                num_sanity_val_steps=0,
                default_root_dir=root,
            )
            dataloader = torch.utils.data.DataLoader(list(micro_batches), batch_size=None)
            trainer.fit(TokenLM(), train_dataloaders=dataloader)
    ends = seen["step_ends"]
    losses = [sum(seen["hook"][start:end]) for start, end in pairwise([0, *ends])]
    details = {
        "estimated_stepping_batches": seen["total_steps"],
        "global_step": trainer.global_step,
        "training_step_losses": seen["returned"],  # what self.log would be given
        "on_train_batch_end_losses": seen["hook"],  # outputs["loss"]: divided by accum_steps
    }
    name = f"PyTorch Lightning {_version('lightning')}"
    return FrameworkRun(name, losses, seen["lr"], trainer.global_step, _weights(lm), details)


class _TrainerLM(nn.Module):
    """A plain ``nn.Module`` for the HF Trainer: keyword tensors in, ``{"loss": ...}`` out.

    With ``accepts_loss_kwargs`` the Trainer passes ``num_items_in_batch``, the window's real
    token count, and the loss is the summed loss over it; without, the mean over this
    micro-batch's tokens, which the Trainer divides by the window's length.
    """

    def __init__(self, lm: nn.Module, accepts_loss_kwargs: bool) -> None:
        super().__init__()
        self.lm = lm
        self.accepts_loss_kwargs = accepts_loss_kwargs  # read by Trainer.__init__
        self.num_items_seen: list[int] = []

    def forward(
        self, input_ids: torch.Tensor, labels: torch.Tensor, num_items_in_batch=None
    ) -> dict[str, torch.Tensor]:
        logits = self.lm(input_ids)
        if num_items_in_batch is None:
            return {"loss": lm_loss(logits, labels)}
        self.num_items_seen.append(int(num_items_in_batch))
        return {"loss": lm_loss(logits, labels, "sum") / num_items_in_batch}


def with_hf_trainer(
    micro_batches: Sequence[TokenBatch],
    accum_steps: int,
    *,
    lr: float = LR,
    warmup_steps: int = 1,
    seed: int = 0,
    num_items_in_batch: bool = True,
    lr_scheduler_type: str | None = None,
) -> FrameworkRun:
    """``transformers.Trainer`` with ``gradient_accumulation_steps=accum_steps``, offline, no
    checkpoints, no reports, no gradient clipping (its default clips at 1.0).

    Args:
        num_items_in_batch: ``True``: the model accepts it and normalises by the window's
            tokens (the fix of October 2024). ``False``: the model returns each micro-batch's
            mean loss, as models did before the fix.
        lr_scheduler_type: ``None`` passes the course's schedule in with the optimizer; a
            name such as ``"linear"`` lets the Trainer build its own from ``warmup_steps``.
    """
    # Offline before the first import: huggingface_hub reads these when it is imported.
    with _quiet(["accelerate", "transformers"], HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1"):
        from transformers import PrinterCallback, Trainer, TrainingArguments

        lm = tiny_lm(VOCAB_SIZE, seed=seed)
        model = _TrainerLM(lm, accepts_loss_kwargs=num_items_in_batch)
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        scheduler = None
        if lr_scheduler_type is None:
            total_steps = optimizer_steps(len(micro_batches), accum_steps)
            scheduler = _schedule(optimizer, warmup_steps, total_steps)
        dataset = [{"input_ids": inputs, "labels": labels} for inputs, labels in micro_batches]
        with tempfile.TemporaryDirectory() as root:
            args = TrainingArguments(
                output_dir=root,
                num_train_epochs=1,
                per_device_train_batch_size=1,  # one item: one whole prepared micro-batch
                gradient_accumulation_steps=accum_steps,
                learning_rate=lr,
                lr_scheduler_type=lr_scheduler_type or "linear",
                warmup_steps=warmup_steps,
                max_grad_norm=0.0,
                train_sampling_strategy="sequential",
                remove_unused_columns=False,
                logging_strategy="steps",
                logging_steps=1,
                save_strategy="no",
                report_to="none",
                disable_tqdm=True,
                use_cpu=True,
                dataloader_pin_memory=False,
                seed=seed,
            )
            trainer = Trainer(
                model=model,
                args=args,
                train_dataset=dataset,
                data_collator=lambda items: items[0],
                optimizers=(optimizer, scheduler),
            )
            trainer.remove_callback(PrinterCallback)  # with disable_tqdm it prints every log
            trainer.train()
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    details = {
        "max_steps": trainer.state.max_steps,
        "model_accepts_loss_kwargs": trainer.model_accepts_loss_kwargs,
        "num_items_in_batch": model.num_items_seen,  # per micro-batch
        "train_loss": trainer.state.log_history[-1]["train_loss"],
    }
    name = f"HF Trainer {_version('transformers')}"
    if not num_items_in_batch:
        name += " (no num_items_in_batch)"
    losses = [entry["loss"] for entry in logs]
    learning_rates = [entry["learning_rate"] for entry in logs]
    steps = trainer.state.global_step
    return FrameworkRun(name, losses, learning_rates, steps, _weights(lm), details)
