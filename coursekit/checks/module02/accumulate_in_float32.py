"""``accumulate_in_float32``: a bf16 model's micro-batch gradients summed in float32.

A model cast to bf16 has bf16 ``.grad``; letting micro-batches add up there (or in any bf16
buffer) rounds the running sum to 8 significant bits at every addition (pitfall 14). The
check records each gradient as it flows into each parameter (a tensor hook, before ``.grad``)
and compares the hand-in's sums with the float32 sums of *those* gradients: any right way of
computing the loss (in bf16 or float32, divided before backward or the sums after) rounds its
bf16 gradients a little differently, and each is judged against its own. The scale is then
checked loosely against the reference's. A result that is off *and* holds only values a bf16
number can represent was rounded to bf16 somewhere: a float32 sum of many bf16 gradients
almost never is, so that signature names the mistake whatever route the rounding took.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from coursekit.checks.instruments import (
    SINGLE_BACKWARD,
    Watch,
    judge_micro_batches_and_weights,
    tensor_list,
    weights_of,
)
from coursekit.checks.module02.common import MODULE
from coursekit.checks.question import Failure, Question, Rule, relative_gap
from coursekit.checks.registry import register
from coursekit.checks.side_effects import Kept, judge_left_behind, switches_kept
from coursekit.checks.tamper_evident import (
    AutogradSink,
    Seal,
    combined,
    judge_instruments,
    poker,
    watched,
)
from coursekit.checks.window_memory import (
    is_memory_spec,
    judge_memory,
    memory_spec,
    run_measured,
)
from coursekit.data import make_regression, split_micro_batches
from coursekit.models import tiny_mlp

# The same bf16 gradients summed in float32 in another order differ by float32 rounding,
# ~1e-7 relative; summed in bf16 they differ by ~1e-3 to 1e-2. 1e-5 sits between the two.
TOLERANCE = 1e-5
# Two right answers round their bf16 gradients differently (the loss computed in bf16 or in
# float32, divided before backward or after): ~1e-3 apart. A wrong scale is a factor of N.
SCALE_TOLERANCE = 0.05


def _problem(spec):
    model = tiny_mlp(in_features=6, hidden=12, depth=2, seed=spec["seed"]).to(torch.bfloat16)
    size = spec["micro_batch_size"] * spec["accum_steps"]
    inputs, targets = make_regression(size, in_features=6, seed=spec["seed"] + 1)
    batches = split_micro_batches(inputs.bfloat16(), targets.bfloat16(), spec["micro_batch_size"])
    if spec.get("frozen"):  # the first bias frozen, as in fine-tuning: its sum stays zero
        list(model.parameters())[1].requires_grad_(False)
    return model, batches


def accumulate_in_float32(model, loss_fn, micro_batches):
    """The reference: each micro-batch's bf16 gradient added into a float32 sum, then cleared
    (a frozen parameter has none: its sum stays zero)."""
    sums = [torch.zeros_like(p, dtype=torch.float32) for p in model.parameters()]
    for inputs, targets in micro_batches:
        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()
        for total, parameter in zip(sums, model.parameters(), strict=True):
            if parameter.grad is not None:
                total += parameter.grad
                parameter.grad = None
    return sums


class _Incoming:
    """Records each gradient flowing into each parameter (a tensor hook fires before the
    gradient is added to ``.grad``, for ``backward`` and ``autograd.grad`` alike), so a
    hand-in is compared with the float32 sums of its *own* micro-batch gradients.

    Out of the hooks' reach and verified, as the checks' instruments are
    (:mod:`coursekit.checks.tamper_evident`): a gradient counts when the autograd engine
    hands it over for that parameter, once per backward pass.
    """

    def __init__(self, parameters):
        self.parameters = parameters
        self.seal = Seal()
        self._sinks = [AutogradSink(p, keep=True) if p.requires_grad else None for p in parameters]
        self.sinks = [sink for sink in self._sinks if sink is not None]
        self.handles = []
        for parameter, sink in zip(parameters, self._sinks, strict=True):
            if sink is None:  # a frozen parameter takes no hook, and gets no gradient
                continue
            hook = poker(sink.token)
            handle = parameter.register_hook(hook)
            self.seal.hook(parameter, "_backward_hooks", handle, hook)
            self.handles.append(handle)

    @property
    def arrived(self) -> list[list[torch.Tensor]]:
        """The gradients that reached each parameter, in order."""
        return [[g for _, g in sink.events] if sink else [] for sink in self._sinks]

    @property
    def dtypes(self) -> set[str]:
        return {str(g.dtype) for sink in self.sinks for _, g in sink.events}

    def verdict(self) -> str:
        return self.seal.verdict()

    def remove(self):
        for handle in self.handles:
            handle.remove()

    def float32_sums(self) -> list[float]:
        sums = []
        for parameter, arrived in zip(self.parameters, self.arrived, strict=True):
            total = torch.zeros(parameter.shape, dtype=torch.float32)
            for gradient in arrived:
                total += gradient.float()
            sums.append(total.flatten())
        return tensor_list(torch.cat(sums))

    def never_cleared_sums(self) -> list[float]:
        """What adding a never-cleared ``.grad`` after every backward gives: the running
        ``.grad``, accumulated in its own dtype as autograd does, added each time."""
        sums = []
        for parameter, arrived in zip(self.parameters, self.arrived, strict=True):
            total = torch.zeros(parameter.shape, dtype=torch.float32)
            running = None
            for gradient in arrived:
                running = gradient if running is None else running + gradient
                total += running.float()
            sums.append(total.flatten())
        return tensor_list(torch.cat(sums))


def _read_sums(returned, parameters) -> dict:
    """The returned sums as plain data: dtypes and one flat list, or what was returned."""
    shapes = [tuple(p.shape) for p in parameters]
    if isinstance(returned, torch.Tensor) or not isinstance(returned, list | tuple):
        return {"returned": type(returned).__name__}
    tensors = [t for t in returned if isinstance(t, torch.Tensor)]
    if len(tensors) != len(returned) or [tuple(t.shape) for t in tensors] != shapes:
        got = [tuple(getattr(t, "shape", ())) for t in returned]
        return {"returned": f"shapes {got}", "shapes": [list(shape) for shape in got]}
    return {
        "dtypes": sorted({str(t.dtype) for t in tensors}),
        "grad": tensor_list(torch.cat([t.detach().flatten() for t in tensors])),
    }


def _projection(actual: list[float], basis: list[float] | None) -> float | None:
    """The factor k that brings ``basis`` closest to ``actual`` (least squares)."""
    if not isinstance(basis, list) or len(basis) != len(actual):
        return None
    denominator = sum(b * b for b in basis)
    if denominator == 0.0:
        return None
    return sum(a * b for a, b in zip(actual, basis, strict=True)) / denominator


def _bf16_representable(values: list[float]) -> bool:
    exact = torch.tensor(values, dtype=torch.float64)
    return bool(torch.equal(exact.to(torch.bfloat16).double(), exact))


# the parameters' shapes of every spec's model (tiny_mlp(6, 12, depth=2))
_SHAPES = [[12, 6], [12], [1, 12], [1]]


def _frozen_words(spec) -> str:
    return ", its first bias frozen" if spec.get("frozen") else ""


def _judge_again(outputs, setting) -> None:
    """Fail when a second call on the same model (``.grad`` cleared) gave other sums."""
    gap, times = outputs.get("again_gap"), outputs.get("again_times")
    if not isinstance(gap, float) or gap <= TOLERANCE:
        return
    doubled = isinstance(times, float) and abs(times - 2) < 1e-3
    raise Failure(
        "Your sums are right the first time, but called again on the same model (its .grad "
        "cleared, as before the next window) your function returned "
        + ("twice the sums: the first call's sums were added to. " if doubled else "other sums. ")
        + "Buffers kept between calls (in a global, on the model, in a default argument) and "
        f"never zeroed carry one window into the next {setting}. Make new float32 buffers "
        "(torch.zeros_like(p, dtype=torch.float32)) in every call.",
        "state_across_calls",
    )


def _judge_scale(times: float | None, n: int, micro: int, setting: str) -> None:
    """The sums add up the hand-in's own gradients but at another scale: name the divisor
    when it is one we know, else say by how much they are off."""
    if times is not None and abs(times - n) < 0.05 * n and n > 1:
        raise Failure(
            f"Your sums are {n} times the window's gradient: divide each micro-batch's "
            f"loss by the number of micro-batches {setting}.",
            "loss_not_divided",
        )
    divisors = {
        "divided_by_micro_batch_size": (
            n / micro,
            f"each loss was divided by the micro-batch size, {micro}, where the number of "
            f"micro-batches, {n}, belongs (MSELoss already averages over a micro-batch's "
            "samples)",
        ),
        "divided_by_samples": (
            1 / micro,
            f"each loss was divided by the window's {n * micro} samples, but MSELoss already "
            f"averages over a micro-batch's {micro}: divide by the number of micro-batches, {n}",
        ),
    }
    for mistake, (factor, why) in divisors.items():
        if times is not None and n != micro and abs(times - factor) < 0.05 * factor:
            raise Failure(
                f"Your sums are {times:.3g} times the window's mean gradient: {why} {setting}.",
                mistake,
            )
    size = f"{times:.3g} times" if times is not None else "far from"
    raise Failure(
        f"Your sums add up your micro-batches' gradients in float32, but they are {size} the "
        f"window's mean gradient {setting}: the mean is each micro-batch's mean loss divided "
        f"by the number of micro-batches, {n}, before backward (or the sums divided by {n})."
    )


@register
class AccumulateInFloat32(Question):
    name = "accumulate_in_float32"
    module = MODULE
    points = 2
    rules = (
        Rule(
            "Run forward and backward on each micro-batch (of equal sizes: divide each loss by "
            "their number)",
            "every spec (1 to 64 micro-batches)",
            (
                "loss_not_divided",
                "divided_twice",
                "first_micro_batch_only",
                "single_backward",
                "micro_batch_skipped",
                "whole_window_at_once",
                "divided_by_micro_batch_size",
            ),
        ),
        Rule(
            "add each parameter's `.grad` into a float32 sum of that parameter's shape",
            "every spec: the sums' dtype and values, and a second call",
            (
                "accumulated_in_bf16",
                "sums_in_float16",
                "bf16_buffer_returned",
                "bf16_buffer_converted",
                "buffers_kept_between_calls",
            ),
        ),
        Rule(
            "and clear `.grad` (`p.grad = None`) before the next backward.",
            "the specs with more than one micro-batch",
            ("grad_not_cleared",),
            lambda spec: spec["accum_steps"] > 1,
        ),
        Rule(
            "A frozen parameter (`requires_grad=False`) gets no `.grad`: its sum stays zero, in "
            "its place in the list.",
            "every spec: each model has a frozen parameter",
            ("frozen_parameter_skipped", "frozen_parameter_crashes"),
        ),
        Rule(
            "Leave the model in bf16.",
            "every spec: the model's dtype after the call",
            ("model_cast", "model_cast_and_back", "float32_copy"),
        ),
    )

    def public_specs(self):
        return [
            {"seed": 1, "accum_steps": 16, "micro_batch_size": 8},
            {"seed": 2, "accum_steps": 64, "micro_batch_size": 4},
            {"seed": 3, "accum_steps": 1, "micro_batch_size": 8},
        ]

    def hidden_specs(self, rng):
        return [
            {
                "seed": rng.randrange(10**6),
                "accum_steps": rng.randint(12, 32),  # 64 is a public spec
                "micro_batch_size": rng.randint(2, 8),
            }
            for _ in range(3)
        ] + [
            {"seed": rng.randrange(10**6), "accum_steps": 6, "micro_batch_size": 4, "frozen": True},
            # the memory test: one window on a wide bf16 model, its fresh memory counted by
            # the kernel, the returned sums compared with the reference's
            memory_spec(rng.randrange(10**6), reads="returned", dtype="bfloat16"),
        ]

    def memory_call(self, fn) -> tuple:
        """How the memory test calls ``fn``, and the right answer its warm-up runs
        (:func:`coursekit.checks.window_memory.run_measured`)."""
        return fn, None

    def run(self, fn, spec):
        if is_memory_spec(spec):
            return run_measured(spec, *self.memory_call(fn))
        model, micro_batches = _problem(spec)
        parameters = list(model.parameters())
        watch = Watch(model)
        incoming = _Incoming(parameters)
        kept = Kept((model,), micro_batches=micro_batches)
        try:
            returned = watched((watch, incoming), fn, model, nn.MSELoss(), micro_batches)
            incoming_verdict = incoming.verdict()  # before its hooks are removed
        finally:
            incoming.remove()
        outputs = {
            **kept.report(),
            "largest_forward": max(watch.forward_sizes, default=0),
            "backward_passes": watch.backward_passes,
            "forward_samples": sum(watch.forward_sizes),  # seen once or twice, by two hooks
            "weights_moved": weights_of(model) != watch.start,
            "instruments": combined(
                incoming_verdict,
                watch.verdict(samples=spec["micro_batch_size"] * spec["accum_steps"]),
            ),
            "model_dtypes": sorted({str(p.dtype) for p in parameters}),
            "incoming_dtypes": sorted(incoming.dtypes),
            "own_sums": incoming.float32_sums(),
            "own_never_cleared": incoming.never_cleared_sums(),
        }
        outputs.update(_read_sums(returned, parameters))
        if "grad" in outputs and outputs["input_changed"] is None and spec["accum_steps"] <= 16:
            # the same window again, on the same model with .grad cleared, as the caller's
            # next window: sums kept from the first call (buffers never zeroed) show here.
            # Windows of at most 16 (a public spec, and every draw's frozen-bias spec) are
            # enough: state kept between calls shows at any length, and it halves the time.
            for parameter in parameters:
                parameter.grad = None
            try:
                with switches_kept():
                    again = _read_sums(fn(model, nn.MSELoss(), micro_batches), parameters)
            except Exception:  # a second call that raises: compared as no sums at all
                again = {}
            gap = relative_gap(again.get("grad") or [], outputs["grad"])
            outputs["again_gap"] = gap if math.isfinite(gap) else 1.0  # 1.0: no sums
            outputs["again_times"] = _projection(again.get("grad") or [], outputs["grad"])
        return outputs

    def reference(self):
        return accumulate_in_float32

    def judge(self, spec, outputs, expected):
        if is_memory_spec(spec):
            return judge_memory(spec, outputs, expected)
        n, micro = spec["accum_steps"], spec["micro_batch_size"]
        frozen = [1] if spec.get("frozen") else []  # the index _problem freezes
        setting = f"({n} micro-batches of {micro}, a bf16 model{_frozen_words(spec)})"
        judge_left_behind(outputs, setting)
        judge_instruments(outputs, setting, bypass=False)
        shapes = outputs.get("shapes")
        if frozen and isinstance(shapes, list):
            trainable = [s for i, s in enumerate(_SHAPES) if i not in frozen]
            if shapes == trainable:
                raise Failure(
                    f"You returned {len(shapes)} tensors for the model's {len(_SHAPES)} "
                    f"parameters {setting}: the frozen one (requires_grad False) was left out. "
                    "Return one float32 tensor per parameter, in the order of "
                    "model.parameters(): a frozen parameter gets no gradient, so its sum stays "
                    "zero (and its .grad stays None: add only a .grad that is not None).",
                    "frozen_parameter_skipped",
                )
        if "returned" in outputs:
            raise Failure(
                "Return a list with one float32 tensor per parameter, in the order of "
                f"model.parameters(), each of that parameter's shape; got {outputs['returned']} "
                f"{setting}."
            )
        judge_micro_batches_and_weights(outputs, micro, setting)
        passes = outputs.get("backward_passes")
        every_sample_forward = outputs.get("forward_samples", 0) >= n * micro
        if n > 2 and passes == 1 and every_sample_forward:
            raise Failure("The sums may be right, but " + SINGLE_BACKWARD, "single_backward")
        if isinstance(passes, int) and 1 < passes < n and every_sample_forward:
            raise Failure(
                f"backward() ran {passes} times for {n} micro-batches: every micro-batch's "
                f"gradient belongs in the sums {setting}.",
                "micro_batch_skipped",
            )
        arrived = outputs.get("incoming_dtypes", [])
        if not arrived and not any(outputs.get("grad") or []):
            raise Failure(
                "No gradient reached the model's parameters, and your sums are zero: run "
                f"backward() on each micro-batch's loss {setting}.",
                "no_backward",
            )
        if set(arrived) - {"torch.bfloat16"} or not arrived:
            raise Failure(
                "The gradients did not come from the bf16 model you were given (the model was "
                "cast to another dtype for the backward, or a copy was used). Leave the model "
                "in bf16, which is the memory it saves, and sum its bf16 gradients in float32 "
                f"buffers of your own {setting}.",
                "model_cast",
            )
        if outputs.get("model_dtypes") != ["torch.bfloat16"]:
            raise Failure(
                f"The model's parameters are {', '.join(outputs.get('model_dtypes', []))} after "
                "your function: leave the model in bf16 (that is the memory it saves) and sum "
                f"its gradients in float32 buffers of your own {setting}.",
                "model_cast",
            )
        actual, wanted = outputs.get("grad"), expected["grad"]
        dtypes = outputs.get("dtypes", [])
        if "torch.bfloat16" in dtypes:
            raise Failure(
                "Your sums are bfloat16 tensors: a bf16 running sum rounds every addition to 8 "
                "significant bits. Keep the sums in float32 "
                f"(torch.zeros_like(p, dtype=torch.float32)) {setting}.",
                "accumulated_in_bf16",
            )
        if not set(dtypes) <= {"torch.float32", "torch.float64"}:  # float64 is finer still
            raise Failure(
                f"Your sums are {', '.join(dtypes)} tensors: keep them in float32, which has "
                "bf16's range and 24 significant bits "
                f"(torch.zeros_like(p, dtype=torch.float32)) {setting}.",
                "sums_not_float32",
            )
        own = outputs.get("own_sums")
        k = _projection(actual, own)
        if k is not None and relative_gap(actual, [k * v for v in own]) <= TOLERANCE:
            # The float32 sums of this hand-in's own micro-batch gradients, up to a factor:
            # right when that factor makes them the window's mean gradient. The loss may be
            # computed in bf16 or float32, divided before backward or the sums after: each
            # rounds bf16 gradients a little differently, by ~1e-3, far below the slips.
            scaled = [k * v for v in own]
            if relative_gap(scaled, wanted) <= SCALE_TOLERANCE:
                judge_instruments(outputs, setting)
                _judge_again(outputs, setting)
                return
            _judge_scale(_projection(scaled, wanted), n, micro, setting)
        if n > 1 and relative_gap(actual, outputs.get("own_never_cleared")) <= TOLERANCE:
            raise Failure(
                "Your sums count the early micro-batches again and again: .grad was never "
                "cleared, so each addition added the running .grad, not the new micro-batch's "
                f"gradient. Set p.grad = None after adding it to the float32 sum {setting}.",
                "grad_not_cleared",
            )
        # bf16's rounding moves a sum by percents, not more: a bigger gap is another slip
        # (one micro-batch's gradient alone is bf16-representable too)
        if _bf16_representable(actual) and n > 1 and relative_gap(actual, wanted) < 0.25:
            raise Failure(
                "Your float32 sums hold only values a bf16 number can represent: the running "
                "sum was rounded to bf16 on the way (gradients left to add up in the bf16 "
                ".grad, or a bf16 sum converted at the end). Add each micro-batch's .grad into "
                f"the float32 buffers, then clear .grad before the next backward {setting}.",
                "accumulated_in_bf16",
            )
        raise Failure(
            f"Your sums differ from the float32 sums of the micro-batches' bf16 gradients by "
            f"{relative_gap(actual, wanted):.1e} (relative) {setting}. Each micro-batch's "
            ".grad should be added once into its float32 buffer, and cleared before the next "
            "backward."
        )
