"""Checks for module 2 (02_loss_scaling), part 3: a bf16 model's gradients summed in float32.

A model cast to bf16 has bf16 ``.grad``; letting micro-batches add up there (or in any bf16
buffer) rounds the running sum to 8 significant bits at every addition (pitfall 14). The
check compares the student's sums with the float32 sums of the same bf16 micro-batch
gradients. A result that is off *and* holds only values a bf16 number can represent was
rounded to bf16 somewhere along the way: a float32 sum of many bf16 gradients almost never
is, so that signature names the mistake whatever route the rounding took.
"""

from __future__ import annotations

import torch
from torch import nn

from coursekit.checks.instruments import (
    Watch,
    judge_micro_batches_and_weights,
    tensor_list,
    weights_of,
)
from coursekit.checks.question import Failure, Question, relative_gap, scale_of
from coursekit.checks.registry import register
from coursekit.data import make_regression, split_micro_batches
from coursekit.models import tiny_mlp

MODULE = "02_loss_scaling"
# The same bf16 gradients summed in float32 in another order differ by float32 rounding,
# ~1e-7 relative; summed in bf16 they differ by ~1e-3 to 1e-2. 1e-5 sits between the two.
TOLERANCE = 1e-5


def _problem(spec):
    model = tiny_mlp(in_features=6, hidden=12, depth=2, seed=spec["seed"]).to(torch.bfloat16)
    size = spec["micro_batch_size"] * spec["accum_steps"]
    inputs, targets = make_regression(size, in_features=6, seed=spec["seed"] + 1)
    batches = split_micro_batches(inputs.bfloat16(), targets.bfloat16(), spec["micro_batch_size"])
    return model, batches


def _float32_sums(model, loss_fn, micro_batches, clear: bool):
    """Each micro-batch's bf16 ``.grad`` added into float32 sums; cleared after each addition
    when ``clear`` (the right answer), kept when not (the slip named "grad_not_cleared")."""
    sums = [torch.zeros_like(p, dtype=torch.float32) for p in model.parameters()]
    for inputs, targets in micro_batches:
        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()
        for total, parameter in zip(sums, model.parameters(), strict=True):
            total += parameter.grad
            if clear:
                parameter.grad = None
    return sums


def accumulate_in_float32(model, loss_fn, micro_batches):
    """The reference: each micro-batch's bf16 gradient added into a float32 sum, then cleared."""
    return _float32_sums(model, loss_fn, micro_batches, clear=True)


def _bf16_representable(values: list[float]) -> bool:
    exact = torch.tensor(values, dtype=torch.float64)
    return bool(torch.equal(exact.to(torch.bfloat16).double(), exact))


@register
class AccumulateInFloat32(Question):
    name = "accumulate_in_float32"
    module = MODULE
    points = 2

    def public_specs(self):
        return [
            {"seed": 1, "accum_steps": 16, "micro_batch_size": 8},
            {"seed": 2, "accum_steps": 64, "micro_batch_size": 4},
            {"seed": 3, "accum_steps": 1, "micro_batch_size": 8},
        ]

    def hidden_specs(self, rng):
        return [
            {
                "seed": rng.randrange(10**6),
                "accum_steps": rng.randint(12, 64),
                "micro_batch_size": rng.randint(2, 8),
            }
            for _ in range(3)
        ]

    def run(self, fn, spec):
        model, micro_batches = _problem(spec)
        shapes = [tuple(p.shape) for p in model.parameters()]
        watch = Watch(model)
        returned = fn(model, nn.MSELoss(), micro_batches)
        outputs = {
            "largest_forward": max(watch.forward_sizes, default=0),
            "backward_passes": watch.backward_passes,
            "weights_moved": weights_of(model) != watch.start,
            "model_dtypes": sorted({str(p.dtype) for p in model.parameters()}),
        }
        if isinstance(returned, torch.Tensor) or not isinstance(returned, list | tuple):
            outputs["returned"] = type(returned).__name__
            return outputs
        tensors = [t for t in returned if isinstance(t, torch.Tensor)]
        if len(tensors) != len(returned) or [tuple(t.shape) for t in tensors] != shapes:
            got = [tuple(getattr(t, "shape", ())) for t in returned]
            outputs["returned"] = f"shapes {got}"
            return outputs
        outputs["dtypes"] = sorted({str(t.dtype) for t in tensors})
        outputs["grad"] = tensor_list(torch.cat([t.detach().flatten() for t in tensors]))
        return outputs

    def reference(self):
        return accumulate_in_float32

    def judge(self, spec, outputs, expected):
        n, micro = spec["accum_steps"], spec["micro_batch_size"]
        setting = f"({n} micro-batches of {micro}, a bf16 model)"
        if "returned" in outputs:
            raise Failure(
                "Return a list with one float32 tensor per parameter, in the order of "
                f"model.parameters(), each of that parameter's shape; got {outputs['returned']} "
                f"{setting}."
            )
        judge_micro_batches_and_weights(outputs, micro, setting)
        if outputs.get("model_dtypes") != ["torch.bfloat16"]:
            raise Failure(
                f"The model's parameters are {', '.join(outputs.get('model_dtypes', []))} after "
                "your function: leave the model in bf16 (that is the memory it saves) and sum "
                f"its gradients in float32 buffers of your own {setting}.",
                "model_cast",
            )
        actual, wanted = outputs.get("grad"), expected["grad"]
        dtypes = outputs.get("dtypes", [])
        if "torch.bfloat16" in dtypes:
            raise Failure(
                "Your sums are bfloat16 tensors: a bf16 running sum rounds every addition to 8 "
                "significant bits. Keep the sums in float32 "
                f"(torch.zeros_like(p, dtype=torch.float32)) {setting}.",
                "accumulated_in_bf16",
            )
        if not set(dtypes) <= {"torch.float32", "torch.float64"}:  # float64 is finer still
            raise Failure(
                f"Your sums are {', '.join(dtypes)} tensors: keep them in float32, which has "
                "bf16's range and 24 significant bits "
                f"(torch.zeros_like(p, dtype=torch.float32)) {setting}.",
                "sums_not_float32",
            )
        if relative_gap(actual, wanted) <= TOLERANCE:
            return
        k = scale_of(actual, wanted)
        if k is not None and abs(k - n) < 1e-3 * n and n > 1:
            raise Failure(
                f"Your sums are {n} times the window's gradient: divide each micro-batch's loss "
                f"by the number of micro-batches {setting}.",
                "loss_not_divided",
            )
        model, micro_batches = _problem(spec)
        never_cleared = _float32_sums(model, nn.MSELoss(), micro_batches, clear=False)
        never_cleared = torch.cat([t.flatten() for t in never_cleared]).double().tolist()
        if n > 1 and relative_gap(actual, never_cleared) <= TOLERANCE:
            raise Failure(
                "Your sums count the early micro-batches again and again: .grad was never "
                "cleared, so each addition added the running .grad, not the new micro-batch's "
                f"gradient. Set p.grad = None after adding it to the float32 sum {setting}.",
                "grad_not_cleared",
            )
        # bf16's rounding moves a sum by percents, not more: a bigger gap is another slip
        # (one micro-batch's gradient alone is bf16-representable too)
        if _bf16_representable(actual) and n > 1 and relative_gap(actual, wanted) < 0.25:
            raise Failure(
                "Your float32 sums hold only values a bf16 number can represent: the running "
                "sum was rounded to bf16 on the way (gradients left to add up in the bf16 "
                ".grad, or a bf16 sum converted at the end). Add each micro-batch's .grad into "
                f"the float32 buffers, then clear .grad before the next backward {setting}.",
                "accumulated_in_bf16",
            )
        raise Failure(
            f"Your sums differ from the float32 sums of the micro-batches' bf16 gradients by "
            f"{relative_gap(actual, wanted):.1e} (relative) {setting}. Each micro-batch's "
            ".grad should be added once into its float32 buffer, and cleared before the next "
            "backward."
        )
