"""A window check's memory test: a model wide enough that activations are what memory holds.

The model is 16 -> 4,096 -> 1 (Tanh, float64), run on 8 micro-batches of 32 samples. One
hidden activation of the whole window is 256 x 4,096 x 8 bytes = 8 MiB; a micro-batch's is
1 MiB. The call runs in a process of its own whose peak the kernel counts
(:mod:`coursekit.checks.memory_peak`), after a warm-up that runs one micro-batch the honest
way. Measured above that warm-up's peak: an honest loop about 1.2 MiB, however many
micro-batches; a forward pass on the whole window, on the model or on any copy of it, about
21 MiB (three such tensors alive at once); one backward for the whole window, which keeps
every micro-batch's graph alive until then, about 7.4 MiB. The verdict's line is half of
one whole-window activation (4 MiB). About 50 ms a measurement.

The gradient is read back as 4 random projections (the whole of it is 70,000 numbers), which
a wrong gradient does not match.
"""

from __future__ import annotations

import torch
from torch import nn

from coursekit.checks.memory_peak import measured
from coursekit.checks.question import Failure, relative_gap
from coursekit.data import make_regression, split_micro_batches

IN_FEATURES, HIDDEN = 16, 4096
MICRO_BATCH, ACCUM_STEPS = 32, 8
PROJECTIONS = 4
TOLERANCE = 1e-9  # float64, summed in another order and projected: ~1e-14 seen


def memory_spec(seed: int) -> dict:
    """The hidden spec a window question adds for its memory test."""
    return {
        "seed": seed,
        "accum_steps": ACCUM_STEPS,
        "micro_batch_size": MICRO_BATCH,
        "dtype": "float64",
        "memory": True,
    }


def is_memory_spec(spec: dict) -> bool:
    return bool(spec.get("memory"))


def wide_problem(spec: dict) -> tuple[nn.Module, list]:
    """The wide model and the window's micro-batches for ``spec``."""
    generator = torch.Generator().manual_seed(spec["seed"])
    model = nn.Sequential(nn.Linear(IN_FEATURES, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 1))
    with torch.no_grad():
        for parameter in model.parameters():
            bound = 1 / parameter.shape[-1] ** 0.5
            parameter.copy_(torch.rand(parameter.shape, generator=generator) * 2 * bound - bound)
    model = model.double()
    size = spec["micro_batch_size"] * spec["accum_steps"]
    inputs, targets = make_regression(
        size, in_features=IN_FEATURES, seed=spec["seed"], dtype=torch.float64
    )
    return model, split_micro_batches(inputs, targets, spec["micro_batch_size"])


def window_bytes(spec: dict) -> int:
    """One hidden activation of the whole window, in bytes."""
    return spec["micro_batch_size"] * spec["accum_steps"] * HIDDEN * 8


def run_measured(spec: dict, call) -> dict:
    """``call(model, loss_fn, micro_batches)`` (the student's function, however a question
    calls it) on the wide problem, measured; outputs: the gradient's projections and the
    peak above the warm-up's (see :func:`coursekit.checks.memory_peak.measured`)."""
    model, micro_batches = wide_problem(spec)
    loss_fn = nn.MSELoss()

    def warm_up() -> None:
        inputs, targets = micro_batches[0]
        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()
        model.zero_grad(set_to_none=True)

    def call_and_read() -> dict:
        # the largest forward the model saw and the autograd passes that reached its last
        # bias: only to name the mistake (a whole-batch forward, one backward for the
        # window, gradients cleared); the verdict is the kernel's peak alone
        passes, largest = [], [0]
        list(model.parameters())[-1].register_hook(lambda grad: passes.append(1))
        model.register_forward_pre_hook(
            lambda module, args: largest.append(max(largest.pop(), len(args[0])))
        )
        call(model, loss_fn, micro_batches)
        return {
            "grad_projection": projection(model, spec["seed"]),
            "passes": len(passes),
            "largest_forward": largest[0],
        }

    return measured(call_and_read, warm_up)


def projection(model: nn.Module, seed: int) -> list[float] | None:
    """The gradient projected on :data:`PROJECTIONS` fixed random directions, one parameter
    at a time (so that reading it adds no memory of note); None when no gradient exists."""
    parameters = list(model.parameters())
    if all(p.grad is None for p in parameters):
        return None
    generator = torch.Generator().manual_seed(seed + 1)
    totals = [0.0] * PROJECTIONS
    for parameter in parameters:
        grad = parameter.grad
        for k in range(PROJECTIONS):
            direction = torch.randn(parameter.shape, generator=generator, dtype=torch.float64)
            if grad is not None:
                totals[k] += float((grad.detach().double() * direction).sum())
    return totals


def _mib(size: float) -> str:
    return f"{size / 2**20:.0f} MiB"


def judge_memory(spec: dict, outputs: dict, expected: dict) -> None:
    """The memory test's verdict: the function's error, its peak, then its gradient."""
    setting = (
        f"(the memory test: a {IN_FEATURES} -> {HIDDEN:,} -> 1 model, "
        f"{spec['accum_steps']} micro-batches of {spec['micro_batch_size']})"
    )
    if isinstance(outputs.get("error"), str):
        raise Failure(f"{outputs['error']} {setting}")
    if isinstance(outputs.get("died"), str):
        raise Failure(f"Your function's process was {outputs['died']} {setting}.")
    peak, window = outputs.get("peak_above_warm_up"), window_bytes(spec)
    if not isinstance(peak, int | float) and outputs.get("memory") != "not measured":
        raise Failure(f"The memory test's measurement is missing {setting}.")
    passes, largest = outputs.get("passes"), outputs.get("largest_forward")
    seen_whole = isinstance(largest, int) and largest > spec["micro_batch_size"]
    if isinstance(peak, int | float) and peak > window / 2 and passes == 1 and not seen_whole:
        raise Failure(
            f"Your function's memory rose {_mib(peak)} above what one micro-batch's forward "
            f"and backward take {setting}: one backward() for the whole window keeps every "
            "micro-batch's graph, and its activations, alive until then. Call backward() "
            "once per micro-batch.",
            "single_backward",
        )
    if isinstance(peak, int | float) and peak > window / 2:
        raise Failure(
            f"Your function's memory rose {_mib(peak)} above what one micro-batch's forward "
            f"and backward take {setting}. The whole window's activations take "
            f"{_mib(window)} for each hidden layer, and yours were alive at once: a forward "
            "pass ran on the whole window (on the model or on a copy), or every micro-batch's "
            "graph was kept until one backward(). Run the forward and backward pass on one "
            "micro-batch at a time, so each micro-batch's activations are freed before the "
            "next.",
            "whole_batch_forward",
        )
    actual, wanted = outputs.get("grad_projection"), expected.get("grad_projection")
    if actual is None and isinstance(passes, int) and passes > 0:
        raise Failure(
            f"backward() ran, but no gradient was left in .grad afterwards {setting}: "
            "something cleared the gradients at the end. Leave them for the optimizer step.",
            "gradients_cleared",
        )
    if actual is None:
        raise Failure(f"No parameter has a gradient after your function {setting}.", "no_backward")
    if not isinstance(actual, list) or not all(isinstance(v, int | float) for v in actual):
        raise Failure(f"The memory test's gradient could not be read {setting}.")
    gap = relative_gap([float(v) for v in actual], wanted)
    if gap > TOLERANCE:
        raise Failure(
            f"Your gradient differs from the full-batch gradient by {gap:.2e} (relative, on "
            f"{PROJECTIONS} random projections) {setting}."
        )
