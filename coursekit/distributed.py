"""Data-parallel runs from a notebook: start gloo processes, count what they communicate.

A notebook cannot hand a function it defines to a spawned process (spawn pickles functions
by name, and a notebook's functions have no importable name). So the workers live in
:mod:`coursekit.workers.distributed`, and a notebook passes them plain settings, or the
*source* of its own function, which the worker executes. Processes meet through a file in
a temporary folder (no ports to collide) and use gloo, which runs on any CPU.
"""

from __future__ import annotations

import atexit
import datetime
import os
import pickle
import re
import shutil
import socket
import stat
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist

from coursekit.arguments import whole
from coursekit.progress import Progress

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
_WORLD_SIZE = dist.get_world_size  # the real ones, whatever a check wraps around them


def bytes_written() -> int | None:
    """Bytes this process has handed to ``write`` and its kin so far, or None off Linux.

    Linux counts them per process in ``/proc/self/io`` (``wchar``), sockets included, and
    gloo sends through ``writev`` on TCP sockets: so the difference around a collective is
    what this process really put on the wire, as opposed to the paper's accounting that
    :class:`CollectiveCounter` applies. (On 2 processes a ring all-reduce sends 1 psi per
    process, not the paper's 2; gloo runs a reduce-scatter as a whole all-reduce.) Files
    written in between count too, so measure around communication only.
    """
    try:
        with open("/proc/self/io") as handle:
            fields = dict(line.split(": ", 1) for line in handle.read().splitlines() if line)
        return int(fields["wchar"])
    except (OSError, KeyError, ValueError):
        return None


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
        buffer.div_(_WORLD_SIZE(state))
        work = _ALL_REDUCE(buffer, async_op=True)  # the unwrapped one: count it once
        return work.get_future().then(lambda fut: fut.value()[0])

    @property
    def total_bytes(self) -> int:
        return sum(self.bytes.values())


def _loopback_if_needed() -> dict[str, str]:
    """``{"GLOO_SOCKET_IFNAME": <loopback>}`` when gloo's default choice would fail, else {}.

    gloo binds to the address the host name resolves to. In some containers and laptops that
    address is not on this machine; all processes here are local, so the loopback device
    serves them.
    """
    if "GLOO_SOCKET_IFNAME" in os.environ:
        return {}
    try:
        with socket.socket() as probe:
            probe.bind((socket.gethostbyname(socket.gethostname()), 0))
        return {}
    except OSError:
        loopback = next((n for _, n in socket.if_nameindex() if n.startswith("lo")), "lo")
        return {"GLOO_SOCKET_IFNAME": loopback}


def ensure_single_process_group() -> None:
    """A one-process gloo group in this process, if none exists (for checks in a notebook).

    With one process every collective is a copy, but DDP still runs its synchronisation
    logic, so when it would communicate can be counted.
    """
    if dist.is_initialized():
        return
    settings = _loopback_if_needed()
    os.environ.update(settings)
    try:
        store = dist.FileStore(os.path.join(_store_folder(), f"single-{os.getpid()}"), 1)
        dist.init_process_group("gloo", store=store, rank=0, world_size=1, timeout=_TIMEOUT)
    finally:
        for name in settings:
            del os.environ[name]


_STORE_FOLDERS: dict[int, str] = {}
# coursekit-store-PID-XXXXXXXX, as _store_folder names them, and coursekit-workers-PID-XXXXXXXX,
# the folder run_workers shares with its processes (mkdtemp's random suffix)
_STORE_NAME = re.compile(r"coursekit-(?:store|workers)-([0-9]{1,7})-[A-Za-z0-9_]+")


def _store_folder() -> str:
    """A folder for one-process stores, made on first use by this process (not at import:
    an importing process may hand its modules to another, e.g. a fork into a sandbox).

    Its name carries the process id (``coursekit-store-PID-...``), so a leftover can be traced
    to its process, and it is removed when the process exits, not left in the temp folder. A
    process killed outright (SIGKILL) removes nothing: the next one to make a store, or to
    start workers, removes the folders of processes that are gone (:func:`remove_dead_stores`).
    """
    pid = os.getpid()
    if pid not in _STORE_FOLDERS:
        remove_dead_stores()
        folder = tempfile.mkdtemp(prefix=f"coursekit-store-{pid}-")
        _STORE_FOLDERS[pid] = folder

        def remove(folder=folder, pid=pid) -> None:
            if os.getpid() == pid:  # not in a forked child that inherited the hook
                shutil.rmtree(folder, ignore_errors=True)

        atexit.register(remove)
    return _STORE_FOLDERS[pid]


def remove_dead_stores(parent: str | None = None) -> list[str]:
    """Remove the store and workers folders in ``parent`` (the temp folder) of processes that
    are gone; return what was removed.

    Only what is surely a dead process's own: a name as :func:`_store_folder` makes them, a
    process id that no process has (one of another user's, alive, answers EPERM and is kept),
    a real folder (read with ``lstat``: never a symbolic link, and ``rmtree`` follows none)
    owned by this user, which in the sticky temp folder no one else can swap for another.
    """
    removed = []
    try:
        entries = list(os.scandir(parent or tempfile.gettempdir()))
    except OSError:
        return removed
    for entry in entries:
        found = _STORE_NAME.fullmatch(entry.name)
        if found is None or not _no_process(int(found.group(1))):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid():
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
    return removed


def _no_process(pid: int) -> bool:
    """Whether no process has the id ``pid`` (signal 0 asks without sending anything)."""
    if not 0 < pid < 2**22:  # 0 would name this process group; past the kernel's limit: none
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


_TIMEOUT = datetime.timedelta(seconds=120)  # a stuck collective fails in minutes, not 30


def _entry(
    rank: int,
    world_size: int,
    folder: str,
    worker: str,
    settings: dict,
    environ: dict[str, str] | None = None,
    path: list[str] | None = None,
) -> None:
    """What each started process runs: join the group, run the worker, save its result.

    ``environ`` and ``path``: the caller's environment and ``sys.path`` when it called
    :func:`run_workers`. A process forked by the fork server starts with the server's, which
    are those of the server's start, perhaps cells ago; with them it sees what a spawned
    process would have inherited.
    """
    import importlib

    if environ is not None:
        os.environ.clear()
        os.environ.update(environ)
    if path is not None:
        sys.path[:] = path
    torch.set_num_threads(1)
    store = dist.FileStore(os.path.join(folder, "store"), world_size)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size, timeout=_TIMEOUT)
    try:
        module_name, _, function_name = worker.rpartition(".")
        function = getattr(importlib.import_module(module_name), function_name)
        result = function(rank, world_size, **settings)
        with open(os.path.join(folder, f"result-{rank}.pickle"), "wb") as handle:
            pickle.dump(result, handle)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    leave_now()


def leave_now() -> None:
    """End a worker process at once, with exit status 0, after its group is destroyed.

    gloo's threads can abort the interpreter's own shutdown now and then ("terminate called
    without an active exception", SIGABRT) after all the work is done and saved.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_workers(worker: str, world_size: int = 2, *, progress: bool = True, **settings) -> list:
    """Run ``worker`` (``"package.module.function"``) in ``world_size`` gloo processes.

    Each process calls ``function(rank, world_size, **settings)`` inside an initialised
    process group; the returned values (one per rank, in rank order) must be picklable.
    A worker's exception stops all of them and is raised here. While they run (starting
    takes a moment), a progress bar counts the processes that finished and the time so far;
    ``progress=False`` hides it.

    Example:
        >>> results = run_workers("coursekit.workers.distributed.hello", world_size=2)
        >>> [r["sum_of_ranks"] for r in results]
        [1, 1]
    """
    import torch.multiprocessing as mp

    world_size = whole("world_size", world_size)
    if not isinstance(worker, str) or "." not in worker:
        raise TypeError(
            f"worker must name a function in an importable module, as 'package.module.function' "
            f"(spawned processes cannot import a function defined in a notebook); got {worker!r}."
        )
    remove_dead_stores()  # what killed runs left in the temp folder
    interface = _loopback_if_needed()
    label = f"{world_size} processes: {worker.rpartition('.')[2]}"
    with (
        tempfile.TemporaryDirectory(prefix=f"coursekit-workers-{os.getpid()}-") as folder,
        Progress(world_size, label, enabled=progress) as bar,
    ):
        started = time.perf_counter()
        environ = {**os.environ, **interface}  # what the processes run with
        context = mp.start_processes(
            _entry,
            args=(world_size, folder, worker, settings, environ, list(sys.path)),
            nprocs=world_size,
            start_method=start_method(),
            join=False,
        )
        while not context.join(timeout=0.1):  # raises if a worker failed, as join=True does
            while bar.done < sum(not p.is_alive() for p in context.processes):
                bar.step()
            bar.update()
        while bar.done < world_size:
            bar.step()
        results = []
        for rank in range(world_size):
            results.append(pickle.loads(Path(folder, f"result-{rank}.pickle").read_bytes()))
        _last_run_seconds[0] = time.perf_counter() - started
    return results


_last_run_seconds = [0.0]

#: What the fork server imports once, so that each process it forks starts with them loaded.
FORK_SERVER_PRELOAD = ["torch", "torch.distributed", "coursekit.distributed"]


def start_method() -> str:
    """``"forkserver"`` where this platform has a working one, else ``"spawn"``.

    Why: a spawned process is a fresh interpreter that imports torch before it can do
    anything, seconds of CPU for each process of each run. The fork server is such an
    interpreter too, started once (with torch imported: ``FORK_SERVER_PRELOAD``); each run's
    processes are forked from it, clean of this process's state (its threads, CUDA, the
    notebook's globals), in milliseconds. Workers still name an importable function, as
    with spawn. Windows has no fork server, and a server that cannot start (a sandbox without
    Unix sockets) leaves spawn.
    """
    import multiprocessing
    from multiprocessing import forkserver

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return "spawn"
    multiprocessing.get_context("forkserver").set_forkserver_preload(FORK_SERVER_PRELOAD)
    try:
        forkserver.ensure_running()
    except (OSError, EOFError, ValueError):
        return "spawn"
    return "forkserver"


def last_run_seconds() -> float:
    """Wall seconds of the last :func:`run_workers` call, process start-up included."""
    return _last_run_seconds[0]


def function_source(function: Callable) -> str:
    """``function``'s source, preceded by imports for the names it takes from its globals.

    A worker process runs this text: a function defined in a notebook cell may use
    ``ExitStack`` or ``F`` imported in another cell, and the worker must import them too.
    Modules, and classes or functions importable from a module, are carried over.
    """
    import inspect
    import types

    names: set[str] = set()
    codes = [function.__code__]
    while codes:
        code = codes.pop()
        names.update(code.co_names)
        codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    lines = []
    for name in sorted(names):
        value = function.__globals__.get(name)
        if isinstance(value, types.ModuleType):
            lines.append(f"import {value.__name__} as {name}")
        elif callable(value) and getattr(value, "__module__", None) not in (None, "__main__"):
            qualname = getattr(value, "__qualname__", "")
            if qualname.isidentifier():
                lines.append(f"from {value.__module__} import {qualname} as {name}")
    return "\n".join([*lines, "", inspect.getsource(function)])
