"""The HF Trainer's ``auto_find_batch_size`` against :func:`coursekit.real_model.tune`, on a
simulated card: the first shrinks the micro-batch and keeps the accumulation steps, so the
effective batch shrinks with it; the second keeps the effective batch and raises the steps.

What the Trainer does (transformers 5.25 ``trainer.py``; accelerate 1.16
``utils/memory.py``): ``train()`` wraps ``_inner_training_loop`` in
``transformers.trainer_utils.find_executable_batch_size(..., auto_find_batch_size=True)``,
which is accelerate's ``find_executable_batch_size`` starting at
``per_device_train_batch_size``. Each out-of-memory error (a ``RuntimeError`` whose only
argument contains " out of memory.", ``should_reduce_batch_size``) restarts the loop with
``int(batch_size * 0.9)`` (accelerate >= 1.9; 1.0 to 1.8 halve); ``_update_auto_batch_size``
sets only ``_train_batch_size``, and ``args.gradient_accumulation_steps`` is never touched,
so the effective batch is the found micro-batch x the accumulation steps asked for.

Two ways to run it here, both on the CPU in well under a second of probing:

- ``mechanism="find_executable_batch_size"`` (the default): the very function the Trainer
  calls, around a training loop that runs one step of ``batch_size`` on the simulated card
  and computes the effective batch as the Trainer's ``set_initial_training_values`` does
  (``_train_batch_size x gradient_accumulation_steps x world_size``);
- ``mechanism="trainer"``: the real ``Trainer`` with ``auto_find_batch_size=True`` on the
  course's tiny model for one optimizer step, its data collator asking the simulated card
  for each micro-batch's memory (so an OOM is raised inside the Trainer's own loop); the
  answer is read back from the Trainer (``_train_batch_size``, ``args``). Its ``tried``
  list ends with the micro-batches of the one optimizer step it then trains.
"""

from __future__ import annotations

import tempfile
import warnings
from dataclasses import dataclass

from coursekit.arguments import choice, whole
from coursekit.real_model.simulated_device import SimulatedDevice
from coursekit.real_model.tuning import GIB, tune

MiB = 2**20
MECHANISMS = ("find_executable_batch_size", "trainer")


def default_card() -> SimulatedDevice:
    """Module 7's CPU card: 64 MiB, a step needing 2 MiB plus 1.71 MiB per sequence (the
    tiny model's measured line at 64 tokens)."""
    return SimulatedDevice(64 * MiB, 2 * MiB, int(1.71 * MiB), max_calls=200)


@dataclass(frozen=True)
class BatchChoice:
    """What one finder settled on, and every size it tried, in order."""

    finder: str
    micro_batch_size: int
    accum_steps: int
    effective_batch: int
    tried: tuple[int, ...]


@dataclass(frozen=True)
class AutoBatchComparison:
    """The Trainer's choice and the tuner's, for the same asked-for window."""

    asked_effective_batch: int
    trainer: BatchChoice
    tuner: BatchChoice
    mechanism: str

    def __str__(self) -> str:
        lines = [f"asked for: {self.asked_effective_batch} samples per optimizer step"]
        for choice_ in (self.trainer, self.tuner):
            lines.append(
                f"{choice_.finder}: micro-batch {choice_.micro_batch_size} x "
                f"{choice_.accum_steps} accumulation steps = {choice_.effective_batch} "
                f"samples per step (tried {', '.join(map(str, choice_.tried))})"
            )
        return "\n".join(lines)


def _tried(card: SimulatedDevice, start: int) -> tuple[int, ...]:
    return tuple(e["size"] for e in card.log[start:] if e["event"] in ("ok", "oom"))


def _with_find_executable_batch_size(card, per_device, accum_steps) -> tuple[int, int]:
    from transformers.trainer_utils import find_executable_batch_size

    def inner_training_loop(batch_size: int) -> tuple[int, int]:
        train_batch_size = batch_size  # _update_auto_batch_size: only this changes
        card.try_step(train_batch_size)  # the first step's forward and backward
        total_train_batch_size = train_batch_size * accum_steps * 1  # world_size 1
        return train_batch_size, total_train_batch_size

    loop = find_executable_batch_size(
        inner_training_loop, starting_batch_size=per_device, auto_find_batch_size=True
    )
    return loop()


def _with_trainer(card, per_device, accum_steps) -> tuple[int, int]:
    import torch
    from transformers import Trainer, TrainingArguments
    from transformers.trainer_callback import PrinterCallback

    from coursekit.real_model.language_model import TINY, collate, load, sequences

    lm = load(TINY, torch.device("cpu"))
    rows = sequences(lm.tokenizer, 16)[: per_device * accum_steps]
    rows = (rows * (per_device * accum_steps // max(1, len(rows)) + 1))[: per_device * accum_steps]
    data = [{"input_ids": ids} for ids in rows]

    def collator(features):
        card.try_step(len(features))  # raises the simulated OOM inside the Trainer's loop
        return collate([f["input_ids"] for f in features], lm.tokenizer.pad_token_id)

    with tempfile.TemporaryDirectory() as out, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        args = TrainingArguments(
            output_dir=out,
            per_device_train_batch_size=per_device,
            gradient_accumulation_steps=accum_steps,
            auto_find_batch_size=True,
            max_steps=1,
            use_cpu=True,
            report_to=[],
            save_strategy="no",
            logging_strategy="no",
            disable_tqdm=True,
            dataloader_num_workers=0,
        )
        trainer = Trainer(model=lm.model, args=args, train_dataset=data, data_collator=collator)
        trainer.remove_callback(PrinterCallback)  # it prints the run's metrics dict
        trainer.train()
    micro = trainer._train_batch_size
    return micro, micro * trainer.args.gradient_accumulation_steps * trainer.args.world_size


def auto_batch_comparison(
    card: SimulatedDevice | None = None,
    per_device_train_batch_size: int = 64,
    gradient_accumulation_steps: int = 4,
    *,
    mechanism: str = "find_executable_batch_size",
    margin: float = 0.1,
) -> AutoBatchComparison:
    """Both finders on ``card`` (a fresh :func:`default_card` when None) for a window of
    ``per_device_train_batch_size x gradient_accumulation_steps`` samples: the Trainer's
    ``auto_find_batch_size`` (by ``mechanism``, see the module docstring) and
    :func:`coursekit.real_model.tune` with the same target and ``margin``."""
    per_device = whole("per_device_train_batch_size", per_device_train_batch_size)
    accum_steps = whole("gradient_accumulation_steps", gradient_accumulation_steps)
    mechanism = choice("mechanism", mechanism, MECHANISMS)
    card = card if card is not None else default_card()
    target = per_device * accum_steps

    start = len(card.log)
    run = _with_trainer if mechanism == "trainer" else _with_find_executable_batch_size
    micro, effective = run(card, per_device, accum_steps)
    trainer = BatchChoice(
        "HF Trainer auto_find_batch_size", micro, accum_steps, effective, _tried(card, start)
    )
    card.free_memory()

    start = len(card.log)
    tuning = tune(
        card.try_step,
        target,
        card.capacity_bytes / GIB,
        margin=margin,
        free=card.free_memory,
        progress=False,
    )
    tuner = BatchChoice(
        "coursekit.real_model.tuning.tune",
        tuning.largest_fit,
        tuning.plan.accum_steps,
        tuning.plan.effective_batch,
        _tried(card, start),
    )
    return AutoBatchComparison(target, trainer, tuner, mechanism)
