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
function calls itself is answered at once (the other tests judge those), and
``dist.get_world_size()`` answers 2, as in the other tests.
"""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
from torch import nn


def one_process_group() -> tuple[dist.ProcessGroup, dist.Store]:
    """A process group of this process alone, with no store on disk, socket or thread, and
    its store."""
    from torch._C._distributed_c10d import FakeProcessGroup

    backend_type = dist.ProcessGroup.BackendType.CUSTOM
    store = dist.HashStore()
    group = dist.ProcessGroup(store, 0, 1)
    make = getattr(FakeProcessGroup, "_create_internal", FakeProcessGroup)
    group._set_default_backend(backend_type)
    group._register_backend(torch.device("cpu"), backend_type, make(0, 1))
    return group, store


def _own_gradient(_state, bucket):  # no annotation: DDP reads it, and this module's are text
    """DDP's all-reduce for one process: the bucket's gradients, as they are."""
    done: torch.futures.Future = torch.futures.Future()
    done.set_result(bucket.buffer())
    return done


def _wrapped(model: nn.Module, made: dict) -> tuple:
    """``(ddp, store)`` for ``model``, made once per model and kept in ``made`` (one memory
    test's): the warm-up makes it, so DDP's buckets are allocated before the measure, and
    the measured call is handed the same. Nothing of it is left on the model."""
    if id(model) not in made:
        group, store = one_process_group()
        ddp = nn.parallel.DistributedDataParallel(model, process_group=group)
        ddp.register_comm_hook(None, _own_gradient)
        made[id(model)] = (model, ddp, store)  # the model held: its id stays its own
    return made[id(model)][1:]


@contextlib.contextmanager
def _the_world(group: dist.ProcessGroup, store, world_size: int):
    """``group`` as the default group, registered as torch registers one (so that
    ``dist.get_backend()`` and the like answer), with ``dist.get_world_size()`` answering
    ``world_size`` as the check's other tests do; all put back after."""
    from torch.distributed import distributed_c10d

    world = distributed_c10d._world
    default, real_world_size = world.default_pg, dist.get_world_size

    def pretended(group=None):  # DDP asks about its own group: it gets the truth
        return world_size if group is None else real_world_size(group)

    world.pg_map[group] = ("gloo", store)  # what the other tests' group is
    world.pg_group_ranks[group] = {0: 0}
    world.pg_names[group] = "coursekit-memory-test"
    try:
        world.default_pg = group  # no gloo group's collective waits in the fork for ever
        dist.get_world_size = pretended
        yield
    finally:
        dist.get_world_size = real_world_size
        world.default_pg = default
        for table in (world.pg_map, world.pg_group_ranks, world.pg_names):
            table.pop(group, None)


def in_ddp(fn, made: dict, world_size: int):
    """``fn(ddp_model, loss_fn, micro_batches)``, called as the memory test calls a window
    function (:func:`coursekit.checks.window_memory.run_measured`): on the plain model.
    ``made``: the DDP wrappers of one memory test, shared by its warm-up and its call."""

    def call(model, loss_fn, micro_batches):
        ddp, store = _wrapped(model, made)
        with _the_world(ddp.process_group, store, world_size):
            return fn(ddp, loss_fn, micro_batches)

    return call


def warm_up_in_ddp(made: dict, world_size: int):
    """The memory test's warm-up: :func:`right_window` called by its name, as :func:`in_ddp`
    calls a function (the grader watches it; ``ddp_window`` names it in ``library_answers``,
    and code that names it is the libraries' own path). Its own wrapper: no function a
    hand-in hands over is ever called from code that names it (found by review: one that
    tested ``fn is right_window`` let a hand-in whose function *was* the warm-up take the
    libraries' path)."""

    def warm_up(model, loss_fn, micro_batches):
        ddp, store = _wrapped(model, made)
        with _the_world(ddp.process_group, store, world_size):
            right_window(ddp, loss_fn, micro_batches)

    return warm_up


def right_window(model, loss_fn, micro_batches) -> None:
    """The memory test's warm-up: a right answer, written here (coursekit's own answer is
    watched by the grader's tripwire), and watched itself: ``ddp_window`` names it in
    ``library_answers``; :func:`warm_up_in_ddp` calls it by its name."""
    n = len(micro_batches)
    with model.no_sync():
        for inputs, targets in micro_batches[:-1]:
            (loss_fn(model(inputs), targets) / n).backward()
    inputs, targets = micro_batches[-1]
    (loss_fn(model(inputs), targets) / n).backward()
