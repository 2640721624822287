"""``amp_window``: one window with a GradScaler: scale, unscale_, clip, step, update.

The hand-in gets a GradScaler that counts its calls (and notes the dtype of every loss it
scales), so "unscale_ every micro-batch" is seen, not guessed; a misuse that GradScaler
itself refuses is named from its message. The weights after the window are compared with
the reference's (one spec makes a micro-batch's loss inf: the step must be skipped), and a
wrong result is matched against the windows with a known mistake (clipped before unscale_,
not clipped, clipped by value, the loss not divided).

Longer than most question files: the counting scaler, the messages for each misuse and the
judge read best together, as one question.
"""

from __future__ import annotations

import torch
from torch import nn

from coursekit.checks.instruments import SINGLE_BACKWARD, StepCounter, Watch, weights_of
from coursekit.checks.module02.common import MODULE
from coursekit.checks.question import Failure, Question, Rule, number_list, relative_gap
from coursekit.checks.registry import register
from coursekit.checks.side_effects import Kept, judge_left_behind
from coursekit.checks.tamper_evident import (
    INTACT,
    Sink,
    combined,
    judge_instruments,
    poke,
    watched,
)
from coursekit.checks.window_memory import (
    is_memory_spec,
    judge_memory,
    memory_spec,
    run_measured,
)
from coursekit.data import make_regression, split_micro_batches
from coursekit.mixed_precision import amp_window
from coursekit.models import tiny_mlp

# clip_grad_norm_ divides by (norm + 1e-6): clipping the scaled gradients at max_norm * scale,
# which is right, moves the weights by ~3e-9 relative. Nothing wrong comes closer than 1e-3.
AMP_TOLERANCE = 1e-7


class CountingScaler(torch.amp.GradScaler):
    """A GradScaler that tells a :class:`ScalerCalls` of each call a student's code makes to
    it: it holds only the opaque tokens, so the counts stay out of the student's reach."""

    def __init__(self, init_scale: float):
        super().__init__("cpu", init_scale=init_scale, growth_interval=1)
        self.tokens: dict[str, object] = {}  # method -> its sink's token (ScalerCalls)

    def scale(self, outputs):
        poke(self.tokens.get("scale"))
        return super().scale(outputs)

    def unscale_(self, optimizer):
        poke(self.tokens.get("unscale_"))
        return super().unscale_(optimizer)

    def step(self, optimizer, *args, **kwargs):
        poke(self.tokens.get("step"))
        return super().step(optimizer, *args, **kwargs)

    def update(self, new_scale=None):
        poke(self.tokens.get("update"))
        return super().update(new_scale)


_SCALER_METHODS = ("scale", "unscale_", "step", "update")
_SCALER_CODES = {name: getattr(CountingScaler, name).__code__ for name in _SCALER_METHODS}


class _ScalerSink(Sink):
    """Calls of one CountingScaler method, seen from the method's own frame (the poke must
    come straight from it, with ``self`` the scaler). ``unscale_`` inside ``step`` (which
    unscales by itself when you have not) is not the student's call; ``scale`` records the
    dtype of what it scales (a bfloat16 loss is a slip)."""

    def __init__(self, scaler: CountingScaler, name: str):
        super().__init__()
        self.scaler, self.name, self._codes = scaler, name, _SCALER_CODES
        self._step = frozenset({_SCALER_CODES["step"]})

    def accept(self, *_payload) -> None:
        frame = self._getframe(2)
        if frame.f_code is not self._codes[self.name]:
            return
        if frame.f_locals.get("self") is not self.scaler:
            return
        if self.name == "unscale_" and self._frame_of(self._step, self.scaler):
            return
        outputs = frame.f_locals.get("outputs") if self.name == "scale" else None
        dtype = str(outputs.dtype).removeprefix("torch.") if self._is_tensor(outputs) else ""
        self.events.append((dtype,))


class ScalerCalls:
    """The CountingScaler's calls, counted out of the student's reach (an instrument for
    :func:`coursekit.checks.tamper_evident.watched`)."""

    def __init__(self, scaler: CountingScaler):
        self._sinks = {name: _ScalerSink(scaler, name) for name in _SCALER_METHODS}
        self.sinks = list(self._sinks.values())
        scaler.tokens = {name: sink.token for name, sink in self._sinks.items()}
        self._scaler, self._tokens = scaler, scaler.tokens

    @property
    def calls(self) -> dict[str, int]:
        return {name: len(sink.events) for name, sink in self._sinks.items()}

    @property
    def dtypes(self) -> set[str]:
        return {dtype for (dtype,) in self._sinks["scale"].events if dtype}

    def verdict(self) -> str:
        """Changed when the scaler no longer holds this counter's tokens, or a counting
        method of its own was set on it."""
        scaler = self._scaler
        if scaler.tokens is not self._tokens or any(
            self._tokens.get(name) is not sink.token for name, sink in self._sinks.items()
        ):
            return "changed"
        if any(name in vars(scaler) for name in _SCALER_METHODS):
            return "changed"
        return INTACT


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


def _wide_window(fn):
    """``fn`` called on the memory test's model and micro-batches, with an optimizer and a
    scaler of its own (:mod:`coursekit.checks.window_memory`)."""

    def window(model, loss_fn, micro_batches):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        fn(model, optimizer, CountingScaler(init_scale=2.0**4), loss_fn, micro_batches, 1000.0)

    return window


def _warm_up(model, loss_fn, micro_batches):
    """The memory test's warm-up: the right window, as :func:`_wide_window` calls one, with
    an optimizer and a scaler of its own. Written here (coursekit's own answer is watched by
    the grader's tripwire), and watched itself: the question names it in
    ``library_answers``."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = CountingScaler(init_scale=2.0**4)
    for inputs, targets in micro_batches:
        scaler.scale(loss_fn(model(inputs), targets) / len(micro_batches)).backward()
    scaler.unscale_(optimizer)
    nn.utils.clip_grad_norm_(model.parameters(), 1000.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)


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
    # coursekit code that answers it under other names (flagged when called for it)
    library_answers = ("coursekit.checks.module02.amp_window._warm_up",)
    rules = (
        Rule(
            "loss = loss_fn(model(inputs), targets) / accum_steps",
            "every spec",
            ("loss_not_divided", "loss_in_bfloat16"),
        ),
        Rule(
            "scaler.scale(loss).backward() # every micro-batch, all at the same scale",
            "every spec: the scale and the backward calls are recorded",
            ("loss_not_scaled", "single_backward", "whole_batch_forward"),
        ),
        Rule(
            "scaler.unscale_(optimizer) # once: divide the summed gradients by the scale",
            "every spec",
            (
                "unscale_every_micro_batch",
                "unscale_and_update_every_micro_batch",
                "clipped_before_unscale",
            ),
        ),
        Rule(
            "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm) # clip the true "
            "gradients",
            "the specs whose max_norm clips",
            ("clipping_missing", "clipped_after_step", "clipped_by_value"),
            lambda spec: spec.get("max_norm", 1) < 1,
        ),
        Rule(
            "scaler.step(optimizer) # skipped if any gradient is inf or NaN",
            "every spec; one with an inf in a micro-batch",
            ("optimizer_step_not_scaler", "step_every_micro_batch"),
        ),
        Rule(
            "And an inf in any micro-batch makes the whole window's sum inf: the window's "
            "gradient is unknown, so its whole step is skipped.",
            "the specs with an inf in one micro-batch",
            ("inf_micro_batch_dropped", "inf_targets_replaced_in_place"),
            lambda spec: spec.get("inf_at") is not None,
        ),
        Rule(
            "scaler.update() # once: choose the next window's scale",
            "every spec: the scaler's updates are counted",
            (
                "update_every_micro_batch",
                "update_missing",
                "update_before_step",
                "new_scaler_every_window",
            ),
        ),
        Rule(
            "with clipping to `max_norm` and `zero_grad` at the end.",
            "every spec",
            ("zero_grad_missing", "zero_grad_before_step", "grads_cleared_at_start_not_end"),
        ),
    )

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
        # the memory test: the window on a wide model, its fresh memory counted by the kernel
        return [*specs, memory_spec(rng.randrange(10**6), reads="weights")]

    def memory_call(self, fn) -> tuple:
        """How the memory test calls ``fn``, and the right answer its warm-up runs
        (:func:`coursekit.checks.window_memory.run_measured`)."""
        return _wide_window(fn), _warm_up

    def run(self, fn, spec):
        if is_memory_spec(spec):
            return run_measured(spec, *self.memory_call(fn))
        model, optimizer, scaler, micro_batches = _amp_problem(spec)
        counter = StepCounter(model, optimizer)
        watch = Watch(model)
        scaler_calls = ScalerCalls(scaler)
        kept = Kept((model,), micro_batches=micro_batches)
        raised = None
        try:
            args = (model, optimizer, scaler, nn.MSELoss(), micro_batches, spec["max_norm"])
            watched((counter, watch, scaler_calls), fn, *args)
        except (RuntimeError, AssertionError) as exc:  # GradScaler refusing a misuse
            raised = next((k for k, text in SCALER_REFUSALS.items() if text in str(exc)), None)
            if raised is None:
                raise
        grads_left = any(
            p.grad is not None and bool(p.grad.ne(0).any()) for p in model.parameters()
        )
        return {
            **kept.report(),
            "weights": weights_of(model),
            "scale": float(scaler.get_scale()),
            "calls": scaler_calls.calls,
            "optimizer_steps": counter.steps,
            "grads_left": grads_left,
            "raised": raised,
            "largest_forward": max(watch.forward_sizes, default=0),
            "backward_passes": watch.backward_passes,
            "loss_dtypes": sorted(scaler_calls.dtypes),
            "instruments": combined(
                counter.verdict(),
                scaler_calls.verdict(),
                watch.verdict(samples=spec["micro_batch_size"] * spec["accum_steps"]),
            ),
        }

    def reference(self):
        return amp_window

    def judge(self, spec, outputs, expected):
        if is_memory_spec(spec):
            return judge_memory(spec, outputs, expected)
        n = spec["accum_steps"]
        setting = (
            f"({n} micro-batches of {spec['micro_batch_size']}, max_norm {spec['max_norm']}"
            + (
                f", micro-batch {spec['inf_at']}'s loss is inf)"
                if spec["inf_at"] is not None
                else ")"
            )
        )
        judge_left_behind(outputs, setting)
        judge_instruments(outputs, setting, bypass=False)
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
        judge_instruments(outputs, setting)

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
