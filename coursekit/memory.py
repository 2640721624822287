"""Measuring training memory: activations saved for backward, CUDA peaks, and a breakdown.

Gradient accumulation trades steps for memory: one micro-batch of activations is alive at a
time, while parameters, gradients and optimizer state do not shrink. These helpers measure
each part so the notebooks can show that trade with numbers instead of claims.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from coursekit.arguments import whole
from coursekit.units import format_bytes


def _storage_key(tensor: torch.Tensor) -> tuple[str, int]:
    storage = tensor.untyped_storage()
    return (str(tensor.device), storage.data_ptr())


def activation_bytes(
    model: nn.Module,
    inputs: torch.Tensor,
    targets: torch.Tensor | None = None,
    loss_fn: Callable | None = None,
) -> int:
    """Bytes of tensors autograd saves for backward in one forward pass (exact, any device).

    Every tensor that autograd keeps for the backward pass goes through a
    ``saved_tensors_hooks`` pack hook; we count each underlying storage once and leave out
    the model's own parameters and buffers (they are memory you hold anyway, whatever the
    batch). The input batch counts when a layer saves it, by its own size: a micro-batch
    sliced from a larger tensor counts as the slice, not the whole data set behind it.

    The measurement leaves no trace: no backward pass runs, BatchNorm's running statistics
    and the random number generators are restored, and it works under ``torch.no_grad()``.

    Example:
        >>> model = nn.Linear(4, 2)
        >>> activation_bytes(model, torch.zeros(8, 4))  # the saved input: 8 x 4 float32
        128
    """
    owned = {_storage_key(t) for t in [*model.parameters(), *model.buffers()]}
    given = {_storage_key(t) for t in (inputs, targets) if torch.is_tensor(t)}
    storages: dict[tuple[str, int], int] = {}
    views: dict[tuple, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        key = _storage_key(tensor)
        if key in owned:
            pass
        elif key in given:  # a slice of data that exists anyway: count what was sliced
            view = (key, tensor.storage_offset(), tuple(tensor.shape), tuple(tensor.stride()))
            views[view] = tensor.numel() * tensor.element_size()
        else:
            storages.setdefault(key, tensor.untyped_storage().nbytes())
        return tensor

    saved_buffers = [buffer.detach().clone() for buffer in model.buffers()]
    devices = [inputs.device] if inputs.device.type == "cuda" else []
    try:
        with (
            torch.random.fork_rng(devices=devices),
            torch.enable_grad(),
            torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor),
        ):
            output = model(inputs)
            if loss_fn is not None:
                loss_fn(output, targets)
    finally:
        with torch.no_grad():
            for buffer, saved in zip(model.buffers(), saved_buffers, strict=True):
                buffer.copy_(saved)
    return int(sum(storages.values()) + sum(views.values()))


def activation_bytes_by_size(
    model: nn.Module,
    make_inputs: Callable[[int], torch.Tensor],
    micro_batch_sizes: list[int],
) -> dict[int, int]:
    """``{micro_batch_size: activation bytes}`` for a model fed ``make_inputs(size)``."""
    micro_batch_sizes = [whole("each of micro_batch_sizes", s) for s in micro_batch_sizes]
    return {size: activation_bytes(model, make_inputs(size)) for size in micro_batch_sizes}


@dataclass(frozen=True)
class LinearFit:
    """``bytes ~= intercept_bytes + bytes_per_sample * micro_batch_size``."""

    intercept_bytes: float
    bytes_per_sample: float
    max_relative_error: float  # worst relative gap between the line and the measurements

    def predict(self, micro_batch_size: int) -> float:
        return self.intercept_bytes + self.bytes_per_sample * micro_batch_size


def fit_bytes_per_sample(measured: dict[int, int]) -> LinearFit:
    """Least-squares line through measured ``{micro_batch_size: bytes}`` points."""
    if len(measured) < 2:
        raise ValueError("Measure at least two micro-batch sizes to fit a line.")
    sizes = torch.tensor(list(measured), dtype=torch.float64)
    values = torch.tensor(list(measured.values()), dtype=torch.float64)
    design = torch.stack([torch.ones_like(sizes), sizes], dim=1)
    solution = torch.linalg.lstsq(design, values.unsqueeze(1)).solution.squeeze(1)
    intercept, slope = float(solution[0]), float(solution[1])
    predicted = intercept + slope * sizes
    error = float(((predicted - values).abs() / values.clamp(min=1)).max())
    return LinearFit(intercept, slope, error)


@dataclass
class CudaPeak:
    """Filled in by :func:`track_cuda_peak`; ``peak_bytes`` is None without CUDA."""

    peak_bytes: int | None = None
    reason: str = ""


@contextlib.contextmanager
def track_cuda_peak(device: torch.device | str | None = None) -> Iterator[CudaPeak]:
    """Measure the peak CUDA memory allocated by tensors inside the ``with`` block.

    Example:
        >>> with track_cuda_peak() as peak:
        ...     pass
        >>> peak.peak_bytes is None or peak.peak_bytes >= 0
        True
    """
    result = CudaPeak()
    device = torch.device(device or "cuda")
    if device.type != "cuda" or not torch.cuda.is_available():
        result.reason = "no CUDA device: peak GPU memory cannot be measured here"
        yield result
        return
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    yield result
    torch.cuda.synchronize(device)
    result.peak_bytes = int(torch.cuda.max_memory_allocated(device))


class _LiveTensors(TorchDispatchMode):
    """Adds up the storages every operator creates and subtracts each one when it is freed.

    A storage's Python object lives exactly as long as the storage itself (PyTorch keeps it
    alive while C++ holds the storage), so a finalizer on it fires when the memory goes back.
    """

    def __init__(self):
        super().__init__()
        self.live = 0
        self.peak = 0
        self._seen: set[tuple[str, int]] = set()

    def _freed(self, key: tuple[str, int], n_bytes: int) -> None:
        self._seen.discard(key)
        self.live -= n_bytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        given = {
            _storage_key(t) for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)
        }
        for value in tree_flatten(out)[0]:
            if not isinstance(value, torch.Tensor):
                continue
            storage = value.untyped_storage()
            key = _storage_key(value)
            if key in self._seen or key in given or storage.nbytes() == 0:
                continue  # a view or an in-place result: memory that exists already
            self._seen.add(key)
            self.live += storage.nbytes()
            self.peak = max(self.peak, self.live)
            weakref.finalize(storage, self._freed, key, storage.nbytes())
        return out


def peak_live_bytes(fn: Callable[[], object]) -> int:
    """Peak bytes of the tensors that ``fn()`` creates and holds at once, on any device.

    Every operator's output storage counts from its creation until it is freed; tensors that
    existed before (the weights, the input batch) do not. Run a forward and backward pass in
    ``fn`` and this is the memory the training step adds: saved activations, gradients and
    the temporaries of backward, which is what activation checkpointing trades for compute.
    Memory that operators allocate internally and free before returning is not seen, nor is
    memory added to an existing tensor (``out=`` arguments, ``resize_``): training steps
    create their tensors, so neither changes what this measures for them.

    Example:
        >>> x = torch.zeros(64, 256)
        >>> peak_live_bytes(lambda: x * 2)  # the product: 64 x 256 float32
        65536
    """
    tracker = _LiveTensors()
    with tracker:
        fn()
    return tracker.peak


# Optimizer state tensors per parameter element, before the first step creates them.
_STATE_SLOTS = {
    "SGD": 0,
    "Adam": 2,
    "AdamW": 2,
    "NAdam": 2,
    "RAdam": 2,
    "Adamax": 2,
    "Adagrad": 1,
    "RMSprop": 1,
    "Adadelta": 2,
}


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes the optimizer holds per parameter (momentum, Adam's two moments, ...).

    Counts the real state tensors once they exist; before the first step, predicts them
    from the optimizer's kind (SGD: one buffer with momentum, none without; Adam and AdamW:
    two, plus one with ``amsgrad``; RMSprop: one, plus momentum and ``centered``), because
    ``step()`` creates the state lazily. Scalars such as Adam's step count are left out.
    """
    if optimizer.state:
        return sum(
            value.numel() * value.element_size()
            for state in optimizer.state.values()
            for value in state.values()
            if torch.is_tensor(value) and value.dim() > 0
        )
    kind = type(optimizer).__name__
    if kind not in _STATE_SLOTS:
        raise ValueError(
            f"coursekit cannot predict {kind}'s state before its first step; "
            "call optimizer.step() once, then measure."
        )
    total = 0
    for group in optimizer.param_groups:
        slots = _STATE_SLOTS[kind]
        slots += bool(group.get("momentum")) + bool(group.get("centered"))  # SGD, RMSprop
        slots += bool(group.get("amsgrad"))
        total += slots * sum(p.numel() * p.element_size() for p in group["params"])
    return total


@dataclass(frozen=True)
class MemoryBreakdown:
    """The four parts of training memory; only activations scale with the micro-batch."""

    params_bytes: int
    grads_bytes: int
    optimizer_state_bytes: int
    activation_bytes: int

    @property
    def total_bytes(self) -> int:
        return (
            self.params_bytes
            + self.grads_bytes
            + self.optimizer_state_bytes
            + self.activation_bytes
        )

    def parts(self) -> dict[str, int]:
        return {
            "parameters": self.params_bytes,
            "gradients": self.grads_bytes,
            "optimizer state": self.optimizer_state_bytes,
            "activations": self.activation_bytes,
        }

    def __str__(self) -> str:
        rows = [f"{name:>16}: {format_bytes(n)}" for name, n in self.parts().items()]
        return "\n".join([*rows, f"{'total':>16}: {format_bytes(self.total_bytes)}"])


def memory_breakdown(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    inputs: torch.Tensor,
) -> MemoryBreakdown:
    """Params + grads + optimizer state + activations for one micro-batch of ``inputs``.

    Gradients are counted as one tensor per trainable parameter (what ``backward()``
    allocates), whether or not a backward pass has run yet.
    """
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    grads = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    return MemoryBreakdown(
        params_bytes=params,
        grads_bytes=grads,
        optimizer_state_bytes=optimizer_state_bytes(optimizer),
        activation_bytes=activation_bytes(model, inputs),
    )
