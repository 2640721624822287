"""Module 4's DDP experiment as a script, for ``torchrun`` on real GPUs (or CPUs).

    torchrun --standalone --nproc-per-node=2 -m coursekit.workers.torchrun_demo [--device cpu]

torchrun starts one process per device and tells each its rank through environment
variables; this script joins the group (NCCL on GPUs, gloo otherwise) and runs the same
worker the notebook runs with ``run_workers``. ``--device auto`` (the default) takes the GPUs
when there is one per process; ``--device cpu`` runs gloo on CPU processes whatever the
machine has; ``--seed`` and ``--micro-batch-size`` pass on to the worker.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist

from coursekit.distributed import leave_now
from coursekit.workers.distributed import ddp_window_run

DEVICES = ("auto", "cpu", "cuda")


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The script's options: ``device`` (auto, cpu or cuda), ``seed`` and ``micro_batch_size``."""
    parser = argparse.ArgumentParser(prog="python -m coursekit.workers.torchrun_demo")
    parser.add_argument(
        "--device",
        choices=DEVICES,
        default="auto",
        help="auto: NCCL on GPUs when there is one per process, else gloo",
    )
    parser.add_argument("--seed", type=int, default=0, help="seeds the model and the data")
    parser.add_argument("--micro-batch-size", type=int, default=8, help="samples per micro-batch")
    return parser.parse_args(argv)


def uses_gpus(device: str, world_size: int) -> bool:
    """Whether ``world_size`` processes run on GPUs with NCCL (one GPU each) for ``device``.

    ``"cuda"`` with fewer GPUs than processes is an error, not a quiet fall-back to gloo.
    """
    if device == "cpu":
        return False
    enough = torch.cuda.is_available() and torch.cuda.device_count() >= world_size
    if device == "cuda" and not enough:
        raise SystemExit(
            f"--device cuda needs one GPU per process: {world_size} processes, "
            f"{torch.cuda.device_count()} GPU(s) here. Pass --device cpu or auto."
        )
    return enough


def main(argv: list[str] | None = None) -> None:
    options = parse_arguments(argv)
    world_size = int(os.environ["WORLD_SIZE"])
    on_gpus = uses_gpus(options.device, world_size)
    dist.init_process_group("nccl" if on_gpus else "gloo")
    try:
        rank = dist.get_rank()
        result = ddp_window_run(
            rank,
            world_size,
            micro_batch_size=options.micro_batch_size,
            seed=options.seed,
            device="cuda" if on_gpus else "cpu",
        )
        results = [None] * world_size
        dist.all_gather_object(results, result)
        if rank == 0:
            for r in results:
                print(
                    f"rank {r['rank']} ({r['backend']}): {r['all_reduces']} all-reduce(s) for 4 "
                    f"micro-batches; gap to one process's full batch {r['gap_to_full_batch']:.1e}"
                )
    finally:
        dist.barrier()  # let every rank finish its collectives before the group goes
        dist.destroy_process_group()
    leave_now()


if __name__ == "__main__":
    main()
