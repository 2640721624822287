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
from coursekit.checks.question import (
    Failure,
    Question,
    flipped_sign,
    number_list,
    relative_gap,
    scale_of,
)
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


# ---------------------------------------------------------------- train_accumulated


def _loop_problem(spec, like=None):
    """A fresh model, optimizer and micro-batches for ``spec``. With ``like``, an earlier
    problem for the same spec, its model is reset to the starting weights and reused instead
    of rebuilt (a judge replays many loops; a new optimizer holds no state of the last)."""
    if like is None:
        model = tiny_mlp(in_features=5, hidden=7, depth=2, seed=spec["seed"], dtype=torch.float64)
        inputs, targets = make_regression(
            spec["n_samples"], in_features=5, seed=spec["seed"] + 1, dtype=torch.float64
        )
        micro_batches = split_micro_batches(inputs, targets, spec["micro_batch_size"])
        model.start = [p.detach().clone() for p in model.parameters()]
    else:
        model, micro_batches = like[0], like[2]
        with torch.no_grad():
            for p, start in zip(model.parameters(), model.start, strict=True):
                p.copy_(start)
                p.grad = None
    if spec["optimizer"] == "adam":
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=spec.get("momentum", 0))
    return model, optimizer, micro_batches


class _GradientPasses:
    """Counts the autograd passes that reach the model's first parameter.

    A tensor hook fires for ``backward()`` and for ``torch.autograd.grad`` alike, so a loop
    that computes each micro-batch's gradient with ``torch.autograd.grad`` and sets ``.grad``
    itself is judged like one that calls ``backward()``: what matters is one pass per
    micro-batch (one graph alive at a time), not which call makes it.
    """

    def __init__(self, model: nn.Module):
        self.count = 0
        next(model.parameters()).register_hook(self._seen)

    def _seen(self, _grad) -> None:
        self.count += 1


class _Enough(Exception):
    """Stops a known mistake's loop once the steps to compare have run."""


_RECORDED_STEPS = 64  # weights after each optimizer step, to say which step went wrong


def _same_data(given, now) -> bool:
    """Whether the caller's list of micro-batches still holds the same, unchanged tensors."""
    return len(given) == len(now) and all(
        a is c and b is d and torch.equal(a, a_copy) and torch.equal(b, b_copy)
        for (a, b, a_copy, b_copy), (c, d) in zip(given, now, strict=True)
    )


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
        """Every draw has full windows, a shorter last window and a smaller last micro-batch;
        a fixed last spec calls the function twice on the same model and optimizer (two
        epochs), so state left behind by the first call (gradients after the last step, a
        list kept between calls) changes the second."""
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
        specs.append(
            {
                "seed": 16,
                "n_samples": 13,  # 5 micro-batches of 3 (the last has 1): windows of 3 and 2
                "micro_batch_size": 3,
                "accum_steps": 3,
                "optimizer": "sgd",
                "momentum": 0.9,
                "epochs": 2,
            }
        )
        return specs

    def run(self, fn, spec):
        model, optimizer, micro_batches = _loop_problem(spec)
        counter = StepCounter(model, optimizer)
        passes = _GradientPasses(model)
        step_weights: list[list[float]] = []

        def record(*_args) -> None:
            if len(step_weights) < _RECORDED_STEPS:
                step_weights.append(weights_of(model))

        optimizer.register_step_post_hook(record)
        given = [(x, y, x.clone(), y.clone()) for x, y in micro_batches]
        modified, grads_left, logged = False, False, None
        for epoch in range(spec.get("epochs", 1)):
            logged = fn(model, optimizer, nn.MSELoss(), micro_batches, spec["accum_steps"])
            modified = modified or not _same_data(given, micro_batches)
            if epoch == 0:
                grads_left = any(
                    p.grad is not None and bool(p.grad.any()) for p in model.parameters()
                )
        return {
            "weights": weights_of(model),
            "losses": as_floats(logged),
            "losses_keep_graph": keeps_graph(logged),
            "steps": counter.steps,
            "zero_grads": counter.zero_grads,
            "backward_passes": passes.count,
            "step_weights": step_weights,
            "grads_left": grads_left,
            "inputs_modified": modified,
        }

    def reference(self):
        return train_accumulated

    def _variant(self, spec, mistake, like=None, check=None):
        """A known mistake's final weights. With ``check``, the weights the student's loop
        reached after each of its first steps, the loop stops (and None is returned) as soon
        as a step is seen not to reach them: most mistakes are told apart in the first steps,
        without running to the end."""
        model, optimizer, micro_batches = _loop_problem(spec, like)
        seen = [0]

        def compare(*_args) -> None:
            index = seen[0]
            if index < len(check) and relative_gap(weights_of(model), check[index]) > 1e-9:
                raise _Enough
            seen[0] += 1

        if check is not None:
            optimizer.register_step_post_hook(compare)
        try:
            for _ in range(spec.get("epochs", 1)):
                run_loop(
                    model, optimizer, nn.MSELoss(), micro_batches, spec["accum_steps"], mistake
                )
        except _Enough:
            return None
        return weights_of(model)

    @staticmethod
    def _steps_of(spec, mistake, n_micro) -> int:
        """How many optimizer steps a known mistake's loop makes."""
        accum, epochs = spec["accum_steps"], spec.get("epochs", 1)
        if mistake == "step_every_micro_batch":
            per_call = n_micro
        elif mistake == "last_window_dropped":
            per_call = n_micro // accum
        elif mistake == "off_by_one_boundary":
            per_call = sum(i % accum == 0 or i == n_micro - 1 for i in range(n_micro))
        else:
            per_call = -(-n_micro // accum)
        return per_call * epochs

    def _matches(self, spec, mistake, outputs, weights, first_wrong, like) -> bool:
        """Whether the final weights are a known mistake's. Its loop must make as many steps,
        agree with the student's at every step up to the first that went wrong (it stops as
        soon as it does not), then at the end."""
        n_micro = len(like[2])
        if outputs.get("steps") != self._steps_of(spec, mistake, n_micro):
            return False
        check = None
        if first_wrong is not None:  # the student's steps up to the first wrong one
            check = outputs["step_weights"][: first_wrong + 1]
        final = self._variant(spec, mistake, like, check)
        return final is not None and relative_gap(weights, final) <= 1e-9

    def judge(self, spec, outputs, expected):
        epochs = spec.get("epochs", 1)
        n_micro = -(-spec["n_samples"] // spec["micro_batch_size"])
        accum = spec["accum_steps"]
        per_call = -(-n_micro // accum)
        setting = (
            f"({spec['n_samples']} samples in micro-batches of {spec['micro_batch_size']}, "
            f"accum_steps = {accum}: {per_call} optimizer steps expected"
            + (f" per call, {epochs} calls on the same model" if epochs > 1 else "")
            + ")"
        )
        if outputs.get("inputs_modified") is True:
            raise Failure(
                "Your function changed the list of micro-batches it was given (or the tensors "
                "in it): the caller passes the same list again for the next epoch. Read it, "
                "copy it if you must (list(micro_batches)), but do not pop from it or change "
                f"it in place {setting}.",
                "micro_batches_modified",
            )
        weights = number_list(outputs, "weights", "the model's weights")
        if relative_gap(weights, expected["weights"]) > TOLERANCE["float64"]:
            self._diagnose(spec, outputs, expected, weights, n_micro, per_call, setting)
        backward_passes = outputs.get("backward_passes")
        if isinstance(backward_passes, int) and backward_passes < n_micro * epochs:
            raise Failure(
                f"The weights are right, but the gradients were computed in {backward_passes} "
                f"backward passes for {n_micro * epochs} micro-batches: " + SINGLE_BACKWARD,
                "single_backward",
            )
        self._judge_losses(outputs, expected, spec, setting)

    def _diagnose(self, spec, outputs, expected, weights, n_micro, per_call, setting):
        epochs = spec.get("epochs", 1)
        steps, zero_grads = outputs.get("steps"), outputs.get("zero_grads")
        full_windows = n_micro // spec["accum_steps"]
        like = _loop_problem(spec)
        start = weights_of(like[0])
        if steps == 0 and relative_gap(weights, start) > 0.0:
            raise Failure(
                "The weights changed, but optimizer.step() never ran: you updated them "
                "yourself (p.data -= lr * p.grad?). That ignores the optimizer's momentum and "
                f"Adam's state; call optimizer.step() once per window {setting}.",
                "optimizer_not_stepped",
            )
        if steps == n_micro * epochs != per_call * epochs:
            raise Failure(
                f"{MISTAKES['step_every_micro_batch']} {setting}", "step_every_micro_batch"
            )
        if steps == full_windows * epochs != per_call * epochs:
            raise Failure(f"{MISTAKES['last_window_dropped']} {setting}", "last_window_dropped")
        if steps and relative_gap(weights, start) == 0.0:
            raise Failure(f"{MISTAKES['zero_grad_before_step']} {setting}", "zero_grad_before_step")
        first_wrong = self._first_wrong_step(outputs, expected)
        for mistake in MISTAKES:
            if self._matches(spec, mistake, outputs, weights, first_wrong, like):
                raise Failure(f"{MISTAKES[mistake]} {setting}", mistake)
        if (
            epochs > 1
            and first_wrong == per_call
            and steps == per_call * epochs
            and outputs.get("grads_left") is True
        ):
            raise Failure(
                "The first call is right, but it left gradients in .grad after its last "
                "optimizer step (a last, shorter window stepped without zero_grad()?), and the "
                "second call added them to its first window. Call optimizer.zero_grad() after "
                f"every step, the last one too {setting}.",
                "grads_left_after_last_step",
            )
        where = ""
        if first_wrong is not None:
            where = " " + self._describe_step(spec, first_wrong, n_micro, per_call)
        raise Failure(
            f"The final weights differ from the reference loop's {setting}.{where} You called "
            f"optimizer.step() {steps} times and zero_grad() {zero_grads} times."
        )

    @staticmethod
    def _first_wrong_step(outputs, expected) -> int | None:
        """The index of the first optimizer step whose weights differ from the reference's;
        None when every step both made agrees (or the record is not plain numbers)."""
        actual, wanted = outputs.get("step_weights"), expected["step_weights"]
        if not isinstance(actual, list):
            return None
        for index, (mine, right) in enumerate(zip(actual, wanted, strict=False)):
            if not isinstance(mine, list) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in mine
            ):
                return None
            if relative_gap(mine, right) > TOLERANCE["float64"]:
                return index
        return None

    @staticmethod
    def _describe_step(spec, index, n_micro, per_call) -> str:
        accum, micro = spec["accum_steps"], spec["micro_batch_size"]
        window = index % per_call
        first, last = window * accum + 1, min((window + 1) * accum, n_micro)
        text = (
            f"Your first {index} optimizer step{'s' if index != 1 else ''} match the "
            f"reference's; step {index + 1} differs: window {window + 1} of {per_call} "
            f"(micro-batches {first} to {last}"
        )
        if last - first + 1 < accum:
            text += f", the last window, only {last - first + 1} micro-batches"
        remainder = spec["n_samples"] - (n_micro - 1) * micro
        if last == n_micro and remainder != micro:
            text += f"; its last micro-batch has only {remainder} samples"
        text += ")"
        if index >= per_call:
            text += ", in the second call on the same model"
        return text + "."

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
        if len(actual) > len(wanted) and relative_gap(actual[-len(wanted) :], wanted) <= 1e-9:
            raise Failure(
                f"The weights are right, but you returned {len(actual)} losses: the last "
                f"{len(wanted)} are this call's, the rest are left from earlier calls. The list "
                "lives between calls (a default argument like losses=[] or a global): make a "
                f"new one in each call {setting}.",
                "losses_kept_between_calls",
            )
        if len(actual) != len(wanted):
            raise Failure(
                f"The weights are right, but you returned {len(actual)} losses: return one "
                f"per optimizer step {setting}.",
                "logged_loss_wrong",
            )
        gap = relative_gap(actual, wanted)
        if gap <= 1e-9:
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
        if k is not None and abs(k * spec["accum_steps"] - 1) < 1e-6 and spec["accum_steps"] > 1:
            raise Failure(
                f"The weights are right, but the logged loss is {spec['accum_steps']} times too "
                "small: you logged the loss after scaling it for backward. Log the window's "
                "mean loss.",
                "logged_scaled_loss",
            )
        if gap < TOLERANCE["float32"]:
            raise Failure(
                f"The weights are right, but the logged losses match the window means only to "
                f"{gap:.1e} (relative), about float32's precision: they were summed or kept in "
                "float32 (torch.zeros() and torch.tensor(0.0) are float32). Add loss.item() "
                "values, or keep the model's dtype.",
                "logged_loss_wrong",
            )
        scale = max(abs(v) for v in wanted)
        wrong = next(
            (
                i
                for i, (a, e) in enumerate(zip(actual, wanted, strict=True))
                if abs(a - e) > 1e-9 * scale
            ),
            0,
        )
        raise Failure(
            "The weights are right, but the returned losses are not each window's mean loss "
            f"(expected {[round(v, 4) for v in wanted]}, got {[round(v, 4) for v in actual]}; "
            f"the first that differs is window {wrong + 1}).",
            "logged_loss_wrong",
        )


# ---------------------------------------------------------------- plan_micro_batch


def _memory_model(spec):
    model = tiny_mlp(in_features=spec["in_features"], hidden=spec["hidden"], depth=3, seed=21)
    return model, (lambda size: torch.zeros(size, spec["in_features"]))


_MEASURED_SIZES = 200  # the sizes a search ran forward, as the run reports them


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
    return {**spec, "budget_bytes": int(budget_of(_Bytes(spec)))}


class _Bytes(dict):
    """``{micro_batch_size: activation bytes}`` for a spec's model, measured on first use
    (a spec's budget needs one or two sizes, a judge two or three, a right answer none)."""

    def __init__(self, spec):
        super().__init__()
        self.spec = spec
        self.model = None

    def __missing__(self, size: int) -> int:
        if self.model is None:
            self.model, self.make_inputs = _memory_model(self.spec)
        self[size] = activation_bytes(self.model, self.make_inputs(size))
        return self[size]


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

        fixed = "a budget chosen for grading"
        return [
            drawn(lambda m: m[pick]),  # exactly the bytes of one size: <= matters
            drawn(lambda m: m[pick] + 1),
            drawn(lambda m: m[1] - 1),  # nothing fits
            drawn(lambda m: m[effective] + 1),  # everything fits
            # Fixed: the answer is neither a power of two nor on the halving path from the
            # effective batch (36, 18, 9, ...; 60, 30, 15, ...), so a search that tries only
            # some sizes fails whatever the draw; the two models differ, so sizes measured in
            # an earlier call are stale here.
            _plan_spec(36, 8, 16, lambda m: m[12], fixed),
            _plan_spec(60, 24, 48, lambda m: m[20] + 1, fixed),
            _plan_spec(18, 12, 24, lambda m: m[1], fixed),  # only 1 fits, exactly
        ]

    def run(self, fn, spec):
        model, make_inputs = _memory_model(spec)
        watch = Watch(model)  # the batch sizes run forward: the sizes the search measured
        outputs = self._answer(fn, model, make_inputs, spec)
        return {**outputs, "measured": sorted(set(watch.forward_sizes))[:_MEASURED_SIZES]}

    @staticmethod
    def _answer(fn, model, make_inputs, spec):
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
        bytes_of = _Bytes(spec)
        raised = outputs.get("raised")
        measured = outputs.get("measured")
        # The sizes run forward in this call (an empty list: nothing was measured here).
        known = isinstance(measured, list) and all(type(v) is int for v in measured)
        if "raised" in expected:
            if raised == "ValueError":
                return
            if raised:
                raise Failure(
                    f"Nothing fits {where}, and you raised {raised}: raise ValueError, the "
                    "exception Python uses for an argument with no valid answer.",
                    "wrong_exception",
                )
            needs = bytes_of[1]
            answer = outputs.get("answer")
            if known and isinstance(answer, list) and answer and answer[0] not in measured:
                raise Failure(
                    f"You returned {tuple(answer)}, but your function never measured a "
                    f"micro-batch of {answer[0]} in this call (no forward pass of that size ran), "
                    f"and nothing fits: even 1 sample needs {needs} bytes {where}. Measure each "
                    "size with this call's model and make_inputs: numbers kept from an earlier "
                    "call belong to another model.",
                    "not_measured",
                )
            raise Failure(
                f"With a budget of {budget} bytes even a micro-batch of 1 needs {needs} bytes, "
                f"so nothing fits; you returned {answer!r}. Raise ValueError "
                "with a message that says so.",
                "nothing_fits_not_raised",
            )
        if not raised and outputs.get("answer") == expected["answer"]:
            return
        best = expected["answer"][0]
        best_needs = bytes_of[best]

        def skipped(size):  # no forward pass of that size ran: the search never measured it
            return known and size not in measured

        if raised == "ValueError":
            if skipped(best):
                raise Failure(
                    f"You raised ValueError, but a micro-batch of {best} fits: it needs "
                    f"{best_needs} bytes {where}. Your search never measured it (no forward "
                    f"pass of that size ran in this call): try every size that divides "
                    f"{effective}{', 1 included' if best == 1 else ''}.",
                    "skipped_sizes",
                )
            raise Failure(
                f"You raised ValueError, but a micro-batch of {best} fits: it needs "
                f"{best_needs} bytes {where}.{self._equal_hint(best_needs, budget, known)}",
                "not_largest",
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
        # (a search that never measured the right size did not find it and swap it)
        if (accum, micro) == tuple(expected["answer"]) and micro != accum:
            # Read as written, the same pair can be another mistake: a size over the budget,
            # or the size just below one that needs exactly the budget (`<`). Name the order
            # only when that reading is impossible and the search did measure the answer.
            literal_needs = bytes_of[micro]
            below = [d for d in _divisors(effective) if d < best]
            other_reading = literal_needs > budget or (
                best_needs == budget and below and micro == below[-1]
            )
            if not other_reading and not skipped(best):
                raise Failure(
                    f"You returned ({micro}, {accum}): the right numbers in the wrong order. "
                    f"Return (micro_batch_size, accum_steps) {where}.",
                    "swapped",
                )
            if other_reading:
                raise Failure(
                    f"You returned ({micro}, {accum}) {where}. The answer is ({accum}, {micro}): "
                    f"either your numbers are in the wrong order, or your search chose a "
                    f"micro-batch of {micro}, which needs {literal_needs} bytes where the largest "
                    f"size that fits is {best} ({best_needs} bytes, <= the budget)."
                )
        if micro * accum != effective:
            raise Failure(
                f"micro_batch_size x accum_steps = {micro} x {accum} = {micro * accum}, but the "
                f"effective batch must be {effective} {where}.",
                "effective_batch_wrong",
            )
        if micro < 1 or effective % micro:
            raise Failure(f"{micro} does not divide {effective} {where}.")
        needs = bytes_of[micro]
        if needs > budget and skipped(micro):
            raise Failure(
                f"You returned a micro-batch of {micro}, but your function never measured it "
                f"in this call (no forward pass of that size ran), and it needs {needs} "
                f"bytes, over the budget {where}. Measure each size with this call's model and "
                "make_inputs: numbers kept from an earlier call belong to another model.",
                "not_measured",
            )
        if needs > budget:
            raise Failure(
                f"A micro-batch of {micro} needs {needs} bytes of activations, over the budget "
                f"{where}. Only sizes whose measured bytes are <= the budget fit.",
                "does_not_fit",
            )
        if micro < best and skipped(best):
            raise Failure(
                f"A larger micro-batch also fits: {best} needs {best_needs} bytes {where}, but "
                f"your search never measured it (no forward pass of that size ran; it "
                f"measured {', '.join(map(str, measured)) or 'nothing'} in this call). Measure "
                f"every size that divides {effective}, from the largest down (halving or powers "
                "of two skip some), with this call's model.",
                "skipped_sizes",
            )
        if micro < best:
            raise Failure(
                f"A larger micro-batch also fits: {best} needs {best_needs} bytes {where}. The "
                "largest that fits means the fewest accumulation steps."
                + self._equal_hint(best_needs, budget, known),
                "not_largest",
            )

    @staticmethod
    def _equal_hint(best_needs, budget, measured_it):
        """Only said when the search measured the best size and rejected it although it needs
        exactly the budget: then `<` is the bug (a search that never tried it gets no hint)."""
        if best_needs != budget or not measured_it:
            return ""
        return " A size whose bytes equal the budget exactly still fits: use <=, not <."
