"""Checks for module 5 (05_capstone): fitting a budget, and the whole recipe in one window.

``plan_accumulation`` is arithmetic: any split that reaches the target exactly with the
fewest micro-batches, none over the maximum, is right. ``recipe_window`` runs two windows
(the second one shorter, as the last window of an epoch is) on a tiny GPT with an SGD
optimizer, whose step shows a gradient's scale, and a schedule. Instruments record, per
window, the optimizer's and the scheduler's steps, the learning rate and the gradient's norm
each step used, the weights, and whether the caller's tensors were changed; a wrong
normalisation is named when the student's weights after the first window match it (every
mistake's first step comes from one pass of per-micro-batch gradients), or, where clipping
hides a gradient's scale, when the logged losses do.
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
from coursekit.step_counts import count_steps
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
        specs = [
            # fixed edge cases, whatever the draw (each kills a mistake random specs may miss):
            {"target": 10, "max_micro": -1},  # below zero: nothing fits either
            {"target": 75, "max_micro": 25},  # an odd multiple: exactly 3, not 4
            {"target": 90, "max_micro": 32},  # 3 micro-batches: a doubling search finds 4
            {"target": 97, "max_micro": 40},  # prime: 3 micro-batches of 33, 32, 32
            # the same target twice: a plan remembered by target alone is stale
            {"target": 30, "max_micro": 8},
            {"target": 30, "max_micro": 30},
            {"target": rng.randint(2, 40), "max_micro": 0},
        ]
        for _ in range(3):
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
        if exact:
            return {"sizes": sizes}
        return {"sizes": repr(list(returned))[:200], "fractional": True}

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
            if outputs.get("fractional") is not True:
                raise Failure(f"Return a list of whole micro-batch sizes {setting}; got {sizes}.")
            raise Failure(
                f"Return a list of whole micro-batch sizes {setting}; got {sizes}. A sample "
                "cannot be split: use integer arithmetic (divmod, //), not target / count.",
                "sizes_not_whole",
            )
        fewest = math.ceil(target / max_micro)
        if any(size < 1 for size in sizes):
            if len(sizes) > fewest:
                raise Failure(
                    f"Every micro-batch needs at least one sample; got {sizes} {setting}: "
                    f"{len(sizes)} micro-batches for {target} samples, where "
                    f"ceil({target} / {max_micro}) = {fewest} suffice.",
                    "too_many_micro_batches",
                )
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
# bf16 autocast: the same operations in the same order give the same bits; a sum in another
# order moves the weights by ~1e-5 to 1e-4
BF16_TOLERANCE = 1e-3
CLIP_SLACK = 1e-3  # a clipped gradient's norm is max_norm, to rounding

# Mistakes recognised by re-running the two windows with the mistake: their weights (or, when
# clipping hides a gradient's scale, their logged losses) match the student's.
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
        "gradient is the window's token count times too large. (Dividing loss.data, or a "
        "detached copy, divides the number you log but not the gradient: autograd never sees "
        "it.)"
    ),
    "clip_every_micro_batch": (
        "Your weights match clipping after every micro-batch's backward. Clipping a partial "
        "sum shrinks the early micro-batches' share; clip once, after the window's last "
        "backward, just before optimizer.step()."
    ),
    "loss_in_bf16": (
        "Your losses match a loss computed in bf16: under autocast the logits are bf16, and "
        "a cross-entropy summed in bf16 keeps about 3 significant digits, in the loss you log "
        "and in the gradient. Compute the loss from logits.float()."
    ),
}


def _recipe_problem(spec):
    model = tiny_gpt(
        VOCAB, SEQ_LEN, dim=8, heads=2, layers=spec.get("layers", 1), seed=spec["seed"]
    )
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


def _normalised(mistake, logits, labels, window, tokens, positions):
    """One micro-batch's loss as the recipe divides it, or as a mistake does."""
    if mistake != "loss_in_bf16":
        logits = logits.float()
    if mistake == "mean_of_means":
        return lm_loss(logits, labels) / len(window)
    if mistake == "padding_counted":
        return lm_loss(logits, labels, "sum") / positions
    if mistake == "loss_not_divided":
        return lm_loss(logits, labels, "sum")
    return lm_loss(logits, labels, "sum") / tokens


def _dtype(spec):
    return getattr(torch, spec["dtype"]) if spec.get("dtype") else None


def _after_first_window(spec, mistakes) -> dict:
    """The weights after the first window, as the recipe (None) and each mistake leave them.

    The first window starts from the same weights whatever the code, so one pass gives them
    all: each micro-batch's gradient of its summed loss, weighted as each normalisation
    weighs it (and clipped as each clips), makes each one's first SGD step.
    """
    model, _, _, windows = _recipe_problem(spec)
    parameters = list(model.parameters())
    start = nn.utils.parameters_to_vector(parameters).detach()
    window, max_norm = windows[0], spec["max_norm"]
    tokens = sum(count_tokens(labels) for _, labels in window)
    positions = sum(labels.numel() for _, labels in window)
    grads, counts = [], []
    for inputs, labels in window:
        with torch.autocast("cpu", dtype=_dtype(spec), enabled=_dtype(spec) is not None):
            logits = model(inputs)
        summed = lm_loss(logits.float(), labels, "sum")
        grads.append(torch.cat([g.flatten() for g in torch.autograd.grad(summed, parameters)]))
        counts.append(count_tokens(labels))

    def clip(gradient):
        return gradient * torch.clamp(max_norm / (gradient.norm() + 1e-6), max=1.0)

    weights = {
        None: [1 / tokens] * len(grads),
        "mean_of_means": [1 / (count * len(window)) for count in counts],
        "padding_counted": [1 / positions] * len(grads),
        "loss_not_divided": [1.0] * len(grads),
    }
    lr = _schedule(spec, 1)[0]
    after = {}
    for mistake in mistakes:
        if mistake == "clip_every_micro_batch":
            total = torch.zeros_like(start)
            for grad in grads:
                total = clip(total + grad / tokens)
        else:
            total = clip(sum(w * g for w, g in zip(weights[mistake], grads, strict=True)))
        after[mistake] = (start - lr * total).tolist()
    return after


def _logged_by(spec, window_weights, mistakes) -> dict:
    """Each window's logged loss, as the recipe (None) and each mistake log it, on the
    weights the recipe had before that window (forward passes only)."""
    model, _, _, windows = _recipe_problem(spec)
    parameters = list(model.parameters())
    logged = {mistake: [] for mistake in mistakes}
    with torch.no_grad():
        for index, window in enumerate(windows):
            if index:
                nn.utils.vector_to_parameters(torch.tensor(window_weights[index - 1]), parameters)
            tokens = sum(count_tokens(labels) for _, labels in window)
            positions = sum(labels.numel() for _, labels in window)
            sums = dict.fromkeys(mistakes, 0.0)
            for inputs, labels in window:
                with torch.autocast("cpu", dtype=_dtype(spec), enabled=_dtype(spec) is not None):
                    logits = model(inputs)
                for mistake in mistakes:
                    loss = _normalised(mistake, logits, labels, window, tokens, positions)
                    sums[mistake] += loss.item()
            for mistake in mistakes:
                logged[mistake].append(sums[mistake])
    return logged


def _schedule(spec, steps: int) -> list[float]:
    """The learning rate of each optimizer step, as the check's schedule gives it."""
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=spec["lr"])
    factor = warmup_cosine(optimizer, 1, len(spec["windows"]) + 1).lr_lambdas[0]
    return [spec["lr"] * factor(step) for step in range(steps)]


def _grad_norm(parameters) -> float:
    grads = [p.grad.detach().double().norm() for p in parameters if p.grad is not None]
    return float(torch.stack(grads).norm()) if grads else 0.0


def _reference_recipe(model, optimizer, scheduler, window, max_norm, dtype=None):
    return recipe_window(model, optimizer, scheduler, window, max_norm, dtype)


def _which(window: int, count: int) -> str:
    return f"window {window + 1}" + (" (the last, shorter one)" if window == count - 1 else "")


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
        # The hidden specs run on a smaller GPT (no transformer block: embeddings, LayerNorm
        # and the head), which shows every mistake of the loop at half the cost.
        specs = [
            # fixed: clipping bites on both steps, the micro-batches' token counts differ and
            # the last window is a single micro-batch, so the clipping mistakes (a flush that
            # forgets it too) and a token count taken from one micro-batch fail whatever the draw
            {"seed": 11, "windows": [[1, 3], [2]], "max_norm": 0.05, "lr": 1.0, "layers": 0},
        ]
        # drawn: one window never clips (a wrong scale shows in the weights); one clips in bf16
        for max_norm, dtype in ((100.0, None), (rng.choice([0.05, 0.2]), "bfloat16")):
            n = rng.randint(2, 3)
            spec = {
                "seed": rng.randrange(10**6),
                "windows": [
                    [rng.randint(1, 4) for _ in range(n)],
                    [rng.randint(1, 4) for _ in range(rng.randint(1, n - 1))],  # shorter
                ],
                "max_norm": max_norm,
                "lr": rng.choice([0.5, 1.0]),
                "layers": 0,
            }
            if dtype:
                spec["dtype"] = dtype
            specs.append(spec)
        return specs

    def run(self, fn, spec):
        model, optimizer, scheduler, windows = _recipe_problem(spec)
        counter = StepCounter(model, optimizer)
        scheduler_steps = SchedulerSteps(scheduler)
        watch = Watch(model)
        parameters = list(model.parameters())
        norms = []  # the gradient's norm as each optimizer step found it
        optimizer.register_step_pre_hook(lambda *_: norms.append(_grad_norm(parameters)))
        autocast = []  # per forward: the autocast dtype in force on the CPU, or None
        model.register_forward_pre_hook(
            lambda *_: autocast.append(
                str(torch.get_autocast_dtype("cpu")) if torch.is_autocast_enabled("cpu") else None
            )
        )
        given = [[(x.clone(), y.clone()) for x, y in window] for window in windows]
        dtype = _dtype(spec)
        extra = (dtype,) if dtype is not None else ()
        losses, window_weights, steps, scheduled, forwards = [], [], [], [], []
        for window in windows:
            seen = len(watch.forward_sizes)
            losses.append(
                as_float(fn(model, optimizer, scheduler, window, spec["max_norm"], *extra))
            )
            window_weights.append(weights_of(model))
            steps.append(counter.steps)
            scheduled.append(scheduler_steps.count)
            forwards.append(max(watch.forward_sizes[seen:], default=0))
        changed = next(
            (
                [w, m, "inputs" if not torch.equal(x, x0) else "labels"]
                for w, (window, before) in enumerate(zip(windows, given, strict=True))
                for m, ((x, y), (x0, y0)) in enumerate(zip(window, before, strict=True))
                if not (torch.equal(x, x0) and torch.equal(y, y0))
            ),
            None,
        )
        return {
            "weights": window_weights[-1],
            "window_weights": window_weights,
            "losses": losses,
            "lrs": counter.lrs,
            "step_norms": norms,
            "optimizer_steps": counter.steps,
            "scheduler_steps": scheduler_steps.count,
            "steps_after_window": steps,
            "scheduler_after_window": scheduled,
            "grad_left": any(p.grad is not None and bool(p.grad.any()) for p in parameters),
            "zero_grads": counter.zero_grads,
            "autocast": autocast,
            "changed_in_place": changed,
            "largest_forward": max(watch.forward_sizes, default=0),
            "largest_forward_per_window": forwards,
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
        largest = outputs.get("largest_forward_per_window")
        if isinstance(largest, list) and len(largest) == len(windows):
            for index, (size, window) in enumerate(zip(largest, windows, strict=True)):
                if isinstance(size, int) and size > max(window):
                    raise Failure(
                        f"A forward pass in {_which(index, len(windows))} ran on {size} "
                        f"sequences at once, more than its largest micro-batch of {max(window)} "
                        f"{setting}: run the model on one micro-batch at a time, which is what "
                        "keeps the memory small.",
                        "whole_batch_forward",
                    )
        self._judge_counts(outputs, len(windows), n_micro, setting)
        self._judge_in_place(outputs, len(windows), setting)
        self._judge_autocast(spec, outputs, setting)
        self._judge_schedule(spec, outputs, setting)
        self._judge_clipping(spec, outputs, setting)
        if outputs.get("grad_left") is True:
            if outputs.get("zero_grads"):
                raise Failure(
                    "The window ends with its gradients still in .grad: you cleared them before "
                    "the window instead of after the step. Clear them after optimizer.step() "
                    "with zero_grad(set_to_none=True), so their memory is free between windows "
                    f"and the next window starts from zero whoever runs it {setting}.",
                    "zero_grad_at_window_start",
                )
            raise Failure(
                "Gradients are left in .grad after the window, so the next window adds its "
                "gradient to this one's: call optimizer.zero_grad(set_to_none=True) after the "
                f"step, so the next window starts from zero {setting}.",
                "zero_grad_missing",
            )
        self._judge_weights(spec, outputs, expected, setting)
        passes = outputs.get("backward_passes")
        if isinstance(passes, int) and passes < n_micro:
            raise Failure(
                f"The weights are right, but backward() ran {passes} times for {n_micro} "
                f"micro-batches: " + SINGLE_BACKWARD,
                "single_backward",
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
            per_window = _per_window(outputs.get("steps_after_window"))
            raise Failure(
                f"optimizer.step() ran {steps} times for {n_windows} windows {setting}"
                f"{per_window}: once per window.",
                "wrong_step_count",
            )
        if scheduler_steps == 0:
            raise Failure(
                f"The scheduler never stepped {setting}: call scheduler.step() once per "
                "window, right after optimizer.step().",
                "scheduler_never_stepped",
            )
        if isinstance(scheduler_steps, int) and scheduler_steps > n_windows:
            raise Failure(
                f"scheduler.step() ran {scheduler_steps} times for {n_windows} optimizer steps "
                f"{setting}. The schedule counts optimizer steps: step it once per window, "
                "never per micro-batch (HF Accelerate #963).",
                "scheduler_every_micro_batch",
            )
        if scheduler_steps != n_windows:
            after = outputs.get("scheduler_after_window")
            skipped = [
                _which(w, n_windows)
                for w in range(n_windows)
                if isinstance(after, list)
                and len(after) == n_windows
                and after[w] == (after[w - 1] if w else 0)
            ]
            where = " and ".join(skipped) or "one window"
            raise Failure(
                f"scheduler.step() ran {_count(scheduler_steps, 'time')} for {n_windows} "
                f"optimizer steps {setting}: {where} stepped the optimizer but not the "
                "scheduler, so the schedule falls behind the steps. A step taken outside your "
                "main loop (the flush of a last, shorter window) needs scheduler.step() too, "
                "and clipping.",
                "scheduler_skipped",
            )

    def _judge_in_place(self, outputs, n_windows, setting):
        changed = outputs.get("changed_in_place")
        if isinstance(changed, list) and len(changed) == 3:
            window, micro, what = changed
            raise Failure(
                f"Your function changed the {what} of micro-batch {micro + 1} of "
                f"{_which(window, n_windows)} in place {setting}. They are the caller's data: "
                "the next epoch (or another run) would train on the changed values. Work on a "
                "copy, or use an out-of-place operation (masked_fill, not masked_fill_).",
                "window_changed_in_place",
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

    def _judge_schedule(self, spec, outputs, setting):
        lrs, wanted = outputs.get("lrs"), _schedule(spec, len(spec["windows"]))
        if not isinstance(lrs, list) or relative_gap(lrs, wanted) <= 1e-9:
            return
        ahead = _schedule(spec, len(wanted) + 1)[1:]
        shown = ", ".join(f"{v:.4g}" for v in lrs)
        right = ", ".join(f"{v:.4g}" for v in wanted)
        if relative_gap(lrs, ahead) <= 1e-9:
            raise Failure(
                f"Your steps used learning rates {shown}; the schedule's are {right} {setting}: "
                "one step ahead, because scheduler.step() ran before optimizer.step(). Step the "
                "optimizer first, then the scheduler.",
                "scheduler_before_optimizer",
            )
        raise Failure(
            f"Your steps used learning rates {shown}; the schedule's are {right} {setting}. "
            "Leave the learning rate to the scheduler: scheduler.step() once, after each "
            "optimizer.step()."
        )

    def _judge_clipping(self, spec, outputs, setting):
        norms, max_norm = outputs.get("step_norms"), spec["max_norm"]
        if not isinstance(norms, list):
            return
        over = [
            (w, norm)
            for w, norm in enumerate(norms)
            if isinstance(norm, float) and norm > max_norm * (1 + CLIP_SLACK)
        ]
        if over:
            where = "; ".join(
                f"the step of {_which(w, len(norms))} used a gradient of norm {norm:.3g}"
                for w, norm in over
            )
            where = where[0].upper() + where[1:]
            raise Failure(
                f"{where}, above max_norm {max_norm} {setting}: that step's gradient was not "
                "clipped. Call torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm) "
                "after the window's last backward and before every optimizer.step(), the step "
                "of a last, shorter window too (clipping after the step changes nothing: the "
                "step has used the gradient; clipping p.data or a copy of the gradients leaves "
                "p.grad as it was).",
                "clipping_missing",
            )

    def _judge_weights(self, spec, outputs, expected, setting):
        tolerance = BF16_TOLERANCE if spec.get("dtype") else TOLERANCE
        got = outputs.get("window_weights")
        wanted = expected["window_weights"]
        if not isinstance(got, list) or len(got) != len(wanted):
            raise Failure("Your function did not produce the model's weights.")
        gaps = [
            relative_gap(number_list({"w": w}, "w", "the model's weights"), e)
            for w, e in zip(got, wanted, strict=True)
        ]
        if max(gaps) <= tolerance:
            return
        # under bf16 the mistakes' weights lie within the tolerance of each other: no name
        candidates = [] if spec.get("dtype") else ["mean_of_means", "padding_counted"]
        if candidates:
            candidates.append("loss_not_divided")
            if _clipped(spec, expected):
                candidates.append("clip_every_micro_batch")
        after = _after_first_window(spec, [None, *candidates]) if candidates else {}
        student = number_list({"w": got[0]}, "w", "the model's weights")
        for mistake in candidates:
            # named only when the mistake moves the weights well beyond the tolerance
            if (
                relative_gap(after[mistake], after[None]) > max(MISTAKE_GAP, 3 * tolerance)
                and relative_gap(student, after[mistake]) <= tolerance
            ):
                message = RECIPE_MISTAKES[mistake]
                raise Failure(f"After window 1, y{message[1:]} {setting}", mistake)
        first = next(w for w, gap in enumerate(gaps) if gap > tolerance)
        sizes = spec["windows"][first]
        right = (
            f"Your weights were right after {_which(first - 1, len(gaps))}, but after "
            if first
            else "After "
        )
        raise Failure(
            f"{right}{_which(first, len(gaps))} (micro-batches of {sizes} sequences) your "
            f"weights differ from the recipe's by {gaps[first]:.2e} (relative) {setting}. In "
            "each window: forward and backward per micro-batch on the summed token loss divided "
            "by the whole window's real-token count (count_tokens over every micro-batch of "
            "this window, whatever their sizes), then clip, optimizer.step(), "
            "scheduler.step(), zero_grad()."
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
        # the first window's loss comes before any step: it is exact; the second one's
        # follows weights that may differ by rounding (bf16: by up to BF16_TOLERANCE)
        later = BF16_TOLERANCE if spec.get("dtype") else TOLERANCE
        if (
            len(losses) == len(wanted)
            and relative_gap(losses[:1], wanted[:1]) <= TOLERANCE
            and relative_gap(losses[1:], wanted[1:]) <= later
        ):
            return
        # a gradient's scale hidden by clipping, or a loss in bf16 (within the bf16
        # tolerance of the weights), shows in the logged loss; mean_of_means shows in the
        # weights, so a mean-of-means log on right weights is no sign of it
        clipped = _clipped(spec, expected)
        mistakes = ["padding_counted", "loss_not_divided"] if clipped else []
        if spec.get("dtype"):
            mistakes.append("loss_in_bf16")
        if mistakes and len(losses) == len(wanted):
            logged = _logged_by(spec, expected["window_weights"], [None, *mistakes])
            for mistake in mistakes:
                if relative_gap(logged[mistake], logged[None]) > MISTAKE_GAP and all(
                    relative_gap([got], [variant]) <= (TOLERANCE if w == 0 else later)
                    for w, (got, variant) in enumerate(zip(losses, logged[mistake], strict=True))
                ):
                    hidden = (
                        " Here clipping hid it from the weights: a gradient of the wrong size, "
                        "clipped to max_norm, points the same way as the right one. The logged "
                        "loss shows it."
                        if mistake != "loss_in_bf16"
                        else " The logged loss shows it."
                    )
                    raise Failure(f"{RECIPE_MISTAKES[mistake]} {setting}{hidden}", mistake)
        which = [
            f"{_which(w, len(wanted))}: {got:.5g}, not {right:.5g}"
            for w, (got, right) in enumerate(zip(losses, wanted, strict=False))
            if relative_gap([got], [right]) > (TOLERANCE if w == 0 else later)
        ]
        returned = f"the losses you returned differ ({'; '.join(which)}) {setting}"
        if clipped:
            # clipping hides a gradient's scale from the weights: the division may be wrong too
            raise Failure(
                f"Your weights match the recipe's, but {returned}. Here clipping hid any "
                "wrong scale from the weights, so check both the number you log and the "
                "division: each micro-batch's summed token loss divided by the whole window's "
                "real-token count, and the window's mean loss per real token returned."
            )
        raise Failure(
            f"The weights are right, but {returned}. Return the window's mean loss per real "
            "token: the sum of the divided losses you called backward() on, counted afresh in "
            "each call (nothing kept between calls), in float32.",
            "logged_loss_wrong",
        )


def _count(n, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _clipped(spec, expected) -> bool:
    """Whether clipping bit on any of the recipe's steps (its gradient norm reached max_norm)."""
    return any(norm >= spec["max_norm"] * (1 - CLIP_SLACK) for norm in expected["step_norms"])


def _per_window(after) -> str:
    """': 2 in window 1, 1 in window 2' from the counts after each window."""
    if not isinstance(after, list) or not all(isinstance(v, int) for v in after):
        return ""
    counts = [v - (after[w - 1] if w else 0) for w, v in enumerate(after)]
    return " (" + ", ".join(f"{c} in {_which(w, len(counts))}" for w, c in enumerate(counts)) + ")"


# ---------------------------------------------------------------- count_steps

_COUNT_KEYS = (
    "optimizer_steps",
    "prepared_scheduler_total",
    "deepspeed_steps",
    "deepspeed_loss_divisor",
)


def _reference_counts(micro_batches_per_epoch, accum_steps, epochs, num_processes):
    return count_steps(micro_batches_per_epoch, accum_steps, epochs, num_processes).as_dict()


def _count_patterns(micro: int, accum: int, epochs: int, procs: int) -> dict[str, dict]:
    """Each key's known wrong answers, by mistake name (the right one is left out later)."""
    windows = -(-micro // accum)  # per epoch, the short one included
    steps = windows * epochs
    return {
        "optimizer_steps": {
            "schedule_in_micro_steps": micro * epochs,
            "short_window_not_counted": micro // accum * epochs,
            "windows_across_epochs": -(-micro * epochs // accum),
            "micro_batches_split_across_processes": -(-micro // (accum * procs)) * epochs,
            "epochs_ignored": windows,
        },
        "prepared_scheduler_total": {
            "scheduler_not_multiplied": steps,
            "scheduler_divided_by_processes": steps // procs,
            "scheduler_in_micro_steps": micro * epochs * procs,
        },
        "deepspeed_steps": {
            "deepspeed_counted_like_the_loop": steps,
            "deepspeed_rounded_up": -(-micro * epochs // accum),
            "deepspeed_windows_per_epoch": micro // accum * epochs,
        },
        "deepspeed_loss_divisor": {"loss_divided_twice_with_deepspeed": accum},
    }


_COUNT_MESSAGES = {
    "schedule_in_micro_steps": (
        "that is the number of micro-batches. A scheduler and an optimizer step once per "
        "window, so count windows: a schedule sized in micro-steps ends at 1/{accum} of its "
        "decay (Accelerate #1170)."
    ),
    "short_window_not_counted": (
        "that counts only the full windows (floor). The loop also steps each epoch's short last "
        "window, so each epoch has ceil({micro} / {accum}) = {windows} steps. Sized with floor, "
        "a run stops before its last epoch ends (transformers #33455)."
    ),
    "windows_across_epochs": (
        "that counts windows over the whole run as one stream. The loop closes a window at the "
        "end of every epoch, so each epoch has ceil({micro} / {accum}) = {windows} steps."
    ),
    "micro_batches_split_across_processes": (
        "the micro-batches per epoch are each process's own (a prepared dataloader already "
        "split them), so do not divide them by the {procs} processes again."
    ),
    "epochs_ignored": "that is one epoch's steps; the run has {epochs} epochs.",
    "scheduler_not_multiplied": (
        "that is the optimizer steps. A scheduler that went through accelerator.prepare steps "
        "num_processes = {procs} times per optimizer step (split_batches=False, the default), "
        "so this one would reach its end after 1/{procs} of the run (Accelerate #2926). Give it "
        "the optimizer steps times the number of processes."
    ),
    "scheduler_divided_by_processes": (
        "a prepared scheduler steps num_processes = {procs} times per optimizer step, so "
        "multiply the optimizer steps by the number of processes, not divide."
    ),
    "scheduler_in_micro_steps": (
        "that counts micro-batches. The prepared scheduler only moves at an optimizer step "
        "({procs} times then), so count optimizer steps and multiply by {procs}."
    ),
    "deepspeed_counted_like_the_loop": (
        "that is the loop's count. An engine that decides the boundary itself steps after every "
        "{accum}th micro-batch of the whole run, (micro_steps + 1) % {accum} == 0: it never "
        "steps a short window, its windows run across epoch ends, and what is left at the end "
        "is never stepped. So the two counts disagree (transformers #22082)."
    ),
    "deepspeed_rounded_up": (
        "the engine never steps the micro-batches left over at the end of the run: they do not "
        "complete a window. Round down."
    ),
    "deepspeed_windows_per_epoch": (
        "the engine does not know where an epoch ends: it counts micro-batches across epochs, "
        "so an epoch's leftovers share a window with the next epoch's first micro-batches."
    ),
    "loss_divided_twice_with_deepspeed": (
        "engine.backward(loss) already divides the loss by gradient_accumulation_steps "
        "(scale_wrt_gas=True by default). Divided by {accum} before that too, every step is "
        "{accum} times too small (DeepSpeed #1107)."
    ),
}


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@register
class CountSteps(Question):
    name = "count_steps"
    module = MODULE
    points = 2

    def public_specs(self):
        return [
            {"micro": 10, "accum": 3, "epochs": 4, "procs": 2},  # every wrong count differs here
            {"micro": 12, "accum": 4, "epochs": 2, "procs": 1},  # every window full
            {"micro": 5, "accum": 2, "epochs": 2, "procs": 4},
            {"micro": 3, "accum": 8, "epochs": 2, "procs": 2},  # fewer micro-batches than N
        ]

    def hidden_specs(self, rng):
        specs = [
            # fixed: each separates patterns that random draws can make coincide
            {"micro": 7, "accum": 3, "epochs": 4, "procs": 3},
            {"micro": 9, "accum": 4, "epochs": 1, "procs": 8},  # one epoch: no drift yet
            {"micro": 0, "accum": 4, "epochs": 3, "procs": 2},  # an empty dataloader
            {"micro": 11, "accum": 1, "epochs": 2, "procs": 2},  # no accumulation at all
        ]
        for _ in range(4):
            accum = rng.randint(2, 16)
            micro = rng.randint(accum + 1, 40 * accum)
            if micro % accum == 0:
                micro += 1
            specs.append(
                {
                    "micro": micro,
                    "accum": accum,
                    "epochs": rng.randint(2, 6),
                    "procs": rng.choice([2, 3, 4, 8]),
                }
            )
        return specs

    def run(self, fn, spec):
        returned = fn(spec["micro"], spec["accum"], spec["epochs"], spec["procs"])
        if not isinstance(returned, dict):
            return {"returned": f"{type(returned).__name__}: {repr(returned)[:160]}"}
        counts = {}
        for key in _COUNT_KEYS:
            value = returned.get(key)
            counts[key] = value if _whole(value) else repr(value)[:80]
        return {"counts": counts, "keys": sorted(str(k)[:40] for k in returned)[:12]}

    def reference(self):
        return _reference_counts

    def judge(self, spec, outputs, expected):
        micro, accum, epochs, procs = (spec[k] for k in ("micro", "accum", "epochs", "procs"))
        setting = (
            f"({micro} micro-batches per epoch on each process, {accum} accumulation steps, "
            f"{epochs} epochs, {procs} processes)"
        )
        counts = outputs.get("counts")
        if not isinstance(counts, dict):
            raise Failure(
                f"Return a dict with the keys {', '.join(_COUNT_KEYS)}; got "
                f"{outputs.get('returned')} {setting}."
            )
        missing = [key for key in _COUNT_KEYS if key not in outputs.get("keys", [])]
        if missing:
            raise Failure(f"Your dict has no {', '.join(map(repr, missing))} {setting}.")
        wanted = expected["counts"]
        details = {
            "micro": micro,
            "accum": accum,
            "epochs": epochs,
            "procs": procs,
            "windows": -(-micro // accum),
        }
        patterns = _count_patterns(micro, accum, epochs, procs)
        for key in _COUNT_KEYS:
            got = counts.get(key)
            if not _whole(got):
                raise Failure(
                    f"{key} must be a whole number (an int), got {got} {setting}. Counts of "
                    "steps are whole: use // or a whole-number ceiling, -(-a // b).",
                    "not_an_int",
                )
            if got == wanted[key]:
                continue
            names = [
                name
                for name, value in patterns[key].items()
                if value == got and value != wanted[key]
            ]
            if len(names) == 1:
                why = _COUNT_MESSAGES[names[0]].format(**details)
                raise Failure(f"{key} is {got} {setting}: {why}", names[0])
            raise Failure(f"{key} is {got} {setting}, but it should be {wanted[key]}.")
