"""Data-parallel runs from a notebook: start gloo processes, count what they communicate.

A notebook cannot hand a function it defines to a spawned process (spawn pickles functions
by name, and a notebook's functions have no importable name). So the workers live in
:mod:`coursekit.distributed_workers`, and a notebook passes them plain settings, or the
*source* of its own function, which the worker executes. Processes meet through a file in
a temporary folder (no ports to collide) and use gloo, which runs on any CPU.
"""

from __future__ import annotations

import os
import pickle
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist

# Collectives the course's models use, and how much data each moves, counted in units of
# the full (unsharded) tensor, the largest tensor argument: an all-reduce moves it twice
# (reduce-scatter + all-gather, as in the ZeRO paper), an all-gather or a reduce-scatter
# once, and a broadcast once per piece broadcast.
_COLLECTIVES = {
    "all_reduce": 2,
    "all_gather_single": 1,
    "all_gather_into_tensor": 1,
    "reduce_scatter_single": 1,
    "reduce_scatter_tensor": 1,
    "broadcast": 1,
}


_ALL_REDUCE = dist.all_reduce


class CollectiveCounter:
    """Counts calls and bytes of torch.distributed collectives made in this process.

    Wraps the module-level functions (FSDP, ZeroRedundancyOptimizer and student code call
    them through ``torch.distributed``). DDP's gradient all-reduce runs in C++ and is counted
    with :meth:`ddp_hook` instead. Use as a context manager; :attr:`calls` and
    :attr:`bytes` map a collective's name to totals.
    """

    def __init__(self):
        self.calls: dict[str, int] = {}
        self.bytes: dict[str, int] = {}
        self._originals: dict[str, Callable] = {}

    def record(self, name: str, tensor: torch.Tensor, factor: int = 1) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1
        self.bytes[name] = self.bytes.get(name, 0) + factor * tensor.numel() * tensor.element_size()

    def __enter__(self) -> CollectiveCounter:
        for name, factor in _COLLECTIVES.items():
            original = getattr(dist, name, None)
            if original is None:
                continue
            self._originals[name] = original

            def counted(*args, _original=original, _name=name, _factor=factor, **kwargs):
                tensors = [a for a in (*args, *kwargs.values()) if torch.is_tensor(a)]
                if tensors:
                    self.record(_name, max(tensors, key=torch.Tensor.numel), _factor)
                return _original(*args, **kwargs)

            setattr(dist, name, counted)
        return self

    def __exit__(self, *exc) -> None:
        for name, original in self._originals.items():
            setattr(dist, name, original)
        self._originals.clear()

    def ddp_hook(self, state, bucket):
        """A DDP communication hook: the default all-reduce (mean), counted."""
        buffer = bucket.buffer()
        self.record("all_reduce", buffer, 2)
        buffer.div_(dist.get_world_size())
        work = _ALL_REDUCE(buffer, async_op=True)  # the unwrapped one: count it once
        return work.get_future().then(lambda fut: fut.value()[0])

    @property
    def total_bytes(self) -> int:
        return sum(self.bytes.values())


def ensure_single_process_group() -> None:
    """A one-process gloo group in this process, if none exists (for checks in a notebook).

    With one process every collective is a copy, but DDP still runs its synchronisation
    logic, so when it would communicate can be counted.
    """
    if dist.is_initialized():
        return
    try:
        _init_one_process()
    except RuntimeError:
        # gloo uses the interface the host name resolves to; where that is not a local
        # address (some containers and laptops), the loopback device does for one process
        loopback = next((name for _, name in socket.if_nameindex() if name.startswith("lo")), "lo")
        previous = os.environ.get("GLOO_SOCKET_IFNAME")
        os.environ["GLOO_SOCKET_IFNAME"] = loopback
        try:
            _init_one_process()
        finally:
            if previous is None:
                del os.environ["GLOO_SOCKET_IFNAME"]
            else:
                os.environ["GLOO_SOCKET_IFNAME"] = previous


def _init_one_process() -> None:
    store = dist.FileStore(tempfile.mktemp(prefix="coursekit-store-"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)


def _entry(rank: int, world_size: int, folder: str, worker: str, settings: dict) -> None:
    """What each spawned process runs: join the group, run the worker, save its result."""
    import importlib

    torch.set_num_threads(1)
    store = dist.FileStore(os.path.join(folder, "store"), world_size)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size)
    try:
        module_name, _, function_name = worker.rpartition(".")
        function = getattr(importlib.import_module(module_name), function_name)
        result = function(rank, world_size, **settings)
        with open(os.path.join(folder, f"result-{rank}.pickle"), "wb") as handle:
            pickle.dump(result, handle)
    finally:
        dist.destroy_process_group()


def run_workers(worker: str, world_size: int = 2, **settings) -> list:
    """Run ``worker`` (``"package.module.function"``) in ``world_size`` gloo processes.

    Each process calls ``function(rank, world_size, **settings)`` inside an initialised
    process group; the returned values (one per rank, in rank order) must be picklable.
    A worker's exception stops all of them and is raised here.

    Example:
        >>> results = run_workers("coursekit.distributed_workers.hello", world_size=2)
        >>> [r["sum_of_ranks"] for r in results]
        [1, 1]
    """
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="coursekit-workers-") as folder:
        started = time.perf_counter()
        mp.start_processes(
            _entry,
            args=(world_size, folder, worker, settings),
            nprocs=world_size,
            start_method="spawn",
        )
        results = []
        for rank in range(world_size):
            results.append(pickle.loads(Path(folder, f"result-{rank}.pickle").read_bytes()))
        _last_run_seconds[0] = time.perf_counter() - started
    return results


_last_run_seconds = [0.0]


def last_run_seconds() -> float:
    """Wall seconds of the last :func:`run_workers` call, process start-up included."""
    return _last_run_seconds[0]
