"""``recipe_window``: the whole recipe in one window, on a tiny GPT.

The student's function runs one window of token micro-batches: forward (under bf16 autocast
when a dtype is given) and backward per micro-batch on the summed token loss divided by the
window's real-token count, then clipping, ``optimizer.step()``, ``scheduler.step()`` and
``zero_grad()``; it returns the window's mean loss per real token. The check calls it on
two windows, the second one shorter, as the last window of an epoch is. Instruments record,
per window, the optimizer's and the scheduler's steps, the learning rate and the gradient's
norm each step used, the weights, the autocast state of each forward, and whether the
caller's tensors were changed. A wrong normalisation is named when the student's weights
after the first window match it, or, where clipping hides a gradient's scale, when the
logged losses do (``recipe_window_replay`` re-runs the windows with each mistake).

The question is one idea, judged in one pass from the counts to the logged loss, and reads
best whole: this file is longer than most for that reason.
"""

from __future__ import annotations

import torch

from coursekit.checks.instruments import (
    SINGLE_BACKWARD,
    Probes,
    SchedulerSteps,
    StepCounter,
    Watch,
    as_float,
    weights_of,
)
from coursekit.checks.module05.common import MODULE
from coursekit.checks.module05.recipe_window_replay import (
    RECIPE_MISTAKES,
    after_first_window,
    after_labels_shifted_again,
    logged_by,
    recipe_problem,
    scheduled_lrs,
    spec_dtype,
)
from coursekit.checks.question import Failure, Question, Rule, number_list, relative_gap
from coursekit.checks.registry import register
from coursekit.checks.side_effects import Kept, judge_left_behind
from coursekit.checks.tamper_evident import combined, judge_instruments, watched
from coursekit.checks.window_memory import (
    is_memory_spec,
    judge_memory,
    memory_spec,
    run_measured,
    token_loss_sum,
)
from coursekit.recipe import recipe_window

TOLERANCE = 1e-5  # float32 throughout: rounding moves the weights by ~1e-7 relative
MISTAKE_GAP = 1e-4  # a mistake is named only when it moves the weights this much
# bf16 autocast: the same operations in the same order give the same bits; a sum in another
# order moves the weights by ~1e-5 to 1e-4
BF16_TOLERANCE = 1e-3
CLIP_SLACK = 1e-3  # a clipped gradient's norm is max_norm, to rounding


def _grad_norm(parameters) -> float:
    grads = [p.grad.detach().double().norm() for p in parameters if p.grad is not None]
    return float(torch.stack(grads).norm()) if grads else 0.0


def _reference_recipe(model, optimizer, scheduler, window, max_norm, dtype=None):
    return recipe_window(model, optimizer, scheduler, window, max_norm, dtype)


def _which(window: int, count: int) -> str:
    return f"window {window + 1}" + (" (the last, shorter one)" if window == count - 1 else "")


def _wide_window(fn):
    """``fn`` called on the memory test's language model and window, with an optimizer and a
    schedule of its own (:mod:`coursekit.checks.window_memory`); max_norm never bites."""

    def window(model, _, micro_batches):
        optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
        return fn(model, optimizer, scheduler, micro_batches, 1e6)

    return window


def _warm_up(model, _, window):
    """The memory test's warm-up: the right window, as :func:`_wide_window` calls one, with
    an optimizer and a schedule of its own. Written here (coursekit's own answer is watched
    by the grader's tripwire), and watched itself: the question names it in
    ``library_answers``. Its first micro-batch runs under bf16
    autocast, as the recipe's forward may: what that path first builds (oneDNN's kernels
    and their buffers, about 10 MiB) is then in place before the measure, whichever path a
    function takes."""
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    tokens = sum(int((labels != -100).sum()) for _, labels in window)
    for index, (inputs, labels) in enumerate(window):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=index == 0):
            logits = model(inputs)
        (token_loss_sum(logits, labels) / tokens).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1e6)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)


@register
class RecipeWindow(Question):
    name = "recipe_window"
    module = MODULE
    points = 4
    # coursekit code that answers it under other names (flagged when called for it)
    library_answers = ("coursekit.checks.module05.recipe_window._warm_up",)
    rules = (
        Rule(
            "**Forward** each micro-batch under `torch.autocast(device_type, dtype=dtype, "
            "enabled=dtype is not None)`",
            "every spec: three with dtype None (autocast off), one with torch.bfloat16",
            ("autocast_missing", "autocast_without_dtype"),
        ),
        Rule(
            "and compute the loss from `logits.float()`.",
            "the spec with dtype=torch.bfloat16",
            ("loss_in_bf16",),
            lambda spec: not is_memory_spec(spec) and spec.get("dtype") is not None,
        ),
        Rule(
            'each micro-batch\'s summed loss (`lm_loss(logits, labels, "sum")`) divided by the '
            "real-token count of the *whole window* (`count_tokens`), then `backward()`, one "
            "micro-batch at a time.",
            "every spec: two windows of unequal micro-batches, padded",
            (
                "mean_of_means",
                "padding_counted",
                "loss_not_divided",
                "whole_batch_forward",
                "single_backward",
                "tokens_from_first_micro_batch",
                "loss_scaled_through_data",
                "labels_shifted_again",
            ),
        ),
        Rule(
            "**Clip** the window's gradient once, at the boundary:",
            "the specs whose max_norm clips",
            (
                "clip_every_micro_batch",
                "clipping_missing",
                "clip_after_step",
                "clip_on_data",
                "flush_without_clipping",
            ),
            lambda spec: spec.get("max_norm", 100) < 100,
        ),
        Rule(
            "**Step** the optimizer, then the scheduler (it counts optimizer steps), then "
            "`optimizer.zero_grad(set_to_none=True)`.",
            "every spec: steps, scheduler steps and zero_grad calls are counted",
            (
                "zero_grad_missing",
                "scheduler_before_optimizer",
                "scheduler_never_stepped",
                "scheduler_every_micro_batch",
                "step_every_micro_batch",
                "zero_grad_at_window_start",
                "flush_without_scheduler",
            ),
        ),
        Rule(
            "**Return** the window's mean loss per real token as a float",
            "every spec: each window's returned loss",
            ("logged_loss_wrong", "logged_total_kept_between_calls"),
        ),
        Rule(
            "Leave the window's tensors as they are given",
            "every spec: the labels are compared after the call",
            ("labels_changed_in_place",),
        ),
    )

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
        # the memory test: one window on a wide model, its fresh memory counted by the kernel
        # (float32: the recipe computes its loss from logits.float())
        seed = rng.randrange(10**6)
        return [*specs, memory_spec(seed, reads="weights", problem="tokens", dtype="float32")]

    def memory_call(self, fn) -> tuple:
        """How the memory test calls ``fn``, and the right answer its warm-up runs
        (:func:`coursekit.checks.window_memory.run_measured`)."""
        return _wide_window(fn), _warm_up

    def run(self, fn, spec):
        if is_memory_spec(spec):
            return run_measured(spec, *self.memory_call(fn))
        model, optimizer, scheduler, windows = recipe_problem(spec)
        counter = StepCounter(model, optimizer)
        scheduler_steps = SchedulerSteps(scheduler)
        watch = Watch(model)
        parameters = list(model.parameters())
        probes = Probes()
        # the gradient's norm as each optimizer step found it
        norms = probes.on_step(optimizer, lambda _optimizer: _grad_norm(parameters))
        # per forward: the autocast dtype in force on the CPU, or None
        autocast = probes.on_forward(
            model,
            lambda: (
                str(torch.get_autocast_dtype("cpu")) if torch.is_autocast_enabled("cpu") else None
            ),
        )
        given = [[(x.clone(), y.clone()) for x, y in window] for window in windows]
        dtype = spec_dtype(spec)
        extra = (dtype,) if dtype is not None else ()
        losses, window_weights, steps, scheduled, forwards, left = [], [], [], [], [], []
        for window in windows:
            seen = len(watch.forward_sizes)
            kept = Kept((model,))  # per window: a switch left on is put back before the next
            losses.append(
                as_float(
                    watched(
                        (counter, scheduler_steps, watch, probes),
                        fn,
                        *(model, optimizer, scheduler, window, spec["max_norm"], *extra),
                    )
                )
            )
            left += [code for code in kept.report()["left_changed"] if code not in left]
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
            "step_norms": [norm for (norm,) in norms],
            "optimizer_steps": counter.steps,
            "scheduler_steps": scheduler_steps.count,
            "steps_after_window": steps,
            "scheduler_after_window": scheduled,
            "grad_left": any(p.grad is not None and bool(p.grad.any()) for p in parameters),
            "zero_grads": counter.zero_grads,
            "autocast": [dtype for (dtype,) in autocast],
            "changed_in_place": changed,
            "largest_forward": max(watch.forward_sizes, default=0),
            "largest_forward_per_window": forwards,
            "backward_passes": watch.backward_passes,
            "left_changed": left,
            "instruments": combined(
                counter.verdict(),
                scheduler_steps.verdict(),
                probes.verdict(),
                watch.verdict(samples=sum(len(x) for window in windows for x, _ in window)),
            ),
        }

    def reference(self):
        return _reference_recipe

    def judge(self, spec, outputs, expected):
        if is_memory_spec(spec):
            return judge_memory(spec, outputs, expected)
        windows = spec["windows"]
        n_micro = sum(len(window) for window in windows)
        setting = (
            f"(two windows of micro-batches of {windows[0]} and {windows[1]} sequences, "
            f"max_norm {spec['max_norm']}, dtype {spec.get('dtype') or 'None'})"
        )
        judge_instruments(outputs, setting, bypass=False)
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
        judge_left_behind(outputs, setting)
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
        judge_instruments(outputs, setting)
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
        lrs, wanted = outputs.get("lrs"), scheduled_lrs(spec, len(spec["windows"]))
        if not isinstance(lrs, list) or relative_gap(lrs, wanted) <= 1e-9:
            return
        ahead = scheduled_lrs(spec, len(wanted) + 1)[1:]
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
        after = after_first_window(spec, [None, *candidates]) if candidates else {}
        student = number_list({"w": got[0]}, "w", "the model's weights")
        for mistake in candidates:
            # named only when the mistake moves the weights well beyond the tolerance
            if (
                relative_gap(after[mistake], after[None]) > max(MISTAKE_GAP, 3 * tolerance)
                and relative_gap(student, after[mistake]) <= tolerance
            ):
                message = RECIPE_MISTAKES[mistake]
                raise Failure(f"After window 1, y{message[1:]} {setting}", mistake)
        right_first = after[None] if after else after_first_window(spec, [None])[None]
        for shifted in after_labels_shifted_again(spec):
            if (
                relative_gap(shifted, right_first) > max(MISTAKE_GAP, 3 * tolerance)
                and relative_gap(student, shifted) <= tolerance
            ):
                message = RECIPE_MISTAKES["labels_shifted_again"]
                raise Failure(f"After window 1, y{message[1:]} {setting}", "labels_shifted_again")
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
            logged = logged_by(spec, expected["window_weights"], [None, *mistakes])
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
