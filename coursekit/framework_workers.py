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
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world_size),
        OMP_NUM_THREADS="1",  # quiets Accelerate's "we set it at 1" warning
    )
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
