"""Activation checkpointing under DDP, on real processes (pitfall 23, started by run_workers).

Reentrant checkpointing (``use_reentrant=True``, long the default) runs each checkpointed
region's backward as a separate, nested backward pass. DDP's reducer marks each parameter
"ready" when its gradient is done, once per backward; a parameter used in two checkpointed
regions (a shared layer) gets its gradient in two nested passes, and DDP refuses the second
mark: "Expected to mark a variable ready only once" (PyTorch #24005). The non-reentrant
implementation (``use_reentrant=False``) is one backward pass, and works.
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from coursekit.data import make_regression, split_micro_batches
from coursekit.environment import seeded
from coursekit.gradients import flat_gradient, full_batch_gradient, relative_error


class SharedBlockNet(nn.Module):
    """Two checkpointed applications of one shared block, then a head (weight sharing, as in
    ALBERT or a recurrent model unrolled twice)."""

    def __init__(self, width: int = 16, use_reentrant: bool | None = None):
        super().__init__()
        self.stem = nn.Linear(width, width)  # so the checkpointed regions' input needs grad
        self.block = nn.Sequential(nn.Linear(width, width), nn.Tanh())
        self.head = nn.Linear(width, 1)
        self.use_reentrant = use_reentrant  # None: no checkpointing

    def forward(self, x):
        x = self.stem(x)
        for _ in range(2):
            if self.use_reentrant is None:
                x = self.block(x)
            else:
                x = checkpoint(self.block, x, use_reentrant=self.use_reentrant)
        return self.head(x)


def _first_sentence(message: str) -> str:
    """The first sentence of torch's long error text; an internal assert without its path."""
    first = message.strip().split(". ")[0].rstrip(".")
    if "INTERNAL ASSERT FAILED" in first:
        first = first.split(" at ")[0] + " in DDP's reducer"
    return first + "."


#: (label, use_reentrant, static_graph, accum_steps): pitfall 23 and its two workarounds.
CASES = (
    ("reentrant, N = 2", True, False, 2),
    ("reentrant, static_graph, N = 1", True, True, 1),
    ("reentrant, static_graph, N = 2", True, True, 2),
    ("use_reentrant=False, N = 2", False, False, 2),
)


def checkpointing_cases_run(rank: int, world_size: int, seed: int = 0) -> list[dict]:
    """Every case of :data:`CASES` in one start of the processes, each with a fresh model."""
    results = []
    for label, use_reentrant, static_graph, accum_steps in CASES:
        result = reentrant_ddp_run(rank, world_size, use_reentrant, static_graph, accum_steps, seed)
        results.append({"case": label, **result})
    return results


def reentrant_ddp_run(
    rank: int,
    world_size: int,
    use_reentrant: bool = True,
    static_graph: bool = False,
    accum_steps: int = 2,
    seed: int = 0,
) -> dict:
    """One window of ``accum_steps`` micro-batches under DDP (``no_sync`` but for the last),
    the shared block checkpointed twice. Returns the error DDP raised, if any, and otherwise
    the gap between the averaged gradient and one process's full batch."""
    with seeded(seed):
        model = SharedBlockNet(use_reentrant=use_reentrant).double()
    plain = SharedBlockNet(use_reentrant=None).double()
    plain.load_state_dict(model.state_dict())
    per_rank = 4 * accum_steps
    inputs, targets = make_regression(
        per_rank * world_size, in_features=16, seed=seed + 1, dtype=torch.float64
    )
    full = full_batch_gradient(plain, nn.MSELoss(), inputs, targets)
    mine = slice(rank * per_rank, (rank + 1) * per_rank)
    ddp = nn.parallel.DistributedDataParallel(model, static_graph=static_graph)
    micro_batches = split_micro_batches(inputs[mine], targets[mine], 4)
    try:
        for index, (x, y) in enumerate(micro_batches):
            last = index == len(micro_batches) - 1
            with contextlib.nullcontext() if last else ddp.no_sync():
                (nn.functional.mse_loss(ddp(x), y) / len(micro_batches)).backward()
    except RuntimeError as error:
        return {"rank": rank, "error": _first_sentence(str(error)), "gap": None}
    gradient = flat_gradient(ddp.module.parameters())
    return {"rank": rank, "error": None, "gap": relative_error(gradient, full)}
