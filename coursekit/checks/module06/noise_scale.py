"""Module 6's question ``noise_scale``: the gradient noise scale from one accumulation window.

The student writes ``noise_scale(model, loss_fn, micro_batches)``: k micro-batches of b
samples, accumulated as in training, give k small-batch gradients and one big-batch gradient
(B = k * b), hence the two-batch estimates of |G|^2, tr(Sigma) and B_simple. The oracle is
not another accumulation but per-sample gradients (torch.func, float64). A wrong answer is
named when it matches what a known mistake computes from those same per-sample gradients,
never by guessing from the size of the gap.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math

import torch
from torch import nn

from coursekit.checks.instruments import as_float, weights_of
from coursekit.checks.module06.common import MODULE
from coursekit.checks.module06.noise_messages import MESSAGES
from coursekit.checks.question import Failure, Question, Rule
from coursekit.checks.registry import register
from coursekit.checks.side_effects import Kept, judge_left_behind
from coursekit.data import make_classification, make_regression, split_micro_batches
from coursekit.models import tiny_mlp
from coursekit.noise_scale import (
    NoiseEstimate,
    estimate_from_per_sample,
    per_sample_gradients_float64,
)

KEYS = ("gradient_sq_norm", "trace", "b_simple")
HIDDEN = 8  # the hidden layer's width when depth is 2
# The problems are float32. A float32 gradient carries ~1e-7 relative rounding, and the
# estimates subtract terms such as B |G_B|^2 and b |G_b|^2, so the error is relative to those
# terms, not to the (possibly much smaller) difference. The correct styles' largest error
# seen is ~2e-7 of the terms (seeds 0..14), so 1e-4 leaves a margin of ~600x, and it is far
# below what any mistake changes (a factor such as k, b, a square root, or a missing
# correction); a mistake is named only where it moves the values beyond the tolerance.
TOLERANCE = 1e-4

_LOSSES = {"mse": "MSE", "cross_entropy": "cross-entropy"}


@contextlib.contextmanager
def _torch_state_kept():
    """Run the block, then give torch's default dtype and grad mode back as they were.

    The problem is built in float32 whatever the default: a hand-in that calls
    ``torch.set_default_dtype(torch.float64)`` (in any cell) would otherwise draw other
    initial weights than the judge, in its own process, and be marked down for a right
    answer. What the hand-in's function changes is undone after it, and reported.
    """
    dtype, grad_enabled = torch.get_default_dtype(), torch.is_grad_enabled()
    try:
        torch.set_default_dtype(torch.float32)
        torch.set_grad_enabled(True)
        yield
    finally:
        torch.set_default_dtype(dtype)
        torch.set_grad_enabled(grad_enabled)


def _problem(spec) -> tuple[nn.Module, nn.Module, list]:
    """The spec's model (float32), loss and micro-batches, all from its seed."""
    k, b, features = spec["micro_batches"], spec["micro_batch_size"], spec["in_features"]
    outputs = spec["outputs"]
    if spec["loss"] == "mse":
        inputs, targets = make_regression(k * b, features, outputs, noise=0.5, seed=spec["seed"])
        loss_fn = nn.MSELoss()
    else:
        inputs, targets = make_classification(k * b, features, outputs, seed=spec["seed"])
        loss_fn = nn.CrossEntropyLoss()
    model = tiny_mlp(features, HIDDEN, outputs, depth=spec["depth"], seed=spec["seed"] + 1)
    if spec.get("frozen"):  # a frozen first layer, as in fine-tuning: no gradient, no estimate
        next(model.parameters()).requires_grad_(False)
    return model, loss_fn, split_micro_batches(inputs, targets, b)


def _reference_noise_scale(model, loss_fn, micro_batches) -> dict[str, float]:
    return estimate_from_per_sample(model, loss_fn, micro_batches).as_dict()


class _Value:
    """An estimate (|G|^2, tr Sigma, B_simple) with the size of the terms it was computed
    from: rounding is relative to those (see TOLERANCE)."""

    def __init__(self, g: float, s: float, g_terms: float, s_terms: float, b_simple=None):
        self.g, self.s = g, s
        self.g_terms, self.s_terms = max(g_terms, abs(g)), max(s_terms, abs(s))
        self.b_simple = NoiseEstimate(g, s).b_simple if b_simple is None else b_simple

    def close(self, got: dict[str, float]) -> dict[str, bool]:
        """Which of the student's three values lie within the tolerance of this one."""
        b_got = got["b_simple"]
        if not (math.isfinite(self.b_simple) and math.isfinite(b_got) and self.g != 0.0):
            b_close = b_got == self.b_simple
        else:
            # b = S / G moves by (dS - b dG) / G when S and G move by dS and dG
            slack = TOLERANCE * (self.s_terms + abs(self.b_simple) * self.g_terms) / abs(self.g)
            b_close = abs(b_got - self.b_simple) <= slack
        return {
            "gradient_sq_norm": abs(got["gradient_sq_norm"] - self.g) <= TOLERANCE * self.g_terms,
            "trace": abs(got["trace"] - self.s) <= TOLERANCE * self.s_terms,
            "b_simple": b_close,
        }

    def matches(self, got: dict[str, float]) -> bool:
        return all(self.close(got).values())

    def as_outputs(self) -> dict[str, float]:
        return {"gradient_sq_norm": self.g, "trace": self.s, "b_simple": self.b_simple}


def _two_batch(small: float, big: float, b: float, big_b: float) -> _Value:
    """The paper's formulas, unguarded (a mistake may feed them anything)."""
    return _Value(
        (big_b * big - b * small) / (big_b - b),
        (small - big) / (1 / b - 1 / big_b),
        (big_b * big + b * small) / abs(big_b - b),
        (small + big) / abs(1 / b - 1 / big_b),
    )


def _candidates(spec) -> tuple[_Value, list[tuple[str, _Value]]]:
    """The right estimate and each mistake's, from float64 per-sample gradients."""
    return _candidates_of(json.dumps(spec, sort_keys=True))


# a pure function of the spec: the grader judges many hand-ins on the same specs
@functools.lru_cache(maxsize=64)
def _candidates_of(spec_json: str) -> tuple[_Value, list[tuple[str, _Value]]]:
    spec = json.loads(spec_json)
    k, b = spec["micro_batches"], spec["micro_batch_size"]
    big_b = k * b
    model, loss_fn, micro_batches = _problem(spec)
    inputs = torch.cat([x for x, _ in micro_batches])
    targets = torch.cat([y for _, y in micro_batches])
    rows = per_sample_gradients_float64(model, loss_fn, inputs, targets)
    micro = rows.reshape(k, b, -1).mean(dim=1)  # g_i
    sq = micro.pow(2).sum(dim=1)  # |g_i|^2
    small, big = float(sq.mean()), float(micro.mean(dim=0).pow(2).sum())
    right = _two_batch(small, big, b, big_b)
    partial = micro.cumsum(dim=0).pow(2).sum(dim=1)  # |g_1 + ... + g_i|^2
    unsquared_small = float(sq.sqrt().mean())
    biased = b * (small - big)  # b times the variance of the g_i, divided by k, not k - 1
    uncorrected_s = b * small
    candidates = [
        ("big_norm_as_true_norm", _Value(big, uncorrected_s, big, uncorrected_s)),
        ("big_norm_as_true_norm", _Value(big, right.s, big, right.s_terms)),
        ("big_norm_as_true_norm", _Value(right.g, uncorrected_s, right.g_terms, uncorrected_s)),
        ("partial_sums_not_micro_batches", _two_batch(float(partial.mean()), big, b, big_b)),
        (
            "partial_sums_not_micro_batches",
            _two_batch(float(partial.mean()) / k**2, big, b, big_b),
        ),
        ("big_gradient_not_averaged", _two_batch(small, k**2 * big, b, big_b)),
        ("norm_not_squared", _two_batch(unsquared_small, math.sqrt(big), b, big_b)),
        ("norm_not_squared", _two_batch(unsquared_small, big, b, big_b)),
        ("norm_not_squared", _two_batch(small, math.sqrt(big), b, big_b)),
        ("batch_sizes_swapped", _two_batch(small, big, big_b, b)),
        ("counts_not_sizes", _two_batch(small, big, 1, k)),
        ("mean_over_k_minus_1", _two_batch(small * k / (k - 1), big, b, big_b)),
        ("mean_over_k_minus_1", _two_batch(small, big * (k / (k - 1)) ** 2, b, big_b)),
        (
            "mean_over_k_minus_1",
            _two_batch(small * k / (k - 1), big * (k / (k - 1)) ** 2, b, big_b),
        ),
        ("one_micro_batch_only", _two_batch(float(sq[0]), big, b, big_b)),
        ("one_micro_batch_only", _two_batch(float(sq[-1]), big, b, big_b)),
        (
            "ratio_inverted",
            _Value(
                right.g,
                right.s,
                right.g_terms,
                right.s_terms,
                NoiseEstimate(right.s, right.g).b_simple,
            ),
        ),
        (
            "variance_not_unbiased",
            _Value(big - biased / big_b, biased, big + abs(biased) / big_b, b * (small + big)),
        ),
        (
            "big_gradient_from_last_micro_batch",
            _two_batch(small, float(sq[-1]) / k**2, b, big_b),
        ),
    ]
    if spec.get("frozen"):  # every parameter's gradient, the frozen one's too
        model.requires_grad_(True)
        every = per_sample_gradients_float64(model, loss_fn, inputs, targets)
        every_micro = every.reshape(k, b, -1).mean(dim=1)
        candidates.append(
            (
                "frozen_parameter_included",
                _two_batch(
                    float(every_micro.pow(2).sum(dim=1).mean()),
                    float(every_micro.mean(dim=0).pow(2).sum()),
                    b,
                    big_b,
                ),
            )
        )
    if b != 2:  # len() of the (inputs, targets) pair is 2, whatever the batch
        candidates += [
            ("batch_size_from_pair", _two_batch(small, big, 2, 2 * k)),
            ("batch_size_from_pair", _two_batch(small, big, b, 2)),
        ]
    return right, candidates


def _setting(spec) -> str:
    k, b = spec["micro_batches"], spec["micro_batch_size"]
    layers = "a linear model" if spec["depth"] == 1 else "a 2-layer MLP"
    frozen = ", its first weight frozen" if spec.get("frozen") else ""
    return f"({k} micro-batches of {b} samples, {_LOSSES[spec['loss']]} loss on {layers}{frozen})"


@register
class NoiseScale(Question):
    name = "noise_scale"
    module = MODULE
    points = 3
    # coursekit code that answers it under other names (flagged when called for it)
    library_answers = (
        "coursekit.noise_scale.estimate_from_per_sample",
        "coursekit.noise_scale.estimate_from_micro_batches",
    )
    rules = (
        Rule(
            "For each micro-batch $i$, its own mean gradient $g_i$ and $|g_i|^2$: the sum over "
            "all parameters that require grad (a frozen one gets no gradient) of the squared "
            "entries.",
            "every spec; one with a frozen parameter",
            (
                "partial_sums_not_micro_batches",
                "norm_not_squared",
                "first_micro_batch_norm_only",
                "frozen_parameter_included",
                "frozen_parameter_crashes",
                "one_micro_batch_only",
            ),
        ),
        Rule(
            "The window's gradient $G_B$: the mean of the $g_i$",
            "every spec",
            (
                "big_gradient_not_averaged",
                "big_gradient_from_last_micro_batch",
                "big_norm_as_true_norm",
            ),
        ),
        Rule(
            r"$|G|^2$ and $\operatorname{tr}\Sigma$ from the two formulas above",
            "every spec (2 to 6 micro-batches of 2 to 8 samples)",
            (
                "batch_sizes_swapped",
                "counts_not_sizes",
                "ratio_inverted",
                "variance_not_unbiased",
                "mean_over_k_minus_1",
                "batch_size_from_pair",
            ),
        ),
        Rule(
            "leave every parameter's `.grad` as you found it: `None`.",
            "every spec",
            ("grads_left_behind", "zero_grad_set_to_zero"),
        ),
    )

    def public_specs(self):
        return [
            _spec(1, "mse", 2, 6, 1, k=4, b=8),
            _spec(2, "cross_entropy", 2, 5, 3, k=3, b=6),
            _spec(3, "mse", 1, 4, 2, k=6, b=2),
            _spec(4, "cross_entropy", 1, 8, 4, k=2, b=16),
            # a frozen parameter has no gradient: the estimate is over the trainable ones
            _spec(5, "mse", 2, 5, 2, k=3, b=4, frozen=True),
        ]

    def hidden_specs(self, rng):
        specs = [
            # fixed edge cases: the smallest window there is, k = 2 micro-batches of 1 sample
            _spec(11, "mse", 2, 3, 1, k=2, b=1),
            _spec(12, "cross_entropy", 1, 4, 2, k=2, b=1),
            _spec(13, "cross_entropy", 2, 4, 3, k=4, b=3, frozen=True),
        ]
        for _ in range(3):
            loss = rng.choice(["mse", "cross_entropy"])
            outputs = rng.randint(1, 3) if loss == "mse" else rng.randint(2, 5)
            specs.append(
                _spec(
                    rng.randrange(10**6),
                    loss,
                    rng.choice([1, 2]),
                    rng.randint(2, 10),
                    outputs,
                    k=rng.randint(2, 6),
                    b=rng.randint(2, 16),
                )
            )
        return specs

    def run(self, fn, spec):
        with _torch_state_kept():
            model, loss_fn, micro_batches = _problem(spec)
            start = weights_of(model)
            outputs = self._call(fn, model, loss_fn, micro_batches)
            outputs["weights_moved"] = weights_of(model) != start
            # the same window again, on the same model, as a caller measuring twice would:
            # a function of its arguments gives the same numbers
            clean = not outputs["grad_left"] and outputs["input_changed"] is None
            if isinstance(outputs.get("values"), dict) and clean:
                try:
                    outputs["again"] = self._call(fn, model, loss_fn, micro_batches).get("values")
                except Exception:  # a second call that raises gives no numbers to compare
                    outputs["again"] = "raised"
        return outputs

    @staticmethod
    def _call(fn, model, loss_fn, micro_batches) -> dict:
        kept = Kept((model,), micro_batches=micro_batches)
        returned = fn(model, loss_fn, micro_batches)
        outputs = {
            **kept.report(),
            "grad_left": any(p.grad is not None for p in model.parameters()),
        }
        if not isinstance(returned, dict):
            outputs["returned"] = f"{type(returned).__name__}: {repr(returned)[:160]}"
            return outputs
        outputs["values"] = {key: as_float(returned.get(key)) for key in KEYS}
        return outputs

    def reference(self):
        return _reference_noise_scale

    def judge(self, spec, outputs, expected):
        setting = _setting(spec)
        values = outputs.get("values")
        if not isinstance(values, dict):
            raise Failure(
                f"Return a dict with the keys {', '.join(KEYS)}; got {outputs.get('returned')} "
                f"{setting}."
            )
        got = {}
        for key in KEYS:
            value = values.get(key)
            if not isinstance(value, float):
                raise Failure(f"{key} must be a number (a float); got {value} {setting}.")
            got[key] = value
        if outputs.get("weights_moved") is True:
            raise Failure(
                "Your function changed the model's weights: measuring the noise scale only "
                "reads gradients; no optimizer step belongs in it."
            )
        judge_left_behind(outputs, setting)
        right, candidates = _candidates(spec)
        close = right.close(got)
        if all(close.values()):
            self._judge_side_effects(outputs, setting)
            again = outputs.get("again")
            if (
                again == "raised"
                or isinstance(again, dict)
                and not all(
                    right.close(
                        {k: v if isinstance(v, float) else math.nan for k, v in again.items()}
                    ).values()
                )
            ):
                raise Failure(
                    "Your numbers are right the first time, but called again on the same model "
                    "and micro-batches your function "
                    f"{'raised' if again == 'raised' else 'gave other numbers'} {setting}: "
                    "it keeps "
                    "something from one call to the next (buffers or sums kept in a global or "
                    "on the model, never reset). Start every call from zero.",
                    "state_across_calls",
                )
            return
        # named only when one mistake alone matches: two that fit the same numbers here
        # (a coincidence of this draw) would make either name a guess
        found = {
            mistake
            for mistake, value in candidates
            if value.matches(got) and not right.matches(value.as_outputs())
        }
        if len(found) == 1:
            mistake = found.pop()
            raise Failure(f"{MESSAGES[mistake]} {setting}", mistake)
        wrong = [
            f"{key} = {got[key]:.6g}, not {expected['values'][key]:.6g}"
            for key in KEYS
            if not close[key]
        ]
        raise Failure(
            f"Your estimate differs from the per-sample gradients' ({'; '.join(wrong)}) "
            f"{setting}. Per micro-batch i: its own mean gradient g_i (the increment of .grad, "
            "times k); G_B = the mean of the g_i; |G_b|^2 = mean of |g_i|^2 with b = the "
            "micro-batch size, |G_B|^2 with B = k * b; then |G|^2 = (B |G_B|^2 - b |G_b|^2) / "
            "(B - b), tr(Sigma) = (|G_b|^2 - |G_B|^2) / (1/b - 1/B), b_simple = tr(Sigma) / "
            "|G|^2."
        )

    @staticmethod
    def _judge_side_effects(outputs, setting):
        if outputs.get("grad_left") is True:
            raise Failure(
                f"The numbers are right, but your function left .grad set on the model "
                f"{setting}: the next training step would add its gradient to yours. Leave "
                "every .grad as you found it (here None): model.zero_grad(set_to_none=True) "
                "at the end, or use torch.autograd.grad.",
                "grads_left_behind",
            )


def _spec(seed, loss, depth, in_features, outputs, k, b, frozen=False) -> dict:
    return {
        **({"frozen": True} if frozen else {}),
        "seed": seed,
        "loss": loss,
        "depth": depth,
        "in_features": in_features,
        "outputs": outputs,
        "micro_batches": k,
        "micro_batch_size": b,
    }
