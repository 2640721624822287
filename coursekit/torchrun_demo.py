"""Module 4's DDP experiment as a script, for ``torchrun`` on real GPUs (or CPUs).

    torchrun --standalone --nproc-per-node=2 -m coursekit.torchrun_demo

torchrun starts one process per device and tells each its rank through environment
variables; this script joins the group (NCCL on GPUs, gloo otherwise) and runs the same
worker the notebook runs with ``run_workers``.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

from coursekit.distributed import leave_now
from coursekit.distributed_workers import ddp_window_run


def main() -> None:
    world_size = int(os.environ["WORLD_SIZE"])
    on_gpus = torch.cuda.is_available() and torch.cuda.device_count() >= world_size
    dist.init_process_group("nccl" if on_gpus else "gloo")
    try:
        rank = dist.get_rank()
        result = ddp_window_run(rank, world_size, device="cuda" if on_gpus else "cpu")
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
