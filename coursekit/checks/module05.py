"""Checks for module 5 (05_capstone): fitting a budget, and the whole recipe in one window.

``plan_accumulation`` is arithmetic: any split that reaches the target exactly with the
fewest micro-batches, none over the maximum, is right. ``recipe_window`` runs two windows
(the second one shorter, as the last window of an epoch is) on a tiny GPT with an SGD
optimizer, whose step shows a gradient's scale, and a schedule; it counts optimizer and
scheduler steps and names the mistake whose weights the student's match.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from coursekit.budget import plan_accumulation
from coursekit.checks.instruments import (
    SINGLE_BACKWARD,
    SchedulerSteps,
    StepCounter,
    Watch,
    as_float,
    weights_of,
)
from coursekit.checks.question import Failure, Question, number_list, relative_gap
from coursekit.checks.registry import register
from coursekit.gpt import tiny_gpt
from coursekit.recipe import recipe_window
from coursekit.schedules import warmup_cosine
from coursekit.tokens import count_tokens, lm_loss, make_token_batches, split_token_batches

MODULE = "05_capstone"

# ---------------------------------------------------------------- plan_accumulation


def _reference_plan(target_batch: int, max_micro_batch: int) -> list[int]:
    return list(plan_accumulation(target_batch, max_micro_batch).sizes)


@register
class PlanAccumulation(Question):
    name = "plan_accumulation"
    module = MODULE
    points = 2

    def public_specs(self):
        return [
            {"target": 100, "max_micro": 25},  # a multiple
            {"target": 100, "max_micro": 32},  # not a multiple: 4 micro-batches, not 3
            {"target": 101, "max_micro": 32},  # a prime target
            {"target": 8, "max_micro": 64},  # the whole batch fits: one micro-batch
            {"target": 7, "max_micro": 1},  # only single samples fit
            {"target": 64, "max_micro": 0},  # nothing fits
        ]

    def hidden_specs(self, rng):
        specs = [{"target": rng.randint(2, 40), "max_micro": 0}]
        for _ in range(4):
            max_micro = rng.randint(2, 48)
            target = rng.randint(max_micro + 1, 12 * max_micro)
            if target % max_micro == 0:
                target += 1
            specs.append({"target": target, "max_micro": max_micro})
        return specs

    def run(self, fn, spec):
        if spec["max_micro"] < 1:
            try:
                returned = fn(spec["target"], spec["max_micro"])
            except Exception as error:  # the refusal is what this spec checks
                return {
                    "raised": type(error).__name__,
                    "value_error": isinstance(error, ValueError),
                }
            return {"sizes": repr(returned)[:200]}
        returned = fn(spec["target"], spec["max_micro"])
        try:
            sizes = [int(v) for v in returned]
            exact = all(int(v) == v for v in returned)
        except (TypeError, ValueError):
            return {"sizes": repr(returned)[:200]}
        return {"sizes": sizes if exact else repr(list(returned))[:200]}

    def reference(self):
        return _reference_plan

    def judge(self, spec, outputs, expected):
        target, max_micro = spec["target"], spec["max_micro"]
        setting = f"(target batch {target}, largest micro-batch that fits {max_micro})"
        if max_micro < 1:
            if "raised" not in outputs:
                raise Failure(
                    f"Nothing fits {setting}, and your function returned {outputs.get('sizes')}. "
                    "No number of accumulation steps helps when not even one sample fits: "
                    "raise a ValueError that says so (and what could help).",
                    "nothing_fits_not_refused",
                )
            if outputs.get("value_error") is not True:
                raise Failure(
                    f"Right to refuse {setting}, but raise a ValueError, not "
                    f"{outputs.get('raised')}: that is what callers catch for a bad value.",
                    "wrong_exception",
                )
            return
        sizes = outputs.get("sizes")
        if not isinstance(sizes, list) or not all(isinstance(s, int) for s in sizes):
            raise Failure(f"Return a list of whole micro-batch sizes {setting}; got {sizes}.")
        fewest = math.ceil(target / max_micro)
        if any(size < 1 for size in sizes):
            raise Failure(f"Every micro-batch needs at least one sample; got {sizes} {setting}.")
        if any(size > max_micro for size in sizes):
            raise Failure(
                f"{max(sizes)} samples do not fit: no micro-batch may exceed {max_micro} "
                f"{setting}.",
                "over_budget",
            )
        total = sum(sizes)
        if total < target:
            raise Failure(
                f"Your micro-batches hold {total} samples, {target - total} short of the target "
                f"{setting}: the remainder was dropped (floor division?). Use "
                f"ceil({target} / {max_micro}) = {fewest} micro-batches and share the samples.",
                "remainder_dropped",
            )
        if total > target:
            raise Failure(
                f"Your micro-batches hold {total} samples, more than the target of {target} "
                f"{setting}: rounding every micro-batch up to {max_micro} changes the effective "
                "batch, and with it the right learning rate. Make the sizes add up exactly.",
                "rounded_up",
            )
        if len(sizes) > fewest:
            raise Failure(
                f"{len(sizes)} micro-batches reach {target}, but {fewest} suffice {setting}: "
                "every extra micro-batch is another forward and backward pass.",
                "too_many_micro_batches",
            )


# ---------------------------------------------------------------- recipe_window

VOCAB = 12
SEQ_LEN = 10
TOLERANCE = 1e-5  # float32 throughout: rounding moves the weights by ~1e-7 relative
MISTAKE_GAP = 1e-4  # a mistake is named only when it moves the weights this much
# bf16 autocast: the same operations in the same order give the same bits; a loss computed in
# bf16 instead of float32, or a sum in another order, moves the weights by ~1e-5 to 1e-4
BF16_TOLERANCE = 1e-3

RECIPE_MISTAKES = {
    "mean_of_means": (
        "Your weights match a window that averaged the micro-batches' mean losses: micro-"
        "batches with fewer real tokens then weigh more per token. Divide each micro-batch's "
        "summed loss by the token count of the whole window."
    ),
    "padding_counted": (
        "Your weights match a loss divided by every label position, padding included: count "
        "only labels that are not -100."
    ),
    "loss_not_divided": (
        "Your weights match a window whose summed token losses were never divided: the "
        "gradient is the window's token count times too large."
    ),
    "clip_every_micro_batch": (
        "Your weights match clipping after every micro-batch's backward. Clipping a partial "
        "sum shrinks the early micro-batches' share; clip once, after the window's last "
        "backward, just before optimizer.step()."
    ),
    "clipping_missing": (
        "Your weights match a step on unclipped gradients: call "
        "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm) after the last "
        "backward and before optimizer.step() (clipping after the step changes nothing: the "
        "step has used the gradient, and zero_grad clears it)."
    ),
    "zero_grad_missing": (
        "Your weights match a second window that still held the first window's gradient: "
        "call optimizer.zero_grad(set_to_none=True) after each step."
    ),
    "scheduler_before_optimizer": (
        "Your learning rates are one step ahead: scheduler.step() ran before "
        "optimizer.step(). Step the optimizer first, then the scheduler."
    ),
}


def _recipe_problem(spec):
    model = tiny_gpt(VOCAB, SEQ_LEN, dim=8, heads=2, layers=1, seed=spec["seed"])
    sizes = [size for window in spec["windows"] for size in window]
    inputs, labels = make_token_batches(sum(sizes), SEQ_LEN, VOCAB, 0.5, seed=spec["seed"] + 1)
    micro_batches = split_token_batches(inputs, labels, sizes)
    windows, start = [], 0
    for window in spec["windows"]:
        windows.append(micro_batches[start : start + len(window)])
        start += len(window)
    optimizer = torch.optim.SGD(model.parameters(), lr=spec["lr"])
    scheduler = warmup_cosine(optimizer, warmup_steps=1, total_steps=len(windows) + 1)
    return model, optimizer, scheduler, windows


def _recipe_variant(spec, mistake: str):
    """The two windows with one mistake (or none): final weights and logged losses."""
    model, optimizer, scheduler, windows = _recipe_problem(spec)
    dtype = getattr(torch, spec["dtype"]) if spec.get("dtype") else None
    parameters = list(model.parameters())
    lrs, losses = [], []
    for window in windows:
        tokens = sum(count_tokens(labels) for _, labels in window)
        positions = sum(labels.numel() for _, labels in window)
        logged = 0.0
        for inputs, labels in window:
            with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
                logits = model(inputs).float()
            if mistake == "mean_of_means":
                loss = lm_loss(logits, labels) / len(window)
            elif mistake == "padding_counted":
                loss = lm_loss(logits, labels, "sum") / positions
            elif mistake == "loss_not_divided":
                loss = lm_loss(logits, labels, "sum")
            else:
                loss = lm_loss(logits, labels, "sum") / tokens
            loss.backward()
            logged += loss.item()
            if mistake == "clip_every_micro_batch":
                nn.utils.clip_grad_norm_(parameters, spec["max_norm"])
        if mistake == "scheduler_before_optimizer":
            scheduler.step()
        if mistake not in ("clipping_missing", "clip_every_micro_batch"):
            nn.utils.clip_grad_norm_(parameters, spec["max_norm"])
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        if mistake != "scheduler_before_optimizer":
            scheduler.step()
        if mistake != "zero_grad_missing":
            optimizer.zero_grad(set_to_none=True)
        losses.append(logged)
    return {"weights": weights_of(model), "lrs": lrs, "losses": losses}


def _reference_recipe(model, optimizer, scheduler, window, max_norm, dtype=None):
    return recipe_window(model, optimizer, scheduler, window, max_norm, dtype)


@register
class RecipeWindow(Question):
    name = "recipe_window"
    module = MODULE
    points = 4

    def public_specs(self):
        return [
            # never clips: a gradient of the wrong scale shows in the weights
            {"seed": 2, "windows": [[2, 4, 1], [4, 2]], "max_norm": 100.0, "lr": 0.5},
            {"seed": 1, "windows": [[3, 3, 2], [2, 1]], "max_norm": 0.2, "lr": 0.5},  # clips
            {"seed": 3, "windows": [[1, 2, 3, 2], [3]], "max_norm": 0.5, "lr": 1.0},
            # bf16 autocast on the CPU, as the recipe runs where bf16 is supported
            {"seed": 4, "windows": [[3, 2], [2]], "max_norm": 0.5, "lr": 0.5, "dtype": "bfloat16"},
        ]

    def hidden_specs(self, rng):
        specs = []
        # one window never clips (a wrong scale shows in the weights), two always do
        for max_norm in (100.0, 0.1, rng.choice([0.05, 0.2])):
            n = rng.randint(2, 4)
            first = [rng.randint(1, 4) for _ in range(n)]
            last = [rng.randint(1, 4) for _ in range(rng.randint(1, n - 1))]  # shorter
            specs.append(
                {
                    "seed": rng.randrange(10**6),
                    "windows": [first, last],
                    "max_norm": max_norm,
                    "lr": rng.choice([0.5, 1.0]),
                }
            )
        specs[-1]["dtype"] = "bfloat16"
        return specs

    def run(self, fn, spec):
        model, optimizer, scheduler, windows = _recipe_problem(spec)
        counter = StepCounter(model, optimizer)
        scheduler_steps = SchedulerSteps(scheduler)
        watch = Watch(model)
        autocast = []  # per forward: the autocast dtype in force on the CPU, or None
        model.register_forward_pre_hook(
            lambda *_: autocast.append(
                str(torch.get_autocast_dtype("cpu")) if torch.is_autocast_enabled("cpu") else None
            )
        )
        dtype = getattr(torch, spec["dtype"]) if spec.get("dtype") else None
        extra = (dtype,) if dtype is not None else ()
        losses = [
            as_float(fn(model, optimizer, scheduler, window, spec["max_norm"], *extra))
            for window in windows
        ]
        return {
            "weights": weights_of(model),
            "losses": losses,
            "lrs": counter.lrs,
            "optimizer_steps": counter.steps,
            "scheduler_steps": scheduler_steps.count,
            "grad_left": any(p.grad is not None and bool(p.grad.any()) for p in model.parameters()),
            "zero_grads": counter.zero_grads,
            "autocast": autocast,
            "largest_forward": max(watch.forward_sizes, default=0),
            "backward_passes": watch.backward_passes,
        }

    def reference(self):
        return _reference_recipe

    def judge(self, spec, outputs, expected):
        windows = spec["windows"]
        n_micro = sum(len(window) for window in windows)
        setting = (
            f"(two windows of micro-batches of {windows[0]} and {windows[1]} sequences, "
            f"max_norm {spec['max_norm']}, dtype {spec.get('dtype') or 'None'})"
        )
        largest = outputs.get("largest_forward")
        if isinstance(largest, int) and largest > max(max(w) for w in windows):
            raise Failure(
                f"A forward pass ran on {largest} sequences at once {setting}: run the model on "
                "one micro-batch at a time, which is what keeps the memory small.",
                "whole_batch_forward",
            )
        self._judge_counts(outputs, len(windows), n_micro, setting)
        self._judge_autocast(spec, outputs, setting)
        weights = number_list(outputs, "weights", "the model's weights")
        tolerance = BF16_TOLERANCE if spec.get("dtype") else TOLERANCE
        if relative_gap(weights, expected["weights"]) > tolerance:
            self._diagnose(spec, weights, expected, setting)
        passes = outputs.get("backward_passes")
        if isinstance(passes, int) and passes < n_micro:
            raise Failure(
                f"The weights are right, but backward() ran {passes} times for {n_micro} "
                f"micro-batches: " + SINGLE_BACKWARD,
                "single_backward",
            )
        if outputs.get("grad_left") is True:
            if outputs.get("zero_grads"):
                raise Failure(
                    "The weights are right, but the window ends with its gradients still in "
                    ".grad: you cleared them before the window instead of after the step. "
                    "Clear them after optimizer.step() with zero_grad(set_to_none=True), so "
                    "their memory is free between windows and the next window starts from zero "
                    "whoever runs it.",
                    "zero_grad_at_window_start",
                )
            raise Failure(
                "The weights are right, but gradients are left in .grad after the window: "
                "call optimizer.zero_grad(set_to_none=True) after the step, so the next window "
                "starts from zero.",
                "zero_grad_missing",
            )
        self._judge_losses(spec, outputs, expected, setting)

    def _judge_counts(self, outputs, n_windows, n_micro, setting):
        steps, scheduler_steps = outputs.get("optimizer_steps"), outputs.get("scheduler_steps")
        if steps == n_micro:
            raise Failure(
                f"optimizer.step() ran after every micro-batch ({steps} times for {n_windows} "
                f"windows) {setting}: step once per window, after its last backward.",
                "step_every_micro_batch",
            )
        if steps != n_windows:
            raise Failure(
                f"optimizer.step() ran {steps} times for {n_windows} windows {setting}: once "
                "per window.",
                "wrong_step_count",
            )
        if scheduler_steps == 0:
            raise Failure(
                f"The scheduler never stepped {setting}: call scheduler.step() once per "
                "window, right after optimizer.step().",
                "scheduler_never_stepped",
            )
        if scheduler_steps != n_windows:
            raise Failure(
                f"scheduler.step() ran {scheduler_steps} times for {n_windows} optimizer steps "
                f"{setting}. The schedule counts optimizer steps: step it once per window, "
                "never per micro-batch (HF Accelerate #963).",
                "scheduler_every_micro_batch",
            )

    def _judge_autocast(self, spec, outputs, setting):
        forwards = outputs.get("autocast")
        if not isinstance(forwards, list):
            return
        if spec.get("dtype"):
            if any(state != "torch.bfloat16" for state in forwards):
                raise Failure(
                    f"With dtype=torch.bfloat16, a forward pass ran without bf16 autocast "
                    f"{setting}: run each micro-batch's forward inside "
                    "torch.autocast(device_type, dtype=dtype, enabled=dtype is not None).",
                    "autocast_missing",
                )
        elif any(state is not None for state in forwards):
            raise Failure(
                f"With dtype=None, a forward pass still ran under autocast {setting}: "
                "torch.autocast('cpu') turns bf16 on by default. Pass enabled=dtype is not None, "
                "so None means float32.",
                "autocast_without_dtype",
            )

    def _diagnose(self, spec, weights, expected, setting):
        for mistake, message in RECIPE_MISTAKES.items():
            variant = _recipe_variant(spec, mistake)
            if (
                relative_gap(variant["weights"], expected["weights"]) > MISTAKE_GAP
                and relative_gap(weights, variant["weights"]) <= TOLERANCE
            ):
                raise Failure(f"{message} {setting}", mistake)
        raise Failure(
            f"Your weights after two windows differ from the recipe's by "
            f"{relative_gap(weights, expected['weights']):.2e} (relative) {setting}. In each "
            "window: forward and backward per micro-batch on the summed token loss divided by "
            "the window's token count, then clip, optimizer.step(), scheduler.step(), "
            "zero_grad()."
        )

    def _judge_losses(self, spec, outputs, expected, setting):
        losses = outputs.get("losses")
        if not isinstance(losses, list) or not all(isinstance(v, float) for v in losses):
            raise Failure(
                f"The weights are right; now return the window's mean loss per real token as "
                f"a float; got {losses} {setting}.",
                "logged_loss_wrong",
            )
        wanted = expected["losses"]
        if relative_gap(losses, wanted) <= TOLERANCE:
            return
        for mistake in ("padding_counted", "loss_not_divided", "mean_of_means"):
            variant = _recipe_variant(spec, mistake)["losses"]
            if (
                relative_gap(variant, wanted) > MISTAKE_GAP
                and relative_gap(losses, variant) <= TOLERANCE
            ):
                raise Failure(
                    f"{RECIPE_MISTAKES[mistake]} {setting} Here clipping hid it from the "
                    "weights: a gradient of the wrong size, clipped to max_norm, points the "
                    "same way as the right one. The logged loss shows it.",
                    mistake,
                )
        shown = ", ".join(f"{v:.5g}" for v in losses)
        right = ", ".join(f"{v:.5g}" for v in wanted)
        raise Failure(
            f"The weights are right, but you returned losses {shown}; the windows' mean losses "
            f"per real token are {right} {setting}. Return the sum of the divided losses you "
            "called backward() on: the number that means the same whatever accum_steps is.",
            "logged_loss_wrong",
        )
