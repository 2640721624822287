"""Module 6's question ``scaled_hyperparameters``: the hyperparameters tuned at one batch
size, moved to another.

The student writes ``scaled_hyperparameters(base_lr, base_batch, new_batch, optimizer_kind,
warmup_steps, betas=..., eps=...)`` by the rules the notebook states: the learning rate scales
by ``k = new_batch / base_batch`` for SGD and by ``sqrt(k)`` for Adam and AdamW, the warm-up
keeps its samples (a ceiling, in integers), Adam's ``1 - beta`` scales by ``k`` and its ``eps``
divides by ``sqrt(k)``, and bad input is refused with a ValueError. It is arithmetic, judged
exactly (to float rounding) against :func:`coursekit.batch_scaling.scaled_hyperparameters`,
key by key. A mistake is named only when the hand-in's value equals what the reference computes
with that mistake built in, and differs from the right value; where two mistakes give the same
value here, no name is given and the message says what the value should be.
"""

from __future__ import annotations

import itertools
import math
import numbers
from collections.abc import Mapping

from coursekit.batch_scaling import OPTIMIZER_KINDS, scaled_hyperparameters
from coursekit.checks.module06.common import (
    MODULE,
    TOLERANCE,
    as_number,
    describe,
    is_close,
    is_whole,
    judge_refusal,
    only_name,
    refused,
    show,
)
from coursekit.checks.question import Failure, Question
from coursekit.checks.registry import register

_HYPER_MESSAGES = {
    "linear_for_adam": (
        "that is base_lr x k, SGD's linear rule. For {kind} the square-root rule scales the "
        "learning rate by sqrt(k) = {sqrt_k:.6g}"
    ),
    "sqrt_for_sgd": (
        "that is base_lr x sqrt(k), the square-root rule for Adam. For SGD the linear rule "
        "scales the learning rate by k = {k:.6g}"
    ),
    "ratio_inverted": (
        "your k is base_batch / new_batch = {inverse:.6g}. k is new_batch / base_batch = "
        "{k:.6g}: a larger batch gets a larger learning rate"
    ),
    "ratio_truncated": (
        "your k is new_batch // base_batch = {truncated}, an integer division. k is the true "
        "ratio {new} / {base} = {k:.6g}"
    ),
    "lr_not_scaled": "that is base_lr unchanged. Rule 2 scales it with the batch",
    "warmup_not_rescaled": (
        "that is the old count unchanged. With {new} samples per step instead of {base}, "
        "{warmup} steps warm up over {new_samples} samples instead of {old_samples}. Keep the "
        "samples: ceil({warmup} x {base} / {new})"
    ),
    "warmup_scaled_up": (
        "that is the old count times k. Each step now takes k times the samples, so the same "
        "samples take k times fewer steps: ceil({warmup} x {base} / {new})"
    ),
    "warmup_rounded_down": (
        "that is {warmup} x {base} / {new} rounded down, a warm-up over fewer samples than "
        "before{to_zero}. Round up, in integers: -(-warmup_steps * base_batch // new_batch)"
    ),
    "warmup_float_rounding": (
        "that is math.ceil of a float ratio. {warmup} x {base} / {new} is exactly {want}, but "
        "the batches' ratio as a float carries a rounding error, and math.ceil turns a "
        "result a hair above {want} into {got}. Compute in integers: "
        "-(-warmup_steps * base_batch // new_batch)"
    ),
    "betas_not_scaled": (
        "those are the betas unchanged. With a batch k = {k:.6g} times larger, each step "
        "stands for k times the samples, so each moving average forgets k times as much per "
        "step: 1 - beta becomes k(1 - beta)"
    ),
    "betas_scaled_wrong_way": (
        "the rule scales 1 - beta, not beta, and by k, not 1/k: "
        "beta -> 1 - k(1 - beta) with k = {k:.6g}"
    ),
    "betas_as_powers": (
        "that is beta**k, which decays each average per sample as k steps at the old batch "
        "did. A sensible rule, but not the square-root rule this question states: "
        "1 - beta becomes k(1 - beta) (the two agree only while k(1 - beta) is small)"
    ),
    "eps_not_scaled": (
        "that is eps unchanged. The square-root rule divides it by sqrt(k) = {sqrt_k:.6g}"
    ),
    "eps_scaled_wrong_way": (
        "that is eps times sqrt(k). The square-root rule divides it by sqrt(k) = {sqrt_k:.6g}"
    ),
}


def _hyper_call(spec) -> tuple[tuple, dict]:
    args = (spec["base_lr"], spec["base_batch"], spec["new_batch"], spec["kind"], spec["warmup"])
    kwargs = {}
    if "betas" in spec:
        kwargs["betas"] = tuple(spec["betas"])
    if "eps" in spec:
        kwargs["eps"] = spec["eps"]
    return args, kwargs


def _hyper_refusal(spec) -> str | None:
    """Why rule 5 refuses ``spec``, or None when it does not."""
    base, new = spec["base_batch"], spec["new_batch"]
    if spec["base_lr"] <= 0:
        return f"base_lr {spec['base_lr']} is not a learning rate (it must be above 0)"
    for name, batch in (("base_batch", base), ("new_batch", new)):
        if batch < 1:
            return f"{name} {batch} is not a batch (it must be at least 1)"
    if spec["warmup"] < 0:
        return f"a warm-up of {spec['warmup']} steps is not a warm-up (it must be 0 or more)"
    if spec["kind"] not in OPTIMIZER_KINDS:
        return (
            f"{spec['kind']!r} is none of the kinds the rules cover ({', '.join(OPTIMIZER_KINDS)})"
        )
    if spec["kind"] == "sgd":
        return None
    for index, beta in enumerate(spec.get("betas", (0.9, 0.999))):
        shrink = new / base * (1 - beta)
        if shrink > 1:
            return (
                f"k(1 - beta{index + 1}) = {shrink:.3g} is above 1, so the scaled beta{index + 1} "
                f"would be {1 - shrink:.3g}, outside [0, 1): the rule does not apply that far"
            )
    return None


def _read_hyperparameters(returned) -> dict:
    if not isinstance(returned, Mapping):
        return {"returned": describe(returned)}
    values: dict = {}
    for key in ("lr", "eps"):
        if key in returned:
            number = as_number(returned[key])
            values[key] = repr(returned[key])[:80] if number is None else number
    if "warmup_steps" in returned:
        warmup = returned["warmup_steps"]
        is_int = isinstance(warmup, numbers.Integral) and not isinstance(warmup, bool)
        values["warmup_steps"] = int(warmup) if is_int else repr(warmup)[:80]
    if "betas" in returned:
        betas = returned["betas"]
        try:
            # at most three: two betas and proof of a third (an endless generator stops here)
            first = list(itertools.islice(betas, 3)) if not isinstance(betas, str) else [None]
            numbers_read = [as_number(b) for b in first]
        except TypeError:
            numbers_read = [None]
        valid = len(numbers_read) == 2 and None not in numbers_read
        values["betas"] = numbers_read if valid else repr(betas)[:80]
    return {"values": values}


def _hyper_patterns(spec) -> dict[str, dict[str, list]]:
    """Each output's known wrong values, by mistake name (values equal to the right one are
    dropped when compared)."""
    lr, base, new, warmup = spec["base_lr"], spec["base_batch"], spec["new_batch"], spec["warmup"]
    k, inverse, truncated = new / base, base / new, new // base
    betas, eps = spec.get("betas", (0.9, 0.999)), spec.get("eps", 1e-8)
    if spec["kind"] == "sgd":
        lrs = {
            "sqrt_for_sgd": [lr * math.sqrt(k)],
            "ratio_inverted": [lr * inverse],
            "ratio_truncated": [lr * truncated],
        }
    else:
        lrs = {
            "linear_for_adam": [lr * k],
            "ratio_inverted": [lr * math.sqrt(inverse)],
            "ratio_truncated": [lr * math.sqrt(truncated)],
        }
    lrs["lr_not_scaled"] = [lr]
    return {
        "lr": lrs,
        "warmup_steps": {
            "warmup_not_rescaled": [warmup],
            "warmup_scaled_up": [-(-warmup * new // base), warmup * new // base],
            "warmup_rounded_down": [warmup * base // new],
            "warmup_float_rounding": [math.ceil(warmup / k), math.ceil(warmup * inverse)],
        },
        "betas": {
            "betas_not_scaled": [list(betas)],
            "betas_scaled_wrong_way": [[b * k for b in betas], [1 - (1 - b) / k for b in betas]],
            "betas_as_powers": [[b**k for b in betas]],
        },
        "eps": {"eps_not_scaled": [eps], "eps_scaled_wrong_way": [eps * math.sqrt(k)]},
    }


def _same(key: str, got, want) -> bool:
    if key == "warmup_steps":
        return got == want
    if key == "betas":  # compare 1 - beta, the quantity the rule scales
        return all(
            abs(g - w) <= TOLERANCE * abs(1 - w) + 1e-15 for g, w in zip(got, want, strict=True)
        )
    return is_close(got, want)


@register
class ScaledHyperparameters(Question):
    name = "scaled_hyperparameters"
    module = MODULE
    points = 2

    def public_specs(self):
        return [
            {"base_lr": 0.1, "base_batch": 256, "new_batch": 1024, "kind": "sgd", "warmup": 500},
            {"base_lr": 3e-4, "base_batch": 64, "new_batch": 256, "kind": "adam", "warmup": 1000},
            # k = 2.5: not a whole ratio; the warm-up's samples are not a whole number of steps
            {"base_lr": 0.05, "base_batch": 48, "new_batch": 120, "kind": "sgd", "warmup": 101},
            # k = 16 with a short warm-up: rounded down it would vanish
            {
                "base_lr": 1e-3,
                "base_batch": 32,
                "new_batch": 512,
                "kind": "adamw",
                "warmup": 6,
                "betas": [0.95, 0.999],
                "eps": 1e-6,
            },
            # a smaller batch: k = 1/4
            {
                "base_lr": 2e-3,
                "base_batch": 512,
                "new_batch": 128,
                "kind": "adam",
                "warmup": 300,
                "betas": [0.9, 0.98],
            },
            {"base_lr": 0.1, "base_batch": 256, "new_batch": 512, "kind": "rmsprop", "warmup": 10},
            {"base_lr": 0.1, "base_batch": 256, "new_batch": 0, "kind": "sgd", "warmup": 10},
        ]

    def hidden_specs(self, rng):
        specs = [
            # fixed edge cases, whatever the draw:
            # math.ceil on a float ratio lands one step high: 245 / (98 / 96) = 240.00...03
            {"base_lr": 0.1, "base_batch": 96, "new_batch": 98, "kind": "sgd", "warmup": 245},
            {"base_lr": 3e-4, "base_batch": 56, "new_batch": 328, "kind": "adam", "warmup": 1435},
            {"base_lr": 3e-4, "base_batch": 184, "new_batch": 168, "kind": "adamw", "warmup": 1785},
            # k(1 - beta1) = 1 exactly: beta1 becomes 0, still in [0, 1)
            {
                "base_lr": 1e-3,
                "base_batch": 64,
                "new_batch": 128,
                "kind": "adam",
                "warmup": 0,
                "betas": [0.5, 0.75],
            },
            # floor would give 0 steps of warm-up
            {"base_lr": 0.2, "base_batch": 64, "new_batch": 1024, "kind": "sgd", "warmup": 3},
            # a smaller batch that integer division makes k = 0
            {"base_lr": 0.1, "base_batch": 384, "new_batch": 96, "kind": "sgd", "warmup": 70},
            # a smaller batch with a remainder: a floor only when shrinking loses a step
            {"base_lr": 0.1, "base_batch": 1024, "new_batch": 192, "kind": "sgd", "warmup": 1597},
            # a tiny remainder (11 x 192 / 1024 = 2.06): a nudged float ceiling gives 2, not 3
            {"base_lr": 0.1, "base_batch": 192, "new_batch": 1024, "kind": "sgd", "warmup": 11},
            # refusals: beta1 scaled out of range; beta2 only; bad numbers; unknown kinds
            {"base_lr": 1e-3, "base_batch": 32, "new_batch": 512, "kind": "adam", "warmup": 10},
            {
                "base_lr": 1e-3,
                "base_batch": 32,
                "new_batch": 512,
                "kind": "adamw",
                "warmup": 10,
                "betas": [0.99, 0.9],
            },
            {"base_lr": 0.1, "base_batch": -32, "new_batch": 64, "kind": "sgd", "warmup": 10},
            {"base_lr": 0.1, "base_batch": 32, "new_batch": -64, "kind": "sgd", "warmup": 10},
            {"base_lr": 0.0, "base_batch": 32, "new_batch": 64, "kind": "adam", "warmup": 10},
            {"base_lr": 0.1, "base_batch": 32, "new_batch": 64, "kind": "sgd", "warmup": -5},
            {"base_lr": 0.1, "base_batch": 32, "new_batch": 64, "kind": "lamb", "warmup": 10},
        ]
        sizes = [16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024]
        for _ in range(4):
            base = rng.choice(sizes)
            new = rng.choice([s for s in sizes if s != base and base // 8 <= s <= base * 8])
            kind = rng.choice(OPTIMIZER_KINDS)
            spec = {
                "base_lr": rng.choice([0.1, 0.05, 3e-4, 1e-3]) * rng.choice([1, 2, 3]),
                "base_batch": base,
                "new_batch": new,
                "kind": kind,
                "warmup": rng.randint(1, 3000),
            }
            if kind != "sgd":
                # betas whose scaled values stay clear of 0 (this draw checks the arithmetic)
                fits = [
                    b
                    for b in ([0.9, 0.999], [0.9, 0.95], [0.8, 0.99], [0.95, 0.98], [0.98, 0.999])
                    if new / base * (1 - b[0]) <= 0.9
                ]
                spec["betas"] = rng.choice(fits)
                spec["eps"] = rng.choice([1e-8, 1e-6])
            specs.append(spec)
        return specs

    def run(self, fn, spec):
        args, kwargs = _hyper_call(spec)
        if _hyper_refusal(spec) is not None:
            return refused(fn, args, kwargs)
        return _read_hyperparameters(fn(*args, **kwargs))

    def reference(self):
        return scaled_hyperparameters

    def judge(self, spec, outputs, expected):
        base, new, warmup, kind = (spec[k] for k in ("base_batch", "new_batch", "warmup", "kind"))
        given = "".join(f", {k} {spec[k]}" for k in ("betas", "eps") if k in spec)
        setting = (
            f"(base_lr {spec['base_lr']}, batch {base} -> {new}, optimizer_kind {kind!r}, "
            f"warmup_steps {warmup}{given})"
        )
        reason = _hyper_refusal(spec)
        if reason is not None:
            judge_refusal(outputs, reason, setting)
            return
        values = outputs.get("values")
        if not isinstance(values, dict):
            raise Failure(f"Return a dict {setting}; got {outputs.get('returned')}.")
        wanted = expected["values"]
        keys = ["lr", "warmup_steps"] + (["betas", "eps"] if kind != "sgd" else [])
        missing = [key for key in keys if key not in values]
        if missing:
            raise Failure(
                f"Your dict has no {', '.join(map(repr, missing))} {setting}: for {kind!r} "
                f"return the keys {', '.join(map(repr, keys))} (rule 4)."
            )
        k = new / base
        details = {
            "kind": kind,
            "k": k,
            "sqrt_k": math.sqrt(k),
            "inverse": base / new,
            "truncated": new // base,
            "base": base,
            "new": new,
            "warmup": warmup,
            "old_samples": warmup * base,
            "new_samples": warmup * new,
        }
        patterns = _hyper_patterns(spec)
        for key in keys:
            got, want = values.get(key), wanted[key]
            if key == "warmup_steps" and not is_whole(got):
                raise Failure(
                    f"warmup_steps must be a whole number of steps (an int), got {got} "
                    f"{setting}. Use integer arithmetic: -(-warmup_steps * base_batch // "
                    "new_batch) is the ceiling.",
                    "not_an_int",
                )
            if key == "betas" and not (
                isinstance(got, list) and len(got) == 2 and all(isinstance(b, float) for b in got)
            ):
                raise Failure(f"betas must be two numbers (beta1, beta2), got {got} {setting}.")
            if key in ("lr", "eps") and not isinstance(got, float):
                raise Failure(f"{key} must be a number, got {got} {setting}.")
            if _same(key, got, want):
                continue
            name = only_name(
                {
                    mistake: any(_same(key, got, v) and not _same(key, v, want) for v in values_)
                    for mistake, values_ in patterns[key].items()
                }
            )
            said = f"{key} {'are' if key == 'betas' else 'is'} {show(got)} {setting}"
            if name is None:
                raise Failure(f"{said}; by the rules {key} should be {show(want)}.")
            zero = " (here none at all: 0 steps)" if got == 0 and warmup > 0 else ""
            why = _HYPER_MESSAGES[name].format(**details, want=want, got=got, to_zero=zero)
            raise Failure(f"{said}: {why}. Want {show(want)}.", name)
