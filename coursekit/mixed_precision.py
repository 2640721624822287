"""Loss scaling for fp16 with accumulation, and what fp16 does to small gradients.

fp16 has 5 exponent bits: its smallest positive value is 2**-24 (about 6e-8), values under
half of it round to zero, and under 2**-14 they keep fewer than 11 significant bits.
Dividing the loss by N for accumulation makes every gradient N times smaller still.
``torch.amp.GradScaler`` multiplies the loss by a large power of two before backward so the
gradients stay representable, and divides them back (``unscale_``) before anything reads
them. The pattern with accumulation is in :func:`amp_window`; the PyTorch AMP notes
("Gradient accumulation") state the same.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import torch
from torch import nn

Batch = tuple[torch.Tensor, torch.Tensor]
#: The first CUDA compute capability whose tensor cores compute in bfloat16 (Ampere, sm_80).
NATIVE_BF16_CAPABILITY = (8, 0)


def has_native_bf16(device: torch.device | str) -> bool:
    """True where a CUDA GPU computes in bfloat16 in hardware: compute capability 8.0 or more
    (A100, RTX 30xx, L4, H100); under ROCm, True as ``torch.cuda.is_bf16_supported`` says
    (torch does not tell an AMD GPU's bf16 units apart).

    Not ``torch.cuda.is_bf16_supported()``: by default (``including_emulation=True``) it also
    says yes where a bfloat16 tensor can merely be created, which on a T4 (sm_75, Colab's
    usual GPU) means slow emulation, and so never takes the fp16 + GradScaler path that such
    a card needs. The capability is read for ``device`` itself, not the current GPU. False
    for every device that is not a CUDA one (the CPU's autocast has its own rules).
    """
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return False
    if torch.version.hip:  # ROCm reports its own architecture numbers: torch's answer stands
        return True
    return tuple(torch.cuda.get_device_capability(device)) >= NATIVE_BF16_CAPABILITY


def half_precision(device: torch.device | str) -> str:
    """The mixed-precision mode to train in on a CUDA ``device``: ``"bf16"`` where it is
    native (:func:`has_native_bf16`), else ``"fp16"``, which needs a GradScaler (module 7's
    recipe then uses one). Any other device gets ``"fp16"`` too, the choice that is safe
    everywhere, though on a CPU float32 is usually faster than either."""
    return "bf16" if has_native_bf16(device) else "fp16"


def amp_window(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    micro_batches: Sequence[Batch],
    max_norm: float,
) -> None:
    """One window of equal-sized micro-batches under a GradScaler, then one (clipped) step.

    ``scaler.scale(loss).backward()`` runs for every micro-batch, so every gradient that adds
    up is scaled by the same factor. ``unscale_``, clipping, ``step`` and ``update`` run once,
    at the window's end: ``unscale_`` divides the sum once and looks for inf/NaN, clipping
    must see the true gradients, and ``update`` changes the scale, which is only safe
    between windows. An inf in any micro-batch makes ``scaler.step`` skip the whole step;
    the gradients are cleared either way.
    """
    for inputs, targets in micro_batches:
        loss = loss_fn(model(inputs), targets) / len(micro_batches)
        scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)


def gradient_values(parameters: Iterable[nn.Parameter]) -> torch.Tensor:
    """Every gradient entry of ``parameters``, as one float64 vector."""
    return torch.cat([p.grad.detach().double().flatten() for p in parameters if p.grad is not None])


def fp16_lost_fraction(values: torch.Tensor) -> float:
    """The fraction of non-zero ``values`` that become zero when rounded to fp16.

    Example:
        >>> fp16_lost_fraction(torch.tensor([1e-3, 1e-9, 0.0]))
        0.5
    """
    nonzero = values[values != 0]
    if nonzero.numel() == 0:
        return 0.0
    return float((nonzero.half() == 0).double().mean())


class Autocast(nn.Module):
    """Runs ``model``'s forward under ``torch.autocast`` and returns float32 outputs.

    This is what a mixed-precision training script does around its forward pass; wrapping
    it lets a function that only calls ``model(inputs)`` (like the exercise's) train in fp16.
    """

    def __init__(self, model: nn.Module, device_type: str, dtype: torch.dtype = torch.float16):
        super().__init__()
        self.model, self.device_type, self.dtype = model, device_type, dtype

    def forward(self, *args):
        with torch.autocast(self.device_type, dtype=self.dtype):
            return self.model(*args).float()


def scale_history(
    window: Callable,
    device: str | torch.device = "cpu",
    n_windows: int = 40,
    init_scale: float = 2.0**24,
    growth_interval: int = 5,
    max_norm: float = 1.0,
    seed: int = 0,
) -> tuple[list[float], list[bool]]:
    """Train a small fp16 model for ``n_windows`` windows with ``window`` (an ``amp_window``).

    The scale starts far too high (every step overflows) and grows quickly, so a few dozen
    windows show the whole dance: halve on overflow, skip the step, grow after
    ``growth_interval`` good steps. Returns the scale each window ran at, and whether its
    step was skipped. ``device`` is a name (``"cuda:1"``) or a ``torch.device``; ``seed``
    draws the model (``seed``) and the data (``seed + 1``).
    """
    from coursekit.data import make_regression, split_micro_batches
    from coursekit.models import tiny_mlp

    device = torch.device(device)
    kind = device.type  # autocast and GradScaler take "cuda", not "cuda:1"
    model = Autocast(tiny_mlp(in_features=16, hidden=64, depth=3, seed=seed).to(device), kind)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler(kind, init_scale=init_scale, growth_interval=growth_interval)
    inputs, targets = make_regression(64 * n_windows, in_features=16, seed=seed + 1)
    batches = split_micro_batches(inputs.to(device), targets.to(device), 16)
    scales, skipped = [], []
    for start in range(0, len(batches), 4):
        before = [p.detach().clone() for p in model.parameters()]
        scales.append(float(scaler.get_scale()))
        window(model, optimizer, scaler, nn.MSELoss(), batches[start : start + 4], max_norm)
        skipped.append(
            all(torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))
        )
    return scales, skipped
