"""Checks for module 2 (02_loss_scaling), part 2: what happens once per window.

``amp_window`` hands the student a GradScaler that counts its calls (and notes the dtype of
every loss it scales), so "unscale_ every micro-batch" is seen, not guessed.
``train_scheduled`` records the learning rate of every optimizer step, counts the
scheduler's steps and reads the schedule's state after the run, so a scheduler stepped per
micro-batch, before the optimizer, or not after a flush of the last window (whose weights
are right) is named. One hidden spec is fixed: its last window is short whatever the draw.
"""

from __future__ import annotations

import copy

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
from coursekit.training import train_accumulated, windows

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
        self.dtypes: set[str] = set()  # of the losses scaled: a bfloat16 loss is a slip
        self._in_step = False

    def scale(self, outputs):
        self.calls["scale"] += 1
        if torch.is_tensor(outputs):
            self.dtypes.add(str(outputs.dtype).removeprefix("torch."))
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
    if mistake == "clipped_by_value":
        nn.utils.clip_grad_value_(model.parameters(), spec["max_norm"])
    elif mistake != "clipping_missing":
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
    "clipped_by_value": (
        "You clipped each gradient entry to +-max_norm (clip_grad_value_), not the norm of the "
        "whole gradient: the direction changes, and a large gradient of many small entries "
        "is not clipped at all. Use torch.nn.utils.clip_grad_norm_(model.parameters(), "
        "max_norm)."
    ),
    "inf_step_not_skipped": (
        "One micro-batch's loss was inf, and your window still stepped: the window's gradient "
        "is unknown, so its whole step must be skipped. Let every loss, inf or not, go "
        "through scaler.scale(loss).backward() and step with scaler.step(optimizer): it "
        "skips the step when unscale_ finds an inf (and do not change the data to hide it)."
    ),
    "scaler_not_used": (
        "The GradScaler passed to your function was never used (no scale, unscale_, step or "
        "update on it). Use that one: scaler.scale(loss).backward() per micro-batch, then "
        "scaler.unscale_, scaler.step and scaler.update. A GradScaler made inside the "
        "function starts over every window, so its scale never adapts."
    ),
    "loss_in_low_precision": (
        "The loss you scaled was in {dtype}: its rounding (about 3 significant digits in "
        "bfloat16) goes straight into every gradient. Under autocast, compute the loss in "
        "float32 (call .float() on the logits before the loss function); this check runs in "
        "float64 without autocast, so cast nothing here."
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
            "loss_dtypes": sorted(scaler.dtypes),
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
            self._refused(outputs, spec)
            or self._repeated_call(outputs)
            or self._shape_of_window(outputs, spec)
            or self._missing_call(outputs, spec)
        )
        if mistake:
            raise Failure(f"{AMP_MISTAKES[mistake]} {setting}", mistake)
        weights = number_list(outputs, "weights", "the model's weights")
        # with an inf the right window skips its step: the expected weights are the first ones
        if spec["inf_at"] is not None and weights != expected["weights"]:
            calls = self._calls(outputs) or {}
            dropped = outputs.get("backward_passes") == n - 1 or calls.get("scale") == n - 1
            mistake = "inf_micro_batch_dropped" if dropped else "inf_step_not_skipped"
            raise Failure(f"{AMP_MISTAKES[mistake]} {setting}", mistake)
        if relative_gap(weights, expected["weights"]) > AMP_TOLERANCE:
            low = [d for d in outputs.get("loss_dtypes") or [] if d in ("bfloat16", "float16")]
            if low:
                message = AMP_MISTAKES["loss_in_low_precision"].format(dtype=low[0])
                raise Failure(f"{message} {setting}", "loss_in_low_precision")
            self._diagnose(spec, weights, expected["weights"], setting)
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
    def _refused(outputs, spec) -> str | None:
        """A misuse GradScaler itself refused, by what the calls so far say it was."""
        raised = outputs.get("raised")
        calls = outputs.get("calls") if isinstance(outputs.get("calls"), dict) else {}
        if raised == "unscale_twice":
            return "unscale_every_micro_batch"
        if raised == "update_before_unscale":
            # update() after the first of several micro-batches: per micro-batch. With a
            # window of one, update() per micro-batch *is* update() before the step, and
            # "ran more than once" could not be said: name what is true of both.
            per_micro_batch = (
                calls.get("scale") == 1 and calls.get("update") == 1 and spec["accum_steps"] > 1
            )
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
        if not any(calls.values()):  # and the scaler's scale stays what it was
            return "scaler_not_used"
        dropped_inf = spec["inf_at"] is not None and calls["scale"] == n - 1
        if calls["scale"] < n and not dropped_inf:
            return "loss_not_scaled"
        if calls["step"] == 0 and (outputs.get("optimizer_steps") or 0) > 0:
            return "optimizer_step_not_scaler"
        if calls["update"] == 0:
            return "update_missing"
        return None

    def _diagnose(self, spec, weights, wanted, setting):
        for mistake in (
            "clipped_before_unscale",
            "clipping_missing",
            "loss_not_divided",
            "clipped_by_value",
        ):
            pattern = _amp_variant(spec, mistake)
            # a variant that differs from the right window only by rounding names nothing
            if relative_gap(pattern, wanted) > 1e-6 and relative_gap(weights, pattern) <= 1e-9:
                raise Failure(f"{AMP_MISTAKES[mistake]} {setting}", mistake)
        gap = relative_gap(weights, wanted)
        start, *_ = _amp_problem(spec)
        moved = relative_gap(weights, weights_of(start)) > 0
        raise Failure(
            f"The weights after your window differ from the reference's by {gap:.1e} "
            f"(relative; {'they moved' if moved else 'they did not move at all'}) {setting}: "
            "scale every loss, then unscale_, clip, step and update once."
            + (
                " A gap this small is rounding: was something cast to float32?"
                if gap < 1e-4
                else ""
            )
        )


# ---------------------------------------------------------------- train_scheduled


def _scheduled_problem(spec, start=None):
    """A fresh model, optimizer and schedule for ``spec``, and its micro-batches; ``start``, an
    earlier ``(model, micro_batches)`` of the same spec, is copied instead of rebuilt (the
    judge runs several loops from the same start)."""
    if start is None:
        model = tiny_mlp(in_features=5, hidden=7, depth=2, seed=spec["seed"], dtype=torch.float64)
        inputs, targets = make_regression(
            spec["n_samples"], in_features=5, seed=spec["seed"] + 1, dtype=torch.float64
        )
        micro_batches = split_micro_batches(inputs, targets, spec["micro_batch_size"])
    else:
        model, micro_batches = copy.deepcopy(start[0]), start[1]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=spec["momentum"])
    total = optimizer_steps(len(micro_batches), spec["accum_steps"])
    scheduler = warmup_linear_decay(optimizer, spec["warmup_steps"], total)
    return model, optimizer, scheduler, micro_batches


def _reference_scheduled(model, optimizer, scheduler, loss_fn, micro_batches, accum_steps):
    train_accumulated(model, optimizer, loss_fn, micro_batches, accum_steps, scheduler=scheduler)


def _window_from_first_micro_batch(spec, start=None) -> list[float]:
    """The weights of the right loop but for each window's size, read from its first
    micro-batch (len(window) * len(first targets)): wrong when the last one is shorter."""
    model, optimizer, scheduler, micro_batches = _scheduled_problem(spec, start)
    for window in windows(micro_batches, spec["accum_steps"]):
        guess = len(window) * len(window[0][1])
        for inputs, targets in window:
            (nn.functional.mse_loss(model(inputs), targets) * len(targets) / guess).backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    return weights_of(model)


def _may_match(mistake: str, spec, outputs, n_micro: int) -> bool:
    """Whether the loop with ``mistake`` could end where the student's did: it takes as many
    optimizer steps, calls zero_grad as often as it must, and differs from the right loop on
    this spec. (Only names hang on this: outputs that lie lose their name, nothing else.)"""
    accum, micro = spec["accum_steps"], spec["micro_batch_size"]
    steps, zero_grads = outputs.get("optimizer_steps"), outputs.get("zero_grads")
    if isinstance(steps, int) and steps != _steps_of(mistake, n_micro, accum):
        return False
    if isinstance(zero_grads, int):
        if mistake == "zero_grad_missing" and zero_grads != 0:
            return False
        if mistake == "zero_grad_inside_loop" and zero_grads < n_micro:
            return False
    last_short = spec["n_samples"] < n_micro * micro
    last_window_short = n_micro % accum != 0
    if mistake == "last_window_dropped":
        return last_window_short
    if mistake == "mean_of_means":  # micro-batches differ in size only if the last is short
        return last_short and n_micro > 1 and (n_micro - 1) % accum != 0
    if mistake == "last_window_scaled_by_n":
        return last_window_short
    return True


def _times(count) -> str:
    return "once" if count == 1 else f"{count} times"


def _steps_of(mistake: str, n_micro: int, accum_steps: int) -> int:
    """How many optimizer steps the loop with ``mistake`` (loop_variants) takes."""
    if mistake == "step_every_micro_batch":
        return n_micro
    if mistake == "last_window_dropped":
        return n_micro // accum_steps
    if mistake == "off_by_one_boundary":
        return sum(1 for i in range(n_micro) if i % accum_steps == 0 or i == n_micro - 1)
    return -(-n_micro // accum_steps)


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
    "scheduler_skipped": (
        "The weights are right, but the scheduler ends one step behind: it stepped {stepped} "
        "for {steps} optimizer steps, and leaves the learning rate at {lr:.6g} instead "
        "of {wanted:.6g}. The step that is forgotten is usually the last one ({last}): a "
        "step taken outside the main loop (the flush of a last, shorter window) needs its "
        "scheduler.step() too, or the next epoch, or a resumed run, starts from a stale "
        "schedule."
    ),
    "window_from_first_micro_batch": (
        "Each window's sample count was taken as its number of micro-batches times the first "
        "one's size, but the last micro-batch is shorter ({last} samples, not {micro}): its "
        "window's weights do not add up to 1. Count the window's samples: "
        "sum(len(targets) for _, targets in window)."
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
        # Fixed: 9 micro-batches, accum_steps 4 (windows of 4, 4 and 1), the last micro-batch
        # of one sample. Whatever the draw, a last, shorter window is flushed (a step outside
        # the main loop that forgets the scheduler leaves it one step behind), the sizes do
        # not divide, and a window size read from the first micro-batch is wrong.
        specs = [
            {
                "seed": 31,
                "n_samples": 25,
                "micro_batch_size": 3,
                "accum_steps": 4,
                "warmup_steps": 1,
                "momentum": 0.9,
            }
        ]
        for _ in range(3):
            micro, accum = rng.randint(2, 5), rng.randint(2, 4)
            n_windows = rng.randint(3, 5)
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
            "lr_after": float(optimizer.param_groups[0]["lr"]),  # the schedule's state
            "optimizer_steps": counter.steps,
            "zero_grads": counter.zero_grads,
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
            self._judge_schedule_state(spec, outputs, expected, n_micro, n_windows, setting)
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
        accum = spec["accum_steps"]
        # Every loop below steps the scheduler right after the optimizer: none can match when
        # a learning rate differs from the schedule's (a lie in the outputs costs only a name).
        shared = min(len(lrs), len(wanted))
        lrs_right = relative_gap(lrs[:shared], wanted[:shared]) <= 1e-12
        candidates = [m for m in MISTAKES if lrs_right and _may_match(m, spec, outputs, n_micro)]
        start = None
        for mistake in candidates:
            model, optimizer, scheduler, micro_batches = _scheduled_problem(spec, start)
            start = start or (copy.deepcopy(model), micro_batches)
            if mistake != "zero_grad_before_step":  # which never moves the weights
                run_loop(model, optimizer, nn.MSELoss(), micro_batches, accum, mistake, scheduler)
            pattern = weights_of(model)
            # a loop that ends where the right one does (on this spec) names nothing: a
            # float32 slip can come within 1e-9 of both
            if (
                relative_gap(pattern, expected["weights"]) > 1e-7
                and relative_gap(weights, pattern) <= 1e-9
            ):
                extra = (
                    " If you count with a counter of your own, it must start from 0 in every "
                    "call: one kept from an earlier call (a global, a default argument) "
                    "shifts the boundaries the same way."
                    if mistake == "off_by_one_boundary"
                    else ""
                )
                raise Failure(f"{MISTAKES[mistake]}{extra} {setting}", mistake)
        micro = spec["micro_batch_size"]
        last = spec["n_samples"] - (n_micro - 1) * micro
        if steps == n_windows and last < micro and candidates:
            pattern = _window_from_first_micro_batch(spec, start)
            if (
                relative_gap(pattern, expected["weights"]) > 1e-7
                and relative_gap(weights, pattern) <= 1e-9
            ):
                message = SCHEDULE_MISTAKES["window_from_first_micro_batch"].format(
                    last=last, micro=micro
                )
                raise Failure(f"{message} {setting}", "window_from_first_micro_batch")
        gap = relative_gap(weights, expected["weights"])
        raise Failure(
            f"The final weights differ from the reference loop's by {gap:.1e} (relative) "
            f"{setting}. {self._what_differs(outputs, lrs, wanted, n_windows)}"
            + (
                " A gap this small is rounding: the check runs in float64, so something was "
                "computed in float32 (a torch.tensor of ints divided, or a .float())."
                if gap < 1e-4
                else ""
            )
        )

    @staticmethod
    def _what_differs(outputs, lrs, wanted, n_windows) -> str:
        """The first step whose learning rate is not the schedule's, or what else differs."""
        steps, stepped = outputs.get("optimizer_steps"), outputs.get("scheduler_steps")
        counts = (
            f"Your optimizer stepped {_times(steps)} (the loop has {n_windows} windows) and the "
            f"scheduler {_times(stepped)}."
        )
        for k, (lr, right) in enumerate(zip(lrs, wanted, strict=False)):
            if abs(lr - right) > 1e-12 * max(abs(right), 1e-300):
                return (
                    f"{counts} Optimizer step {k + 1} used the learning rate {lr:.6g}; the "
                    f"schedule's is {right:.6g}: step the scheduler once, right after each "
                    "optimizer.step()."
                )
        if len(lrs) != len(wanted):
            return counts
        return (
            f"{counts} Every step used the schedule's learning rate, so the gradients differ: "
            "check each loss's weight (len(targets) / window_samples, the window's real "
            "samples) and that the gradients are cleared after each step."
        )

    @staticmethod
    def _judge_schedule_state(spec, outputs, expected, n_micro, n_windows, setting):
        """Right weights: the scheduler must also be where the schedule is after the run."""
        stepped, lr_after = outputs.get("scheduler_steps"), outputs.get("lr_after")
        wanted = expected["lr_after"]
        if stepped == expected["scheduler_steps"] and (
            isinstance(lr_after, float) and abs(lr_after - wanted) <= 1e-12 * max(wanted, 1e-300)
        ):
            return
        shown = lr_after if isinstance(lr_after, float) else float("nan")
        if stepped == expected["scheduler_steps"] - 1 and outputs.get("lrs") == expected["lrs"]:
            size = n_micro - (n_windows - 1) * spec["accum_steps"]
            last = (
                f"the last, shorter window's: {size} micro-batch{'es' if size > 1 else ''}"
                if size < spec["accum_steps"]
                else "the last window's"
            )
            message = SCHEDULE_MISTAKES["scheduler_skipped"].format(
                last=last, stepped=_times(stepped), steps=n_windows, lr=shown, wanted=wanted
            )
            raise Failure(f"{message} {setting}", "scheduler_skipped")
        raise Failure(
            f"The weights are right, but the scheduler stepped {_times(stepped)} for "
            f"{n_windows} optimizer steps, and leaves the learning rate at {shown:.6g} instead "
            f"of {wanted:.6g} {setting}: step it exactly once right after each "
            "optimizer.step(), the last window's included, and nowhere else."
        )
