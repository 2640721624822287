"""``train_scheduled``: the accumulation loop with a learning-rate schedule.

The check records the learning rate of every optimizer step, counts the scheduler's steps
and reads the schedule's state after the run, so a scheduler stepped per micro-batch,
before the optimizer, or not after a flush of the last window (whose weights are right) is
named. Wrong weights are matched against every known loop mistake (loop_variants) that could
end there, replayed from the same start. One hidden spec is fixed: its last window is short
whatever the draw.
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
from coursekit.checks.module02.common import MODULE
from coursekit.checks.question import Failure, Question, Rule, number_list, relative_gap
from coursekit.checks.registry import register
from coursekit.checks.side_effects import Kept, judge_left_behind
from coursekit.checks.tamper_evident import combined, judge_instruments, watched
from coursekit.checks.window_memory import (
    is_memory_spec,
    judge_memory,
    memory_spec,
    run_measured,
)
from coursekit.data import make_regression, split_micro_batches
from coursekit.models import tiny_mlp
from coursekit.schedules import optimizer_steps, warmup_linear_decay
from coursekit.training import train_accumulated, windows

TOLERANCE = 1e-10  # float64, and the scales are powers of two: exact but for rounding


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


def _warm_up(model, loss_fn, micro_batches):
    """The memory test's warm-up: one right window, as :func:`_one_window` calls one, with an
    optimizer and a schedule of its own. Written here (coursekit's own answer is watched by
    the grader's tripwire), and watched itself: the question names it in
    ``library_answers``."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = warmup_linear_decay(optimizer, 1, 2)
    for inputs, targets in micro_batches:
        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)


def _one_window(fn):
    """``fn`` called on the memory test's model and micro-batches as one window, with an
    optimizer and a schedule of its own (:mod:`coursekit.checks.window_memory`)."""

    def one_window(model, loss_fn, micro_batches):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        scheduler = warmup_linear_decay(optimizer, 1, 2)
        fn(model, optimizer, scheduler, loss_fn, micro_batches, len(micro_batches))

    return one_window


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
    # coursekit code that answers it under other names (flagged when called for it)
    library_answers = (
        "coursekit.training.train_accumulated",
        "coursekit.checks.loop_variants.run_loop",
        "coursekit.checks.module02.train_scheduled._warm_up",
        "coursekit.batch_scaling.train_with_plan",
    )
    rules = (
        Rule(
            "one step per window of `accum_steps` micro-batches",
            "every spec: the optimizer's steps are counted",
            ("step_every_micro_batch", "off_by_one_boundary"),
        ),
        Rule(
            "the last shorter window included",
            "the specs whose micro-batches do not fill the last window",
            ("last_window_dropped",),
            lambda spec: (
                "n_samples" in spec
                and -(-spec["n_samples"] // spec["micro_batch_size"]) % spec["accum_steps"]
            ),
        ),
        Rule(
            "each loss weighted by its share of the window's samples",
            "every spec; a shorter last micro-batch or window in most",
            (
                "mean_of_means",
                "last_window_scaled_by_n",
                "window_from_first_micro_batch",
                "shares_in_float32",
                "single_backward",
                "whole_batch_forward",
            ),
        ),
        Rule(
            "plus the scheduler, stepped at the right moment.",
            "every spec: the learning rate of every optimizer step is recorded",
            (
                "scheduler_every_micro_batch",
                "scheduler_before_optimizer",
                "scheduler_never_stepped",
                "flush_omits_scheduler",
                "scheduler_after_the_loop",
            ),
        ),
    )

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
        # the memory test: one window on a wide model, its fresh memory counted by the kernel
        return [*specs, memory_spec(rng.randrange(10**6), reads="weights")]

    def memory_call(self, fn) -> tuple:
        """How the memory test calls ``fn``, and the right answer its warm-up runs
        (:func:`coursekit.checks.window_memory.run_measured`)."""
        return _one_window(fn), _warm_up

    def run(self, fn, spec):
        if is_memory_spec(spec):
            return run_measured(spec, *self.memory_call(fn))
        model, optimizer, scheduler, micro_batches = _scheduled_problem(spec)
        counter = StepCounter(model, optimizer)
        scheduler_steps = SchedulerSteps(scheduler)
        watch = Watch(model)
        kept = Kept((model,), micro_batches=micro_batches)
        args = (model, optimizer, scheduler, nn.MSELoss(), micro_batches, spec["accum_steps"])
        watched((counter, scheduler_steps, watch), fn, *args)
        return {
            **kept.report(),
            "weights": weights_of(model),
            "lrs": counter.lrs,
            "lr_after": float(optimizer.param_groups[0]["lr"]),  # the schedule's state
            "optimizer_steps": counter.steps,
            "zero_grads": counter.zero_grads,
            "scheduler_steps": scheduler_steps.count,
            "largest_forward": max(watch.forward_sizes, default=0),
            "backward_passes": watch.backward_passes,
            "instruments": combined(
                counter.verdict(),
                scheduler_steps.verdict(),
                watch.verdict(samples=spec["n_samples"]),
            ),
        }

    def reference(self):
        return _reference_scheduled

    def judge(self, spec, outputs, expected):
        if is_memory_spec(spec):
            return judge_memory(spec, outputs, expected)
        n_micro = -(-spec["n_samples"] // spec["micro_batch_size"])
        n_windows = -(-n_micro // spec["accum_steps"])
        setting = (
            f"({n_micro} micro-batches, accum_steps = {spec['accum_steps']}: {n_windows} "
            f"optimizer steps, {spec['warmup_steps']} of them warm-up)"
        )
        judge_left_behind(outputs, setting)
        judge_instruments(outputs, setting, bypass=False)
        largest = outputs.get("largest_forward")
        if isinstance(largest, int) and largest > spec["micro_batch_size"]:
            raise Failure(
                f"A forward pass ran on {largest} samples at once, more than a micro-batch of "
                f"{spec['micro_batch_size']} {setting}: run one micro-batch at a time.",
                "whole_batch_forward",
            )
        weights = number_list(outputs, "weights", "the model's weights")
        if relative_gap(weights, expected["weights"]) <= TOLERANCE:
            judge_instruments(outputs, setting)
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
