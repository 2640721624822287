"""``ddp_window``'s memory test: the function run on the wide model, wrapped in DDP, in the
measured fork (:mod:`coursekit.checks.window_memory`).

The check's other tests run DDP in a one-process gloo group, and a hook counts when it
would communicate. Those counts come from inside the process, so a function can satisfy
them with micro-batch passes made for show while it computes the window's gradient some
other way (on ``model.module``, whole), then brings that gradient back through autograd.
What accumulation is for is memory, and the kernel counts that outside the function's
reach: the memory test runs the function on the wide model, as the window questions of
modules 1 to 3 do.

The measured fork can use no gloo group: gloo's collectives run on worker threads, which
a fork does not inherit (a collective would wait for ever), and gloo needs sockets, which
the fork is refused. So the model is wrapped in a group of one process that needs neither:
torch's ``FakeProcessGroup`` (its collectives do nothing, which for one process is what an
all-reduce computes) behind a ``HashStore``, held in memory. DDP's own all-reduce is
replaced by a communication hook that hands the bucket back as it is: the sum over one
process. While the function runs that group is also the default one, so a collective the
function calls itself, or ``dist.get_world_size()``, is answered at once (the other tests
judge those).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

_WRAPPER = "_coursekit_memory_test_ddp"  # where a model holds its DDP (not a submodule)


def one_process_group() -> dist.ProcessGroup:
    """A process group of this process alone, with no store on disk, socket or thread."""
    from torch._C._distributed_c10d import FakeProcessGroup

    backend_type = dist.ProcessGroup.BackendType.CUSTOM
    group = dist.ProcessGroup(dist.HashStore(), 0, 1)
    make = getattr(FakeProcessGroup, "_create_internal", FakeProcessGroup)
    group._set_default_backend(backend_type)
    group._register_backend(torch.device("cpu"), backend_type, make(0, 1))
    return group


def _own_gradient(_state, bucket):  # no annotation: DDP reads it, and this module's are text
    """DDP's all-reduce for one process: the bucket's gradients, as they are."""
    done: torch.futures.Future = torch.futures.Future()
    done.set_result(bucket.buffer())
    return done


def _wrapped(model: nn.Module) -> nn.parallel.DistributedDataParallel:
    """``model`` in DDP, made once per model: the warm-up makes it (DDP's buckets are then
    allocated before the measure), and the measured call is handed the same. The model
    holds it outside its submodules, so the two go together when the model does."""
    ddp = vars(model).get(_WRAPPER)
    if ddp is None:
        ddp = nn.parallel.DistributedDataParallel(model, process_group=one_process_group())
        ddp.register_comm_hook(None, _own_gradient)
        object.__setattr__(model, _WRAPPER, ddp)
    return ddp


def in_ddp(fn):
    """``fn(ddp_model, loss_fn, micro_batches)``, called as the memory test calls a window
    function (:func:`coursekit.checks.window_memory.run_measured`): on the plain model."""

    def call(model, loss_fn, micro_batches):
        from torch.distributed.distributed_c10d import _world

        ddp = _wrapped(model)
        default = _world.default_pg
        _world.default_pg = ddp.process_group  # no gloo group's collective waits in the fork
        try:
            return fn(ddp, loss_fn, micro_batches)
        finally:
            _world.default_pg = default

    return call


def right_window(model, loss_fn, micro_batches) -> None:
    """The memory test's warm-up: a right answer, written here (coursekit's own answer is
    watched by the grader's tripwire)."""
    n = len(micro_batches)
    with model.no_sync():
        for inputs, targets in micro_batches[:-1]:
            (loss_fn(model(inputs), targets) / n).backward()
    inputs, targets = micro_batches[-1]
    (loss_fn(model(inputs), targets) / n).backward()
