"""Checks for module 2 (02_loss_scaling), part 2: what happens once per window.

``amp_window`` hands the student a GradScaler that counts its calls, so "unscale_ every
micro-batch" is seen, not guessed. ``train_scheduled`` records the learning rate of every
optimizer step and counts the scheduler's steps, so a scheduler stepped per micro-batch,
or before the optimizer, is named.
"""

from __future__ import annotations

import torch
from torch import nn

from coursekit.checks.instruments import (
    SINGLE_BACKWARD,
    SchedulerSteps,
    StepCounter,
    Watch,
    weights_of,
)
from coursekit.checks.loop_variants import MISTAKES, run_loop
from coursekit.checks.question import Failure, Question, number_list, relative_gap
from coursekit.checks.registry import register
from coursekit.data import make_regression, split_micro_batches
from coursekit.mixed_precision import amp_window
from coursekit.models import tiny_mlp
from coursekit.schedules import optimizer_steps, warmup_linear_decay
from coursekit.training import train_accumulated

MODULE = "02_loss_scaling"
TOLERANCE = 1e-10  # float64, and the scales are powers of two: exact but for rounding
# clip_grad_norm_ divides by (norm + 1e-6): clipping the scaled gradients at max_norm * scale,
# which is right, moves the weights by ~3e-9 relative. Nothing wrong comes closer than 1e-3.
AMP_TOLERANCE = 1e-7

# ---------------------------------------------------------------- amp_window


class CountingScaler(torch.amp.GradScaler):
    """A GradScaler that counts the calls a student's code makes to it."""

    def __init__(self, init_scale: float):
        super().__init__("cpu", init_scale=init_scale, growth_interval=1)
        self.calls = {"scale": 0, "unscale_": 0, "step": 0, "update": 0}
        self._in_step = False

    def scale(self, outputs):
        self.calls["scale"] += 1
        return super().scale(outputs)

    def unscale_(self, optimizer):
        if not self._in_step:  # step() unscales by itself when you have not
            self.calls["unscale_"] += 1
        return super().unscale_(optimizer)

    def step(self, optimizer, *args, **kwargs):
        self.calls["step"] += 1
        self._in_step = True
        try:
            return super().step(optimizer, *args, **kwargs)
        finally:
            self._in_step = False

    def update(self, new_scale=None):
        self.calls["update"] += 1
        return super().update(new_scale)


def _amp_problem(spec):
    model = tiny_mlp(in_features=5, hidden=7, depth=2, seed=spec["seed"], dtype=torch.float64)
    micro, n = spec["micro_batch_size"], spec["accum_steps"]
    inputs, targets = make_regression(
        micro * n, in_features=5, seed=spec["seed"] + 1, dtype=torch.float64
    )
    if spec["inf_at"] is not None:  # this micro-batch's loss overflows
        targets[spec["inf_at"] * micro, 0] = float("inf")
    if spec["optimizer"] == "adam":
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = CountingScaler(init_scale=2.0 ** spec["init_scale_log2"])
    return model, optimizer, scaler, split_micro_batches(inputs, targets, micro)


def _amp_variant(spec, mistake):
    """The right window, or one with a mistake the checks name by its final weights."""
    model, optimizer, scaler, micro_batches = _amp_problem(spec)
    for inputs, targets in micro_batches:
        loss = nn.functional.mse_loss(model(inputs), targets)
        if mistake != "loss_not_divided":
            loss = loss / len(micro_batches)
        scaler.scale(loss).backward()
    if mistake != "clipped_before_unscale":
        scaler.unscale_(optimizer)
    if mistake != "clipping_missing":
        nn.utils.clip_grad_norm_(model.parameters(), spec["max_norm"])
    scaler.step(optimizer)
    scaler.update()
    return weights_of(model)


# What GradScaler says when it is misused, by the name the judge knows it under.
SCALER_REFUSALS = {
    "unscale_twice": "unscale_() has already been called",
    "update_before_unscale": "No inf checks were recorded prior to update",
    "step_without_grads": "No inf checks were recorded for this optimizer",
    "never_scaled": "_scale is None",
}

AMP_MISTAKES = {
    "unscale_every_micro_batch": (
        "scaler.unscale_(optimizer) ran more than once in the window. It divides the "
        "gradients accumulated so far by the scale, so calling it per micro-batch divides the "
        "early micro-batches again (PyTorch refuses a second call before update(): "
        "'unscale_() has already been called'). Call it once, after the last backward."
    ),
    "update_every_micro_batch": (
        "scaler.update() ran more than once in the window. update() picks the next scale; "
        "changing the scale in the middle of a window adds gradients scaled by different "
        "factors. Call it once per window, after scaler.step()."
    ),
    "step_every_micro_batch": (
        "The optimizer stepped more than once in the window: scaler.step(optimizer) belongs "
        "at the window's end, once."
    ),
    "loss_not_scaled": (
        "Some backward() ran on the loss itself, not on scaler.scale(loss): those gradients "
        "are not multiplied by the scale, then unscale_ divides them by it. Scale every "
        "micro-batch's loss."
    ),
    "optimizer_step_not_scaler": (
        "You called optimizer.step() instead of scaler.step(optimizer): the step then runs "
        "even when a gradient is inf or NaN. scaler.step skips it."
    ),
    "update_missing": (
        "scaler.update() was never called: after a skipped step the scale must shrink, or "
        "every later window overflows too. Call it once per window, after scaler.step()."
    ),
    "zero_grad_missing": (
        "Gradients are left in .grad after the window. Call optimizer.zero_grad() at the "
        "window's end, after scaler.step and scaler.update (it runs even when the step is "
        "skipped): the loop this function belongs to expects .grad clear between windows."
    ),
    "update_before_step": (
        "scaler.update() ran before the window's unscale_ and step: update() chooses the next "
        "scale from what unscale_ found, so it comes last: unscale_, clip, step, update."
    ),
    "zero_grad_before_step": (
        "The gradients were cleared before scaler.unscale_ and scaler.step ran, so there was "
        "nothing to step on (GradScaler: 'No inf checks were recorded for this optimizer'). "
        "Step first, then zero_grad()."
    ),
    "whole_batch_forward": (
        "A forward pass ran on more samples than one micro-batch holds: run the model on one "
        "micro-batch at a time, which is what keeps the memory small."
    ),
    "single_backward": "The window called backward() fewer times than it has micro-batches: "
    + SINGLE_BACKWARD,
    "inf_micro_batch_dropped": (
        "One micro-batch's loss was inf, and your window still stepped. With a GradScaler an "
        "inf in any micro-batch must skip the whole step (scaler.step does that when every "
        "loss went through scaler.scale and backward): skipping only the bad micro-batch "
        "steps on a gradient that is neither this window's nor any other's."
    ),
    "clipped_before_unscale": (
        "You clipped the scaled gradients: their norm is the true norm times the scale, so "
        "the clipping threshold meant nothing. Call scaler.unscale_(optimizer) first, then "
        "clip, then scaler.step(optimizer)."
    ),
    "clipping_missing": (
        "The gradients were not clipped to max_norm: call "
        "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm) after unscale_ and "
        "before scaler.step."
    ),
    "loss_not_divided": (
        "Each micro-batch's loss was scaled by the GradScaler but not divided by the number "
        "of micro-batches: the window's gradient is N times the mean."
    ),
}


@register
class AmpWindow(Question):
    name = "amp_window"
    module = MODULE
    points = 4

    def public_specs(self):
        def spec(seed, accum, micro, optimizer, log2, max_norm, inf_at=None):
            return {
                "seed": seed,
                "accum_steps": accum,
                "micro_batch_size": micro,
                "optimizer": optimizer,
                "init_scale_log2": log2,
                "max_norm": max_norm,
                "inf_at": inf_at,
            }

        return [
            spec(1, 4, 4, "sgd", 10, 1000.0),  # clipping never bites
            spec(2, 4, 3, "sgd", 12, 0.05),  # clipping bites
            spec(3, 3, 4, "adam", 8, 0.05, inf_at=1),  # one micro-batch overflows
            spec(4, 1, 6, "sgd", 10, 0.05),  # a window of one
        ]

    def hidden_specs(self, rng):
        specs = []
        for index in range(3):
            accum = rng.randint(2, 6)
            specs.append(
                {
                    "seed": rng.randrange(10**6),
                    "accum_steps": accum,
                    "micro_batch_size": rng.randint(2, 6),
                    "optimizer": rng.choice(["sgd", "adam"]),
                    "init_scale_log2": rng.randint(6, 16),
                    "max_norm": 0.05 if index < 2 else 1000.0,
                    "inf_at": rng.randrange(accum) if index == 1 else None,
                }
            )
        return specs

    def run(self, fn, spec):
        model, optimizer, scaler, micro_batches = _amp_problem(spec)
        counter = StepCounter(model, optimizer)
        watch = Watch(model)
        raised = None
        try:
            fn(model, optimizer, scaler, nn.MSELoss(), micro_batches, spec["max_norm"])
        except (RuntimeError, AssertionError) as exc:  # GradScaler refusing a misuse
            raised = next((k for k, text in SCALER_REFUSALS.items() if text in str(exc)), None)
            if raised is None:
                raise
        grads_left = any(
            p.grad is not None and bool(p.grad.ne(0).any()) for p in model.parameters()
        )
        return {
            "weights": weights_of(model),
            "scale": float(scaler.get_scale()),
            "calls": dict(scaler.calls),
            "optimizer_steps": counter.steps,
            "grads_left": grads_left,
            "raised": raised,
            "largest_forward": max(watch.forward_sizes, default=0),
            "backward_passes": watch.backward_passes,
        }

    def reference(self):
        return amp_window

    def judge(self, spec, outputs, expected):
        n = spec["accum_steps"]
        setting = (
            f"({n} micro-batches of {spec['micro_batch_size']}, max_norm {spec['max_norm']}"
            + (
                f", micro-batch {spec['inf_at']}'s loss is inf)"
                if spec["inf_at"] is not None
                else ")"
            )
        )
        mistake = (
            self._refused(outputs)
            or self._repeated_call(outputs)
            or self._shape_of_window(outputs, spec)
            or self._missing_call(outputs, spec)
        )
        if mistake:
            raise Failure(f"{AMP_MISTAKES[mistake]} {setting}", mistake)
        weights = number_list(outputs, "weights", "the model's weights")
        model, *_ = _amp_problem(spec)
        if spec["inf_at"] is not None and weights != weights_of(model):
            raise Failure(
                f"{AMP_MISTAKES['inf_micro_batch_dropped']} {setting}", "inf_micro_batch_dropped"
            )
        if relative_gap(weights, expected["weights"]) > AMP_TOLERANCE:
            self._diagnose(spec, weights, setting)
        if outputs.get("grads_left") is True:
            raise Failure(f"{AMP_MISTAKES['zero_grad_missing']} {setting}", "zero_grad_missing")
        if outputs.get("scale") != expected["scale"]:
            raise Failure(
                f"The weights are right, but the scaler's scale is {outputs.get('scale')} "
                f"after the window, not {expected['scale']}: call scaler.update() once, after "
                f"scaler.step(optimizer) {setting}."
            )

    @staticmethod
    def _calls(outputs) -> dict[str, int] | None:
        calls = outputs.get("calls")
        keys = ("scale", "unscale_", "step", "update")
        if not isinstance(calls, dict) or not all(type(calls.get(k)) is int for k in keys):
            return None
        return calls

    @staticmethod
    def _refused(outputs) -> str | None:
        """A misuse GradScaler itself refused, by what the calls so far say it was."""
        raised = outputs.get("raised")
        calls = outputs.get("calls") if isinstance(outputs.get("calls"), dict) else {}
        if raised == "unscale_twice":
            return "unscale_every_micro_batch"
        if raised == "update_before_unscale":
            per_micro_batch = calls.get("scale") == 1 and calls.get("update") == 1
            return "update_every_micro_batch" if per_micro_batch else "update_before_step"
        if raised == "step_without_grads":
            return "zero_grad_before_step"
        if raised == "never_scaled":
            return "loss_not_scaled"
        return None

    def _repeated_call(self, outputs) -> str | None:
        """A once-per-window call made per micro-batch."""
        calls = self._calls(outputs)
        if calls is None:
            return None
        if calls["step"] > 1 or (outputs.get("optimizer_steps") or 0) > 1:
            return "step_every_micro_batch"
        if calls["unscale_"] > 1:
            return "unscale_every_micro_batch"
        if calls["update"] > 1:
            return "update_every_micro_batch"
        return None

    @staticmethod
    def _shape_of_window(outputs, spec) -> str | None:
        """A window that is not one forward and one backward per micro-batch."""
        largest, passes = outputs.get("largest_forward"), outputs.get("backward_passes")
        if isinstance(largest, int) and largest > spec["micro_batch_size"]:
            return "whole_batch_forward"
        dropped_inf = spec["inf_at"] is not None and passes == spec["accum_steps"] - 1
        if isinstance(passes, int) and passes < spec["accum_steps"] and not dropped_inf:
            return "single_backward"
        return None

    def _missing_call(self, outputs, spec) -> str | None:
        """A call the window needs and did not make (an inf micro-batch skipped on purpose is
        named from the weights instead)."""
        calls = self._calls(outputs)
        if calls is None:
            return None
        n = spec["accum_steps"]
        dropped_inf = spec["inf_at"] is not None and calls["scale"] == n - 1
        if calls["scale"] < n and not dropped_inf:
            return "loss_not_scaled"
        if calls["step"] == 0 and (outputs.get("optimizer_steps") or 0) > 0:
            return "optimizer_step_not_scaler"
        if calls["update"] == 0:
            return "update_missing"
        return None

    def _diagnose(self, spec, weights, setting):
        right = _amp_variant(spec, None)
        for mistake in ("clipped_before_unscale", "clipping_missing", "loss_not_divided"):
            pattern = _amp_variant(spec, mistake)
            # a variant that differs from the right window only by rounding names nothing
            if relative_gap(pattern, right) > 1e-6 and relative_gap(weights, pattern) <= 1e-9:
                raise Failure(f"{AMP_MISTAKES[mistake]} {setting}", mistake)
        raise Failure(
            f"The weights after your window differ from the reference's {setting}: scale every "
            "loss, then unscale_, clip, step and update once."
        )


# ---------------------------------------------------------------- train_scheduled


def _scheduled_problem(spec):
    model = tiny_mlp(in_features=5, hidden=7, depth=2, seed=spec["seed"], dtype=torch.float64)
    inputs, targets = make_regression(
        spec["n_samples"], in_features=5, seed=spec["seed"] + 1, dtype=torch.float64
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=spec["momentum"])
    micro_batches = split_micro_batches(inputs, targets, spec["micro_batch_size"])
    total = optimizer_steps(len(micro_batches), spec["accum_steps"])
    scheduler = warmup_linear_decay(optimizer, spec["warmup_steps"], total)
    return model, optimizer, scheduler, micro_batches


def _reference_scheduled(model, optimizer, scheduler, loss_fn, micro_batches, accum_steps):
    train_accumulated(model, optimizer, loss_fn, micro_batches, accum_steps, scheduler=scheduler)


SCHEDULE_MISTAKES = {
    "scheduler_every_micro_batch": (
        "scheduler.step() ran after every micro-batch, so the schedule runs accum_steps times "
        "too fast: the warm-up ends early and the learning rate reaches its end long before "
        "training does (HF Accelerate #963). Step the scheduler once per optimizer step, "
        "right after it."
    ),
    "scheduler_before_optimizer": (
        "scheduler.step() ran before optimizer.step(), so every step used the next step's "
        "learning rate and the first one was skipped (PyTorch warns about this order). Call "
        "optimizer.step(), then scheduler.step()."
    ),
    "scheduler_never_stepped": (
        "The scheduler never stepped, so every optimizer step used the first learning rate. "
        "Call scheduler.step() once after each optimizer.step()."
    ),
}


@register
class TrainScheduled(Question):
    name = "train_scheduled"
    module = MODULE
    points = 3

    def public_specs(self):
        def spec(seed, n_samples, micro, accum, warmup, momentum=0.0):
            return {
                "seed": seed,
                "n_samples": n_samples,
                "micro_batch_size": micro,
                "accum_steps": accum,
                "warmup_steps": warmup,
                "momentum": momentum,
            }

        return [
            spec(21, 64, 4, 2, 3),  # 16 micro-batches: 8 steps, 3 of warm-up
            spec(22, 40, 4, 4, 1),  # 10 micro-batches: windows of 4, 4 and 2
            spec(23, 42, 4, 3, 2, momentum=0.9),  # last window: micro-batches of 4 and 2
        ]

    def hidden_specs(self, rng):
        specs = []
        for _ in range(3):
            micro, accum = rng.randint(2, 5), rng.randint(2, 4)
            n_windows = rng.randint(3, 6)
            n_micro = accum * (n_windows - 1) + rng.randint(1, accum)
            specs.append(
                {
                    "seed": rng.randrange(10**6),
                    "n_samples": (n_micro - 1) * micro + rng.randint(1, micro),
                    "micro_batch_size": micro,
                    "accum_steps": accum,
                    "warmup_steps": rng.randint(1, n_windows - 1),
                    "momentum": rng.choice([0.0, 0.9]),
                }
            )
        return specs

    def run(self, fn, spec):
        model, optimizer, scheduler, micro_batches = _scheduled_problem(spec)
        counter = StepCounter(model, optimizer)
        scheduler_steps = SchedulerSteps(scheduler)
        watch = Watch(model)
        fn(model, optimizer, scheduler, nn.MSELoss(), micro_batches, spec["accum_steps"])
        return {
            "weights": weights_of(model),
            "lrs": counter.lrs,
            "optimizer_steps": counter.steps,
            "scheduler_steps": scheduler_steps.count,
            "largest_forward": max(watch.forward_sizes, default=0),
            "backward_passes": watch.backward_passes,
        }

    def reference(self):
        return _reference_scheduled

    def judge(self, spec, outputs, expected):
        n_micro = -(-spec["n_samples"] // spec["micro_batch_size"])
        n_windows = -(-n_micro // spec["accum_steps"])
        setting = (
            f"({n_micro} micro-batches, accum_steps = {spec['accum_steps']}: {n_windows} "
            f"optimizer steps, {spec['warmup_steps']} of them warm-up)"
        )
        largest = outputs.get("largest_forward")
        if isinstance(largest, int) and largest > spec["micro_batch_size"]:
            raise Failure(
                f"A forward pass ran on {largest} samples at once, more than a micro-batch of "
                f"{spec['micro_batch_size']} {setting}: run one micro-batch at a time.",
                "whole_batch_forward",
            )
        weights = number_list(outputs, "weights", "the model's weights")
        if relative_gap(weights, expected["weights"]) <= TOLERANCE:
            passes = outputs.get("backward_passes")
            if isinstance(passes, int) and passes < n_micro:
                raise Failure(
                    f"The weights are right, but you called backward() {passes} times for "
                    f"{n_micro} micro-batches: " + SINGLE_BACKWARD,
                    "single_backward",
                )
            return
        steps = outputs.get("optimizer_steps")
        if steps == n_micro != n_windows:
            raise Failure(
                f"{MISTAKES['step_every_micro_batch']} {setting}", "step_every_micro_batch"
            )
        if steps == n_micro // spec["accum_steps"] != n_windows:
            raise Failure(f"{MISTAKES['last_window_dropped']} {setting}", "last_window_dropped")
        lrs = number_list(outputs, "lrs", "the learning rate of each step")
        wanted = expected["lrs"]
        if outputs.get("optimizer_steps") == n_windows:
            scheduler_steps = outputs.get("scheduler_steps")
            if scheduler_steps == 0:
                mistake = "scheduler_never_stepped"
            elif scheduler_steps == n_micro and n_micro != n_windows:
                mistake = "scheduler_every_micro_batch"
            elif relative_gap(lrs[:-1], wanted[1:]) <= 1e-12 and lrs[:-1] != wanted[:-1]:
                mistake = "scheduler_before_optimizer"
            else:
                mistake = None
            if mistake:
                raise Failure(f"{SCHEDULE_MISTAKES[mistake]} {setting}", mistake)
        for mistake in MISTAKES:
            model, optimizer, scheduler, micro_batches = _scheduled_problem(spec)
            run_loop(
                model,
                optimizer,
                nn.MSELoss(),
                micro_batches,
                spec["accum_steps"],
                mistake,
                scheduler,
            )
            if relative_gap(weights, weights_of(model)) <= 1e-9:
                raise Failure(f"{MISTAKES[mistake]} {setting}", mistake)
        shown = [round(v, 4) for v in lrs[:8]]
        raise Failure(
            f"The final weights differ from the reference loop's {setting}. Your optimizer "
            f"stepped {outputs.get('optimizer_steps')} times with learning rates {shown}"
            f"{'...' if len(lrs) > 8 else ''}; the scheduler stepped "
            f"{outputs.get('scheduler_steps')} times."
        )
