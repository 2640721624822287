"""Checks for module 1 (01_accumulation): one window, the loop, and memory.

Each question builds its inputs from a small spec (seeds and sizes), so the grader can
rebuild exactly the same problem in another process. Judges compare with the reference's
outputs and, on a mismatch, try the known mistakes before giving a generic message.
"""

from __future__ import annotations

import torch
from torch import nn

from coursekit.checks.instruments import (
    SINGLE_BACKWARD,
    StepCounter,
    Watch,
    as_floats,
    judge_micro_batches_and_weights,
    keeps_graph,
    require_gradient,
    tensor_list,
    weights_of,
)
from coursekit.checks.loop_variants import MISTAKES, run_loop
from coursekit.checks.question import Failure, Question, number_list, relative_gap, scale_of
from coursekit.checks.registry import register
from coursekit.data import make_regression, split_micro_batches
from coursekit.gradients import flat_gradient, full_batch_gradient
from coursekit.memory import activation_bytes
from coursekit.models import tiny_mlp
from coursekit.training import train_accumulated

MODULE = "01_accumulation"

# Summing N float64 micro-batch gradients in another order than the full batch does changes
# only the last bits: ~1e-15 relative. float32 keeps 24 bits (~6e-8): after a few hundred
# multiply-adds per element, 1e-5 leaves a wide margin over the rounding seen in practice.
TOLERANCE = {"float64": 1e-10, "float32": 1e-5}
DTYPES = {"float64": torch.float64, "float32": torch.float32}


# ---------------------------------------------------------------- accumulate_window


def _window_problem(spec):
    dtype = DTYPES[spec["dtype"]]
    model = tiny_mlp(in_features=5, hidden=7, depth=2, seed=spec["seed"], dtype=dtype)
    size = spec["micro_batch_size"] * spec["accum_steps"]
    inputs, targets = make_regression(size, in_features=5, seed=spec["seed"], dtype=dtype)
    return model, inputs, targets, split_micro_batches(inputs, targets, spec["micro_batch_size"])


def _reference_window(model, loss_fn, micro_batches):
    for inputs, targets in micro_batches:
        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()


@register
class AccumulateWindow(Question):
    name = "accumulate_window"
    module = MODULE
    points = 3

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
        ]

    def run(self, fn, spec):
        model, _, _, micro_batches = _window_problem(spec)
        watch = Watch(model)
        fn(model, nn.MSELoss(), micro_batches)
        return {
            "grad": tensor_list(flat_gradient(model.parameters())),
            "largest_forward": max(watch.forward_sizes, default=0),
            "backward_passes": watch.backward_passes,
            "weights_moved": weights_of(model) != watch.start,
        }

    def reference(self):
        return _reference_window

    def judge(self, spec, outputs, expected):
        micro, n = spec["micro_batch_size"], spec["accum_steps"]
        setting = f"({n} micro-batches of {micro})"
        judge_micro_batches_and_weights(outputs, micro, setting)
        require_gradient(outputs)
        actual = number_list(outputs, "grad", "a gradient for every parameter")
        wanted = expected["grad"]
        gap = relative_gap(actual, wanted)
        if gap <= TOLERANCE[spec["dtype"]]:
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
        ]
        messages = {
            "loss_not_divided": (
                f"Your gradient is exactly {n} times the full-batch gradient (accum_steps = "
                f"{n}): the loss was not divided by accum_steps. Divide each micro-batch's loss "
                "by the number of micro-batches before backward()."
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
                f"Your gradient is {n} times too small: the loss was divided by accum_steps "
                "twice (or the gradients were divided again after backward)."
            ),
        }
        for mistake, pattern in candidates:
            if n > 1 and relative_gap(actual, pattern) <= 1e-6:
                raise Failure(messages[mistake], mistake)
        k = scale_of(actual, wanted)
        if k is not None:
            raise Failure(
                f"Your gradient points the right way but is {k:.3g} times the full-batch "
                f"gradient: check what you divide the loss by (it should be {n}).",
                "wrong_scale",
            )
        raise Failure(
            f"Your gradient differs from the full-batch gradient by {gap:.2e} (relative), more "
            f"than the {spec['dtype']} tolerance of {TOLERANCE[spec['dtype']]:.0e}."
        )


# ---------------------------------------------------------------- train_accumulated


def _loop_problem(spec):
    model = tiny_mlp(in_features=5, hidden=7, depth=2, seed=spec["seed"], dtype=torch.float64)
    inputs, targets = make_regression(
        spec["n_samples"], in_features=5, seed=spec["seed"] + 1, dtype=torch.float64
    )
    if spec["optimizer"] == "adam":
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=spec.get("momentum", 0))
    return model, optimizer, split_micro_batches(inputs, targets, spec["micro_batch_size"])


@register
class TrainAccumulated(Question):
    name = "train_accumulated"
    module = MODULE
    points = 4

    def public_specs(self):
        def spec(seed, n_samples, micro, accum):
            return {
                "seed": seed,
                "n_samples": n_samples,
                "micro_batch_size": micro,
                "accum_steps": accum,
                "optimizer": "sgd",
            }

        return [
            spec(11, 32, 4, 4),  # 8 micro-batches: two full windows
            spec(12, 40, 4, 4),  # 10 micro-batches: windows of 4, 4 and 2
            spec(13, 38, 4, 4),  # the last micro-batch has 2 samples
            spec(14, 20, 4, 1),  # no accumulation at all
            spec(15, 12, 4, 5),  # one window, shorter than accum_steps
        ]

    def hidden_specs(self, rng):
        """Every draw has full windows, a shorter last window and a smaller last micro-batch."""
        specs = []
        for optimizer in ("sgd", "sgd", "adam"):
            micro, accum = rng.randint(2, 6), rng.randint(2, 5)
            n_micro = accum * rng.randint(1, 3) + rng.randint(1, accum - 1)
            specs.append(
                {
                    "seed": rng.randrange(10**6),
                    "n_samples": (n_micro - 1) * micro + rng.randint(1, micro - 1),
                    "micro_batch_size": micro,
                    "accum_steps": accum,
                    "optimizer": optimizer,
                    "momentum": rng.choice([0.0, 0.9]),
                }
            )
        return specs

    def run(self, fn, spec):
        model, optimizer, micro_batches = _loop_problem(spec)
        counter = StepCounter(model, optimizer)
        watch = Watch(model)
        logged = fn(model, optimizer, nn.MSELoss(), micro_batches, spec["accum_steps"])
        return {
            "weights": weights_of(model),
            "losses": as_floats(logged),
            "losses_keep_graph": keeps_graph(logged),
            "steps": counter.steps,
            "zero_grads": counter.zero_grads,
            "backward_passes": watch.backward_passes,
        }

    def reference(self):
        return train_accumulated

    def _variant(self, spec, mistake):
        model, optimizer, micro_batches = _loop_problem(spec)
        run_loop(model, optimizer, nn.MSELoss(), micro_batches, spec["accum_steps"], mistake)
        return weights_of(model)

    def judge(self, spec, outputs, expected):
        n_micro = -(-spec["n_samples"] // spec["micro_batch_size"])
        accum = spec["accum_steps"]
        wanted_steps = -(-n_micro // accum)
        setting = (
            f"({spec['n_samples']} samples in micro-batches of {spec['micro_batch_size']}, "
            f"accum_steps = {accum}: {wanted_steps} optimizer steps expected)"
        )
        weights = number_list(outputs, "weights", "the model's weights")
        if relative_gap(weights, expected["weights"]) > TOLERANCE["float64"]:
            self._diagnose(spec, outputs, weights, n_micro, wanted_steps, setting)
        backward_passes = outputs.get("backward_passes")
        if isinstance(backward_passes, int) and backward_passes < n_micro:
            raise Failure(
                f"The weights are right, but you called backward() {backward_passes} times for "
                f"{n_micro} micro-batches: " + SINGLE_BACKWARD,
                "single_backward",
            )
        self._judge_losses(outputs, expected, spec, setting)

    def _diagnose(self, spec, outputs, weights, n_micro, wanted_steps, setting):
        steps, zero_grads = outputs.get("steps"), outputs.get("zero_grads")
        full_windows = n_micro // spec["accum_steps"]
        if steps == n_micro != wanted_steps:
            raise Failure(
                f"{MISTAKES['step_every_micro_batch']} {setting}", "step_every_micro_batch"
            )
        if steps == full_windows != wanted_steps:
            raise Failure(f"{MISTAKES['last_window_dropped']} {setting}", "last_window_dropped")
        model, _, _ = _loop_problem(spec)
        if steps and relative_gap(weights, weights_of(model)) == 0.0:
            raise Failure(f"{MISTAKES['zero_grad_before_step']} {setting}", "zero_grad_before_step")
        for mistake in MISTAKES:
            if relative_gap(weights, self._variant(spec, mistake)) <= 1e-9:
                raise Failure(f"{MISTAKES[mistake]} {setting}", mistake)
        raise Failure(
            f"The final weights differ from the reference loop's {setting}. You called "
            f"optimizer.step() {steps} times and zero_grad() {zero_grads} times."
        )

    def _judge_losses(self, outputs, expected, spec, setting):
        losses = outputs.get("losses")
        wanted = expected["losses"]
        if not isinstance(losses, list):
            raise Failure(
                "The weights are right, but return a list with one float per optimizer step: "
                f"the mean loss over that window's samples. Got {losses}.",
                "logged_loss_wrong",
            )
        actual = number_list(outputs, "losses", "a list of numbers")
        if len(actual) != len(wanted):
            raise Failure(
                f"The weights are right, but you returned {len(actual)} losses: return one "
                f"per optimizer step {setting}.",
                "logged_loss_wrong",
            )
        if relative_gap(actual, wanted) <= 1e-9:
            if outputs.get("losses_keep_graph") is True:
                raise Failure(
                    "The weights and losses are right, but return plain floats (loss.item()), "
                    "not tensors that require grad: each one keeps its micro-batch's graph, and "
                    "its activations, alive.",
                    "logged_tensors",
                )
            return
        k = scale_of(actual, wanted)
        if k is not None and abs(k - spec["accum_steps"]) < 1e-6 and spec["accum_steps"] > 1:
            raise Failure(
                f"The weights are right, but the logged losses are {spec['accum_steps']} times "
                "too large: you logged the sum of the micro-batch losses. Log the window's mean.",
                "logged_sum",
            )
        if k is not None and abs(k * spec["accum_steps"] - 1) < 1e-6:
            raise Failure(
                f"The weights are right, but the logged loss is {spec['accum_steps']} times too "
                "small: you logged the loss after scaling it for backward. Log the window's "
                "mean loss.",
                "logged_scaled_loss",
            )
        raise Failure(
            "The weights are right, but the returned losses are not each window's mean loss "
            f"(expected {[round(v, 4) for v in wanted]}, got {[round(v, 4) for v in actual]}).",
            "logged_loss_wrong",
        )


# ---------------------------------------------------------------- plan_micro_batch


def _memory_model(spec):
    model = tiny_mlp(in_features=spec["in_features"], hidden=spec["hidden"], depth=3, seed=21)
    return model, (lambda size: torch.zeros(size, spec["in_features"]))


def _divisors(n: int) -> list[int]:
    return [m for m in range(1, n + 1) if n % m == 0]


def _reference_plan(model, make_inputs, budget_bytes, effective_batch_size):
    for size in sorted(_divisors(effective_batch_size), reverse=True):
        if activation_bytes(model, make_inputs(size)) <= budget_bytes:
            return size, effective_batch_size // size
    raise ValueError(f"Not even one sample's activations fit in {budget_bytes} bytes.")


def _plan_spec(effective_batch_size, in_features, hidden, budget_of, label):
    spec = {
        "effective_batch_size": effective_batch_size,
        "in_features": in_features,
        "hidden": hidden,
        "label": label,
    }
    model, make_inputs = _memory_model(spec)
    measured = {m: activation_bytes(model, make_inputs(m)) for m in _divisors(effective_batch_size)}
    return {**spec, "budget_bytes": int(budget_of(measured))}


@register
class PlanMicroBatch(Question):
    name = "plan_micro_batch"
    module = MODULE
    points = 3

    def public_specs(self):
        return [
            _plan_spec(
                32, 32, 64, lambda m: (m[8] + m[16]) // 2, "a budget between 8 and 16 samples"
            ),
            _plan_spec(32, 32, 64, lambda m: m[16], "a budget exactly equal to 16 samples' bytes"),
            _plan_spec(24, 32, 64, lambda m: 10 * m[24], "a budget where everything fits"),
            _plan_spec(32, 32, 64, lambda m: m[1] - 1, "a budget where nothing fits"),
        ]

    def hidden_specs(self, rng):
        effective = rng.choice([24, 36, 48, 60])
        sizes = _divisors(effective)
        pick = rng.choice(sizes[1:-1])

        def drawn(budget_of):
            return _plan_spec(
                effective,
                rng.randint(8, 40),
                rng.randint(16, 80),
                budget_of,
                "a budget drawn at grading time",
            )

        return [
            drawn(lambda m: m[pick]),  # exactly the bytes of one size: <= matters
            drawn(lambda m: m[pick] + 1),
            drawn(lambda m: m[1] - 1),  # nothing fits
            drawn(lambda m: m[effective] + 1),  # everything fits
        ]

    def run(self, fn, spec):
        model, make_inputs = _memory_model(spec)
        try:
            answer = fn(model, make_inputs, spec["budget_bytes"], spec["effective_batch_size"])
        except NotImplementedError:
            raise
        except Exception as exc:  # which exception is part of the answer here
            return {"raised": type(exc).__name__, "message": str(exc)[:200]}
        if isinstance(answer, (tuple, list)) and len(answer) == 2:
            try:
                return {"answer": [int(answer[0]), int(answer[1])]}
            except (TypeError, ValueError):
                pass
        return {"answer": repr(answer)[:200]}

    def reference(self):
        return _reference_plan

    def judge(self, spec, outputs, expected):
        budget, effective = spec["budget_bytes"], spec["effective_batch_size"]
        where = f"({spec['label']}: budget {budget} bytes, effective batch {effective})"
        model, make_inputs = _memory_model(spec)
        raised = outputs.get("raised")
        if "raised" in expected:
            if raised == "ValueError":
                return
            if raised:
                raise Failure(
                    f"Nothing fits {where}, and you raised {raised}: raise ValueError, the "
                    "exception Python uses for an argument with no valid answer.",
                    "wrong_exception",
                )
            needs = activation_bytes(model, make_inputs(1))
            raise Failure(
                f"With a budget of {budget} bytes even a micro-batch of 1 needs {needs} bytes, "
                f"so nothing fits; you returned {outputs.get('answer')!r}. Raise ValueError "
                "with a message that says so.",
                "nothing_fits_not_raised",
            )
        best = expected["answer"][0]
        if raised == "ValueError":
            raise Failure(
                f"You raised ValueError, but a micro-batch of {best} fits {where}.", "not_largest"
            )
        if raised:
            raise Failure(f"Your function raised {raised}: {outputs.get('message', '')} {where}")
        answer = outputs.get("answer")
        if not (isinstance(answer, list) and len(answer) == 2):
            raise Failure(
                f"Return a tuple (micro_batch_size, accum_steps); got {str(answer)[:80]}."
            )
        if not all(type(v) is int and 0 < v <= 10**6 for v in answer):
            raise Failure(f"Return two positive whole numbers; got {str(answer)[:80]}.")
        micro, accum = answer
        if (accum, micro) == tuple(expected["answer"]) and micro != accum:
            raise Failure(
                f"You returned ({micro}, {accum}): the right numbers in the wrong order. Return "
                f"(micro_batch_size, accum_steps) {where}.",
                "swapped",
            )
        if micro * accum != effective:
            raise Failure(
                f"micro_batch_size x accum_steps = {micro} x {accum} = {micro * accum}, but the "
                f"effective batch must be {effective} {where}.",
                "effective_batch_wrong",
            )
        if micro < 1 or effective % micro:
            raise Failure(f"{micro} does not divide {effective} {where}.")
        needs = activation_bytes(model, make_inputs(micro))
        if needs > budget:
            raise Failure(
                f"A micro-batch of {micro} needs {needs} bytes of activations, over the budget "
                f"{where}. Only sizes whose measured bytes are <= the budget fit.",
                "does_not_fit",
            )
        if micro < best:
            best_needs = activation_bytes(model, make_inputs(best))
            hint = (
                " A size whose bytes equal the budget exactly still fits: use <=, not <."
                if best_needs == budget
                else ""
            )
            raise Failure(
                f"A larger micro-batch also fits: {best} needs {best_needs} bytes {where}. The "
                f"largest that fits means the fewest accumulation steps.{hint}",
                "not_largest",
            )
