"""``train_accumulated``: the training loop, one optimizer step per window of micro-batches.

The hand-in trains a tiny float64 MLP (SGD, with or without momentum, or Adam) over
micro-batches whose last window, and last micro-batch, may be shorter; the hidden specs
also call it twice on the same model, as two epochs. Its final weights are compared with
the reference loop's; on a mismatch the weights after each optimizer step say which step
went wrong first, and every known loop mistake (loop_variants) is replayed from the same
start and named when it reaches the same weights. Right weights must also come from one
backward pass per micro-batch, and the returned losses must be each window's mean loss as
plain floats.

Longer than most question files: the spec, the replay of known mistakes and the judging
of the logged losses read best together, as one question.
"""

from __future__ import annotations

import torch
from torch import nn

from coursekit.checks.instruments import (
    SINGLE_BACKWARD,
    GradientPasses,
    StepCounter,
    as_floats,
    keeps_graph,
    weights_of,
)
from coursekit.checks.loop_variants import MISTAKES, run_loop
from coursekit.checks.module01.common import MODULE, TOLERANCE
from coursekit.checks.question import Failure, Question, Rule, number_list, relative_gap, scale_of
from coursekit.checks.registry import register
from coursekit.checks.side_effects import Kept, judge_left_behind
from coursekit.checks.tamper_evident import combined, judge_instruments, watched
from coursekit.data import make_regression, split_micro_batches
from coursekit.models import tiny_mlp
from coursekit.training import train_accumulated


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
    # coursekit code that answers it under other names (flagged when called for it)
    library_answers = (
        "coursekit.checks.loop_variants.run_loop",
        "coursekit.batch_scaling.train_with_plan",
    )
    rules = (
        Rule(
            "calls `optimizer.step()` and then `optimizer.zero_grad()` **once per window** of "
            "`accum_steps` micro-batches",
            "every spec: the optimizer's steps and zero_grad calls are counted",
            (
                "step_every_micro_batch",
                "zero_grad_inside_loop",
                "zero_grad_missing",
                "zero_grad_before_step",
                "off_by_one_boundary",
                "optimizer_not_stepped",
                "flush_without_zero_grad",
            ),
        ),
        Rule(
            "and once more for a **last, shorter window** (never drop it)",
            "the specs whose micro-batches do not fill the last window",
            ("last_window_dropped",),
            lambda spec: -(-spec["n_samples"] // spec["micro_batch_size"]) % spec["accum_steps"],
        ),
        Rule(
            "scale each micro-batch's (mean) loss by its **share of the window's samples**, "
            "`len(targets) / window_samples`.",
            "every spec; a shorter last micro-batch or window where the sizes do not divide",
            (
                "loss_not_divided",
                "mean_of_means",
                "last_window_scaled_by_n",
                "partial_micro_batch_as_full",
                "single_backward",
            ),
        ),
        Rule(
            "returns the **mean loss of each window**, one float per optimizer step: the "
            "number to log, not the scaled one;",
            "every spec: the returned losses against the reference loop's",
            ("logged_scaled_loss", "losses_kept_between_calls", "losses_in_float32"),
        ),
        Rule(
            "leaves `micro_batches` as it was given",
            "every spec: the list and its tensors are compared after the call",
            ("micro_batches_modified",),
        ),
    )

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
        passes = GradientPasses(model)
        step_weights: list[list[float]] = []

        def record(*_args) -> None:
            if len(step_weights) < _RECORDED_STEPS:
                step_weights.append(weights_of(model))

        optimizer.register_step_post_hook(record)
        given = [(x, y, x.clone(), y.clone()) for x, y in micro_batches]
        modified, grads_left, logged, left = False, False, None, []
        for epoch in range(spec.get("epochs", 1)):
            kept = Kept((model,))  # per call: a switch left on is put back before the next
            args = (model, optimizer, nn.MSELoss(), micro_batches, spec["accum_steps"])
            logged = watched((counter, passes), fn, *args)
            left += [code for code in kept.report()["left_changed"] if code not in left]
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
            "left_changed": left,
            "instruments": combined(counter.verdict(), passes.verdict()),
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
        judge_left_behind(outputs, setting)
        judge_instruments(outputs, setting)
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
