"""A window check's memory test: a model wide enough that activations are what memory holds.

The model is 16 -> 4,096 -> 1 (Tanh, float64), run on 32 micro-batches of 16 samples. One
hidden activation of the whole window is 512 x 4,096 x 8 bytes = 16 MiB; a micro-batch's is
0.5 MiB. The call runs in a process of its own (:mod:`coursekit.checks.memory_peak`), after
a warm-up that runs three micro-batches the honest way, and the kernel counts the fresh
memory the call needed (its page faults) and how far its resident size rose; the verdict
takes the larger. Measured: an honest loop 2 to 5 MiB, whatever the notebook left
fragmented in its heap; up to about 36 where small tensors kept from each micro-batch split
the blocks malloc would reuse; a forward pass on the whole window, on the model or on any
copy of it, about 65 MiB, and as much after freeing memory the notebook held (the faults
count it) or with its buffers in shared memory (refused; the resident size counts it). The
line is 2.5 whole-window activations (40 MiB). About 55 ms a measurement.

What is read back, the gradient or the weights after a question's step, is 2 random
projections (the whole of either is 70,000 numbers; a wrong one does not match both to
1e-9), drawn from uniform numbers, which cost less than normal ones.
"""

from __future__ import annotations

import torch
from torch import nn

from coursekit.checks.memory_peak import measured
from coursekit.checks.question import Failure, relative_gap
from coursekit.data import make_regression, split_micro_batches

IN_FEATURES, HIDDEN = 16, 4096
MICRO_BATCH, ACCUM_STEPS = 16, 32
WARM_UP = 3  # micro-batches: after three, an honest loop's allocations come back to the same blocks
PROJECTIONS = 2
TOLERANCE = 1e-9  # float64, summed in another order and projected: ~1e-14 seen
# The verdict's line, in whole-window activations (40 MiB). Measured: an honest loop needs
# 2 to 5 MiB, up to about 36 where what it keeps between micro-batches (a kept
# `out.detach()` and a loss) splits blocks malloc would reuse; one backward for the whole
# window about 30 to 36, under the line (the backward count catches it on the model); a
# whole-window forward about 65.
LINE = 2.5


def memory_spec(seed: int, reads: str = "grad") -> dict:
    """The hidden spec a window question adds for its memory test. ``reads``: what the test
    compares with the reference's, the gradient (``"grad"``) or, for a question whose
    function steps the optimizer, the weights after the step (``"weights"``)."""
    return {
        "seed": seed,
        "accum_steps": ACCUM_STEPS,
        "micro_batch_size": MICRO_BATCH,
        "dtype": "float64",
        "memory": True,
        "reads": reads,
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


def run_measured(spec: dict, call, warm_up_with=None) -> dict:
    """``call(model, loss_fn, micro_batches)`` (the student's function, however a question
    calls it: one that steps is handed its optimizer by the question) on the wide problem,
    measured; outputs: the projections of what the spec reads, and the memory (see
    :func:`coursekit.checks.memory_peak.measured`). ``warm_up_with``: a right answer of the
    question's (written in its check, not coursekit's own, which the grader's tripwire
    watches), called as ``call`` is, on the first micro-batches before the measure, so that
    what an honest call first uses (an optimizer's step, a scaler's, a module torch
    imports on first use) is in place; without it, a plain accumulation loop."""
    model, micro_batches = wide_problem(spec)
    loss_fn = nn.MSELoss()

    def warm_up() -> None:
        if warm_up_with is not None:
            warm_up_with(model, loss_fn, micro_batches[:WARM_UP])
        else:
            for inputs, targets in micro_batches[:WARM_UP]:
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
        reads = spec.get("reads", "grad")
        return {
            "grad_projection": projection(model, spec["seed"], reads),
            "passes": len(passes),
            "largest_forward": largest[0],
        }

    return measured(call_and_read, warm_up)


def projection(model: nn.Module, seed: int, reads: str = "grad") -> list[float] | None:
    """The gradient (or the weights) projected on :data:`PROJECTIONS` fixed random
    directions (uniform in [-0.5, 0.5)), one parameter at a time (so that reading it adds
    no memory of note); None when no gradient exists."""
    parameters = list(model.parameters())
    tensors = [p if reads == "weights" else p.grad for p in parameters]
    if all(t is None for t in tensors):
        return None
    generator = torch.Generator().manual_seed(seed + 1)
    totals = [0.0] * PROJECTIONS
    for parameter, tensor in zip(parameters, tensors, strict=True):
        for k in range(PROJECTIONS):
            direction = torch.rand(parameter.shape, generator=generator, dtype=torch.float64)
            direction -= 0.5
            if tensor is not None:
                totals[k] += float((tensor.detach().double() * direction).sum())
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
    window = window_bytes(spec)
    peak, fresh = outputs.get("peak_above_warm_up"), outputs.get("fresh_memory")
    measured = isinstance(peak, int | float) and isinstance(fresh, int | float)
    if not measured and outputs.get("memory") != "not measured":
        raise Failure(f"The memory test's measurement is missing {setting}.")
    # the verdict takes both: freeing memory the notebook held lowers the resident size
    # (not the faults); shared pages mapped in bulk escape the faults (not the resident size)
    peak = max(peak, fresh) if measured else None
    passes, largest = outputs.get("passes"), outputs.get("largest_forward")
    seen_whole = isinstance(largest, int) and largest > spec["micro_batch_size"]
    if peak is not None and peak > LINE * window and passes == 1 and not seen_whole:
        raise Failure(
            f"Your function needed {_mib(peak)} of memory beyond what one micro-batch's "
            f"forward and backward take {setting}: one backward() for the whole window keeps every "
            "micro-batch's graph, and its activations, alive until then. Call backward() "
            "once per micro-batch.",
            "single_backward",
        )
    if peak is not None and peak > LINE * window:
        raise Failure(
            f"Your function needed {_mib(peak)} of memory beyond what one micro-batch's "
            f"forward and backward take {setting}. The whole window's activations take "
            f"{_mib(window)} for each hidden layer, and yours were alive at once: a forward "
            "pass ran on the whole window (on the model or on a copy), or every micro-batch's "
            "graph was kept until one backward(). Run the forward and backward pass on one "
            "micro-batch at a time, so each micro-batch's activations are freed before the "
            "next.",
            "whole_batch_forward",
        )
    actual, wanted = outputs.get("grad_projection"), expected.get("grad_projection")
    what = "weights after the step" if spec.get("reads") == "weights" else "gradient"
    if actual is None and isinstance(passes, int) and passes > 0:
        raise Failure(
            f"backward() ran, but no gradient was left in .grad afterwards {setting}: "
            "something cleared the gradients at the end. Leave them for the optimizer step.",
            "gradients_cleared",
        )
    if actual is None:
        raise Failure(f"No parameter has a gradient after your function {setting}.", "no_backward")
    if not isinstance(actual, list) or not all(isinstance(v, int | float) for v in actual):
        raise Failure(f"The memory test's {what} could not be read {setting}.")
    gap = relative_gap([float(v) for v in actual], wanted)
    if gap > TOLERANCE:
        raise Failure(
            f"Your {what} differ{'' if what.endswith('step') else 's'} from the reference's "
            f"by {gap:.2e} (relative, on {PROJECTIONS} random projections) {setting}."
        )
