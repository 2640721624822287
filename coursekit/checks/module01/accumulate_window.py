"""``accumulate_window``: add one window's micro-batch gradients up in ``.grad``.

The hand-in runs on a tiny MLP (float64, and once float32) and a window of micro-batches;
its gradient is compared with the full-batch gradient, to a tolerance per dtype. A wrong one
is matched against each known mistake's gradient (the loss not divided, zero_grad inside
the loop, the first micro-batch only, divided twice, a micro-batch skipped), then against a
mere scale or a flipped sign, before a generic verdict that says how far off it is. A
forward pass on more than one micro-batch, moved weights, cleared gradients or a single
backward for the window fail even when the gradient is right. A last hidden spec measures
the memory the call takes on a wide model (:mod:`coursekit.checks.window_memory`): the
whole window's activations alive at once fail it, whatever model or copy they belong to.
"""

from __future__ import annotations

import torch
from torch import nn

from coursekit.checks.instruments import (
    SINGLE_BACKWARD,
    Watch,
    judge_micro_batches_and_weights,
    require_gradient,
    tensor_list,
    weights_of,
)
from coursekit.checks.module01.common import MODULE, TOLERANCE
from coursekit.checks.question import (
    Failure,
    Question,
    Rule,
    flipped_sign,
    number_list,
    relative_gap,
    scale_of,
)
from coursekit.checks.registry import register
from coursekit.checks.side_effects import (
    Kept,
    gradient_again,
    judge_again,
    judge_left_behind,
)
from coursekit.checks.tamper_evident import judge_instruments, watched
from coursekit.checks.window_memory import (
    is_memory_spec,
    judge_memory,
    memory_spec,
    run_measured,
)
from coursekit.data import make_regression, split_micro_batches
from coursekit.gradients import flat_gradient, full_batch_gradient
from coursekit.models import tiny_mlp

DTYPES = {"float64": torch.float64, "float32": torch.float32}


def _window_problem(spec):
    dtype = DTYPES[spec["dtype"]]
    model = tiny_mlp(in_features=5, hidden=7, depth=2, seed=spec["seed"], dtype=dtype)
    size = spec["micro_batch_size"] * spec["accum_steps"]
    inputs, targets = make_regression(size, in_features=5, seed=spec["seed"], dtype=dtype)
    if spec.get("frozen"):  # the first bias frozen, as in fine-tuning: it gets no gradient
        list(model.parameters())[1].requires_grad_(False)
    return model, inputs, targets, split_micro_batches(inputs, targets, spec["micro_batch_size"])


def _reference_window(model, loss_fn, micro_batches):
    for inputs, targets in micro_batches:
        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()


@register
class AccumulateWindow(Question):
    name = "accumulate_window"
    module = MODULE
    points = 3
    # coursekit code that answers it under other names (flagged when called for it)
    library_answers = (
        "coursekit.noise_scale._accumulate",
        "coursekit.checks.window_memory._honest_warm_up",
    )
    rules = (
        Rule(
            "For each `(inputs, targets)` in `micro_batches`, run the forward pass and call "
            "`backward()` on the loss divided by the number of micro-batches.",
            "every spec (1 to 4 micro-batches, float64 and float32)",
            (
                "loss_not_divided",
                "divided_twice",
                "no_backward",
                "single_backward",
                "whole_batch_forward",
                "micro_batch_skipped",
                "first_micro_batch_only",
                "grads_divided_after",
            ),
        ),
        Rule(
            "Afterwards every parameter's `.grad` must hold the gradient of the mean loss over "
            "all the window's samples.",
            "every spec; float64 ones to 1e-10",
            ("wrong_sign", "zero_grad_inside_loop", "float32_accumulation"),
        ),
        Rule(
            "The gradients start empty; do not step or clear them.",
            "every spec: the weights must not move and .grad must hold the window's gradient",
            ("stepped_in_window", "gradients_cleared"),
        ),
    )

    def public_specs(self):
        return [
            {"seed": 1, "accum_steps": 4, "micro_batch_size": 6, "dtype": "float64"},
            {"seed": 2, "accum_steps": 3, "micro_batch_size": 6, "dtype": "float64"},
            {"seed": 3, "accum_steps": 1, "micro_batch_size": 6, "dtype": "float64"},
            {"seed": 4, "accum_steps": 4, "micro_batch_size": 6, "dtype": "float32"},
        ]

    def hidden_specs(self, rng):
        return [
            {
                "seed": rng.randrange(10**6),
                "accum_steps": rng.randint(2, 9),
                "micro_batch_size": rng.randint(2, 9),
                "dtype": dtype,
            }
            for dtype in ("float64", "float64", "float32")
        ] + [
            {
                "seed": rng.randrange(10**6),
                "accum_steps": 3,
                "micro_batch_size": 4,
                "dtype": "float64",
                "frozen": True,
            },
            memory_spec(rng.randrange(10**6)),
        ]

    def memory_call(self, fn) -> tuple:
        """How the memory test calls ``fn``, and the right answer its warm-up runs
        (:func:`coursekit.checks.window_memory.run_measured`)."""
        return fn, None

    def run(self, fn, spec):
        if is_memory_spec(spec):
            return run_measured(spec, *self.memory_call(fn))
        model, _, _, micro_batches = _window_problem(spec)
        watch = Watch(model)
        kept = Kept((model,), micro_batches=micro_batches)
        watched((watch,), fn, model, nn.MSELoss(), micro_batches)
        outputs = {
            **kept.report(),
            "grad": tensor_list(flat_gradient(model.parameters())),
            "largest_forward": max(watch.forward_sizes, default=0),
            "backward_passes": watch.backward_passes,
            "weights_moved": weights_of(model) != watch.start,
            "instruments": watch.verdict(samples=spec["micro_batch_size"] * spec["accum_steps"]),
        }
        if outputs["input_changed"] is None and not outputs["weights_moved"]:
            call = lambda: fn(model, nn.MSELoss(), micro_batches)  # noqa: E731
            outputs["again_gap"] = gradient_again(outputs["grad"], call, model.parameters())
        return outputs

    def reference(self):
        return _reference_window

    def judge(self, spec, outputs, expected):
        if is_memory_spec(spec):
            return judge_memory(spec, outputs, expected)
        micro, n = spec["micro_batch_size"], spec["accum_steps"]
        frozen = ", the first bias frozen" if spec.get("frozen") else ""
        setting = f"({n} micro-batches of {micro}{frozen})"
        judge_left_behind(outputs, setting)
        judge_instruments(outputs, setting, bypass=False)
        judge_again(outputs, TOLERANCE[spec["dtype"]], setting)
        judge_micro_batches_and_weights(outputs, micro, setting)
        passes = outputs.get("backward_passes")
        grad = outputs.get("grad")
        cleared = grad is None or (isinstance(grad, list) and not any(grad))
        if isinstance(passes, int) and passes > 0 and cleared:
            raise Failure(
                f"backward() ran {passes} times, but no gradient was left in .grad afterwards: "
                "something cleared the gradients at the end (zero_grad() or p.grad = None). "
                "Leave them for the optimizer step.",
                "gradients_cleared",
            )
        require_gradient(outputs)
        actual = number_list(outputs, "grad", "a gradient for every parameter")
        wanted = expected["grad"]
        gap = relative_gap(actual, wanted)
        if gap <= TOLERANCE[spec["dtype"]]:
            judge_instruments(outputs, setting)
            if n > 1 and outputs.get("backward_passes") == 1:
                raise Failure("The gradient is right, but " + SINGLE_BACKWARD, "single_backward")
            return
        model, _, _, micro_batches = _window_problem(spec)
        first = full_batch_gradient(model, nn.MSELoss(), *micro_batches[0]).tolist()
        last = full_batch_gradient(model, nn.MSELoss(), *micro_batches[-1]).tolist()
        candidates = [
            ("loss_not_divided", [g * n for g in wanted]),
            ("zero_grad_inside_loop", [g / n for g in last]),
            ("zero_grad_inside_loop", last),
            ("first_micro_batch_only", [g / n for g in first]),
            ("first_micro_batch_only", first),
            ("divided_twice", [g / n for g in wanted]),
            ("micro_batch_skipped", [g - h / n for g, h in zip(wanted, last, strict=True)]),
            ("micro_batch_skipped", [g - h / n for g, h in zip(wanted, first, strict=True)]),
        ]
        messages = {
            "loss_not_divided": (
                f"Your gradient is exactly {n} times the full-batch gradient ({n} micro-batches): "
                "the loss was not divided by the number of micro-batches. Divide each "
                "micro-batch's loss by len(micro_batches) before backward()."
            ),
            "zero_grad_inside_loop": (
                "Your gradient is the last micro-batch's alone: something zeroes the gradients "
                "inside the loop, so earlier micro-batches are wiped. Let them add up."
            ),
            "first_micro_batch_only": (
                "Your gradient is the first micro-batch's alone: the loop stops (or returns) "
                "after one micro-batch. Run forward and backward on every micro-batch."
            ),
            "divided_twice": (
                f"Your gradient is {n} times too small: the loss was divided by the number of "
                "micro-batches twice (or the gradients were divided again after backward)."
            ),
            "micro_batch_skipped": (
                f"Your gradient holds {n - 1} of the {n} micro-batches: one (the first or the "
                "last) never ran forward and backward. Loop over every micro-batch, e.g. "
                "`for inputs, targets in micro_batches:` rather than a range that stops early."
            ),
        }
        for mistake, pattern in candidates:
            if n > 1 and relative_gap(actual, pattern) <= 1e-6:
                raise Failure(messages[mistake], mistake)
        k = scale_of(actual, wanted)
        if k is not None and k < 0:
            raise flipped_sign(k, "the full-batch gradient")
        if k is not None and abs(k - 1) > 1e-4:  # k near 1: rounding, not a scale
            raise Failure(
                f"Your gradient points the right way but is {k:.3g} times the full-batch "
                f"gradient: check what you divide the loss by (it should be {n}).",
                "wrong_scale",
            )
        hint = ""
        if spec["dtype"] == "float64" and gap < TOLERANCE["float32"]:
            hint = (
                " That is far above float64 rounding but about float32's (~1e-7): was "
                "something computed or summed in float32 (a torch.zeros buffer, .float())?"
            )
        raise Failure(
            f"Your gradient differs from the full-batch gradient by {gap:.2e} (relative), more "
            f"than the {spec['dtype']} tolerance of {TOLERANCE[spec['dtype']]:.0e} {setting}."
            + hint
        )
