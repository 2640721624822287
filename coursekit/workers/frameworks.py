"""Framework runs on several gloo processes, started by :func:`coursekit.distributed.run_workers`.

Some framework behaviour exists only with more than one process: HF Accelerate steps a
*prepared* scheduler ``num_processes`` times per optimizer step (``AcceleratedScheduler``,
with the default ``split_batches=False``), on the reasoning that each process now sees
``1 / num_processes`` of the batches. A one-process run cannot show it, so module 5 runs this
worker on two real processes. Accelerate joins the process group that ``run_workers`` has
already started (its distributed type is then ``MULTI_CPU``).
"""

from __future__ import annotations

import os

import torch


def _announce(rank: int, world_size: int) -> None:
    """Tell Accelerate (and the Trainer on top of it) who this process is, as a launcher
    would; it then joins the gloo group run_workers started (``MULTI_CPU``)."""
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world_size),
        OMP_NUM_THREADS="1",  # quiets Accelerate's "we set it at 1" warning
    )


def accelerate_scheduler_run(
    rank: int,
    world_size: int,
    *,
    micro_batches_per_epoch: int,
    accum_steps: int,
    epochs: int,
    scheduler_total: int,
) -> dict:
    """Train a one-weight model with ``Accelerator(gradient_accumulation_steps=accum_steps)``
    and a prepared linear-decay scheduler of length ``scheduler_total``.

    Each process gets ``micro_batches_per_epoch`` micro-batches per epoch. Returns the
    learning rate after every optimizer step, the optimizer steps taken and how far the
    wrapped scheduler itself went (``last_epoch``), for this process.
    """
    _announce(rank, world_size)
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=accum_steps)
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    samples = torch.ones(micro_batches_per_epoch * world_size, 1)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(samples), batch_size=1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: max(0.0, 1 - step / scheduler_total)
    )
    model, optimizer, loader, prepared = accelerator.prepare(model, optimizer, loader, scheduler)
    rates, steps = [], 0
    for _ in range(epochs):
        for (inputs,) in loader:
            with accelerator.accumulate(model):
                accelerator.backward(model(inputs).sum())
                optimizer.step()
                prepared.step()
                optimizer.zero_grad()
                if accelerator.sync_gradients:
                    steps += 1
                    rates.append(prepared.get_last_lr()[0])
    return {
        "distributed_type": str(accelerator.distributed_type).rpartition(".")[2],
        "micro_batches_per_epoch": len(loader),
        "optimizer_steps": steps,
        "scheduler_steps": scheduler.last_epoch,
        "learning_rates": rates,
    }


def _rank_windows(rank: int, world_size: int, accum_steps: int, steps: int, seed: int):
    """Every rank's micro-batches, window by window, and this rank's own: short sequences on
    even ranks and long ones on odd ranks, so the ranks' token counts differ."""
    from coursekit.tokens import make_token_batches, split_token_batches

    per_rank = []
    for other in range(world_size):
        padding_ratio = 0.8 if other % 2 == 0 else 0.2
        inputs, labels = make_token_batches(
            4 * accum_steps * steps, seq_len=12, padding_ratio=padding_ratio, seed=seed + other
        )
        per_rank.append(split_token_batches(inputs, labels, [4] * (accum_steps * steps)))
    windows = [
        [batch for other in per_rank for batch in other[s * accum_steps : (s + 1) * accum_steps]]
        for s in range(steps)
    ]
    return windows, per_rank[rank]


def accelerate_gradients_run(
    rank: int, world_size: int, *, accum_steps: int = 2, steps: int = 3, seed: int = 7
) -> dict:
    """Train the tiny language model with ``accelerator.accumulate`` on ``world_size``
    processes and compare how far its weights moved with the course's loop in one process,
    whose windows hold every rank's micro-batches (SGD, float64, ``steps`` optimizer steps).

    Two losses: the mean per micro-batch that Accelerate's guide starts from (a mean of
    means, over micro-batches and over ranks), and the sum over tokens scaled by
    ``global_token_scale`` times ``accum_steps``, which undoes the division
    ``accelerator.backward`` makes (the recipe of Accelerate's guide for token losses).
    """
    _announce(rank, world_size)
    from accelerate import Accelerator

    from coursekit.gradients import relative_error
    from coursekit.models import tiny_lm
    from coursekit.tokens import count_tokens, global_token_scale, lm_loss, train_token_lm

    def weights(model):
        return torch.cat([p.detach().flatten() for p in model.parameters()])

    windows, mine = _rank_windows(rank, world_size, accum_steps, steps, seed)
    start_weights = weights(tiny_lm(dtype=torch.float64))
    reference = tiny_lm(dtype=torch.float64)
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.5)
    flat_windows = [batch for window in windows for batch in window]
    train_token_lm(reference, optimizer, flat_windows, accum_steps * world_size, "tokens")
    wanted = weights(reference) - start_weights  # what the course's loop moved the weights by
    gaps, steps_taken = {}, {}
    for label in ("mean per micro-batch", "global token count"):
        accelerator = Accelerator(cpu=True, gradient_accumulation_steps=accum_steps)
        model = tiny_lm(dtype=torch.float64)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        model, optimizer = accelerator.prepare(model, optimizer)
        taken = 0
        for start in range(0, len(mine), accum_steps):
            window = mine[start : start + accum_steps]
            scale = global_token_scale([count_tokens(y) for _, y in window]) * accum_steps
            for inputs, labels in window:
                with accelerator.accumulate(model):
                    if label == "mean per micro-batch":
                        loss = lm_loss(model(inputs), labels)
                    else:
                        loss = lm_loss(model(inputs), labels, reduction="sum") * scale
                    accelerator.backward(loss)  # divides by gradient_accumulation_steps
                    if accelerator.sync_gradients:
                        taken += 1
                    optimizer.step()
                    optimizer.zero_grad()
        gaps[label] = relative_error(weights(model) - start_weights, wanted)
        steps_taken[label] = taken
        accelerator.free_memory()
    return {"rank": rank, "weight_gaps": gaps, "optimizer_steps": steps_taken}


class _TokenLM(torch.nn.Module):
    """The course's tiny language model as the HF Trainer calls it: ``forward(input_ids,
    labels, num_items_in_batch=None, **kwargs)`` returns ``{"loss": ...}``. With the window's
    token count the loss is the summed loss over it (what transformers' own models do);
    without, the mean per real token of this micro-batch."""

    def __init__(self):
        from coursekit.models import tiny_lm

        super().__init__()
        self.net = tiny_lm(dtype=torch.float64)

    def forward(self, input_ids, labels, num_items_in_batch=None, **kwargs):
        from coursekit.tokens import lm_loss

        logits = self.net(input_ids)
        if num_items_in_batch is None:
            return {"loss": lm_loss(logits, labels)}
        return {"loss": lm_loss(logits, labels, reduction="sum") / num_items_in_batch}


def trainer_run(
    rank: int, world_size: int, *, accum_steps: int = 2, steps: int = 3, seed: int = 7
) -> dict:
    """The HF Trainer on ``world_size`` gloo processes (SGD, no clipping, constant rate, the
    sequences in order), against the course's loop in one process on the same windows. The
    Trainer counts the window's real tokens (``num_items_in_batch``) and, with
    ``average_tokens_across_devices`` (its default), sums the count over the processes."""
    import tempfile

    _announce(rank, world_size)
    import transformers
    from transformers import Trainer, TrainingArguments

    from coursekit.gradients import relative_error
    from coursekit.tokens import train_token_lm

    transformers.logging.set_verbosity_error()
    windows, _ = _rank_windows(rank, world_size, accum_steps, steps, seed)
    # The Trainer's prepared dataloader gives process r the batches r, r + P, r + 2P, ...:
    # lay the sequences out so that process r receives its own micro-batches in order.
    rows = []
    for window in windows:
        for index in range(accum_steps):
            for other in range(world_size):
                inputs, labels = window[other * accum_steps + index]
                rows += [{"input_ids": x, "labels": y} for x, y in zip(inputs, labels, strict=True)]

    class InOrder(Trainer):
        def _get_train_sampler(self, train_dataset=None):
            return torch.utils.data.SequentialSampler(train_dataset or self.train_dataset)

    def weights(model):
        return torch.cat([p.detach().flatten() for p in model.parameters()])

    start_weights = weights(_TokenLM())
    reference = _TokenLM()
    sgd = torch.optim.SGD(reference.parameters(), lr=0.5)
    flat_windows = [batch for window in windows for batch in window]
    train_token_lm(reference.net, sgd, flat_windows, accum_steps * world_size, "tokens")
    wanted = weights(reference) - start_weights
    gaps, steps_taken = {}, {}
    for across in (True, False):
        model = _TokenLM()
        with tempfile.TemporaryDirectory(prefix="coursekit-trainer-") as folder:
            arguments = TrainingArguments(
                output_dir=folder,
                per_device_train_batch_size=4,
                gradient_accumulation_steps=accum_steps,
                num_train_epochs=1,
                learning_rate=0.5,
                lr_scheduler_type="constant",
                max_grad_norm=0.0,
                average_tokens_across_devices=across,
                use_cpu=True,
                ddp_backend="gloo",
                ddp_find_unused_parameters=False,
                report_to="none",
                save_strategy="no",
                logging_strategy="no",
                disable_tqdm=True,
            )
            trainer = InOrder(
                model=model,
                args=arguments,
                train_dataset=rows,
                optimizers=(torch.optim.SGD(model.parameters(), lr=0.5), None),
            )
            trainer.remove_callback(transformers.PrinterCallback)  # no metrics printed
            trainer.train()
        label = f"average_tokens_across_devices={across}"
        gaps[label] = relative_error(weights(model) - start_weights, wanted)
        steps_taken[label] = trainer.state.global_step
    return {
        "rank": rank,
        "transformers": transformers.__version__,
        "optimizer_steps": steps_taken,
        "weight_gaps": gaps,
    }
