"""Module 6's question ``scaled_hyperparameters``: the hyperparameters tuned at one batch
size, moved to another.

The student writes ``scaled_hyperparameters(base_lr, base_batch, new_batch, optimizer_kind,
warmup_steps, betas=..., eps=..., weight_decay=None)`` by the rules the notebook states: the
learning rate scales by ``k = new_batch / base_batch`` for SGD and by ``sqrt(k)`` for Adam and
AdamW, the warm-up keeps its samples (a ceiling, in integers), Adam's ``1 - beta`` scales by
``k`` and its ``eps`` divides by ``sqrt(k)``, AdamW's decoupled weight decay scales by
``sqrt(k)`` (SGD's and Adam's, a term of the loss, stays), and bad input is refused with a
ValueError. It is arithmetic, judged
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
from coursekit.checks.module06.hyper_patterns import HYPER_MESSAGES, hyper_patterns
from coursekit.checks.question import Failure, Question, Rule
from coursekit.checks.registry import register
from coursekit.checks.side_effects import judge_repeated, repeated


def _hyper_call(spec) -> tuple[tuple, dict]:
    args = (spec["base_lr"], spec["base_batch"], spec["new_batch"], spec["kind"], spec["warmup"])
    kwargs = {}
    if "betas" in spec:
        kwargs["betas"] = tuple(spec["betas"])
    if "eps" in spec:
        kwargs["eps"] = spec["eps"]
    if "weight_decay" in spec:
        kwargs["weight_decay"] = spec["weight_decay"]
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
    if spec.get("weight_decay", 0) < 0:
        return f"weight_decay {spec['weight_decay']} would grow the weights (it must be 0 or more)"
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
                f"with k = {new / base:.3g}, k(1 - beta{index + 1}) = {shrink:.3g} is above 1, so "
                f"the scaled beta{index + 1} would be {1 - shrink:.3g}, outside [0, 1): the rule "
                "does not apply that far"
            )
    return None


def _read_hyperparameters(returned) -> dict:
    if not isinstance(returned, Mapping):
        return {"returned": describe(returned)}
    values: dict = {}
    for key in ("lr", "eps", "weight_decay"):
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
    rules = (
        Rule(
            "$k$ = `new_batch / base_batch`, a true ratio",
            "the specs a rule accepts; ratios below 1 and not whole",
            ("ratio_inverted", "ratio_truncated"),
            lambda spec: _hyper_refusal(spec) is None,
        ),
        Rule(
            '`"sgd"`: `lr = base_lr * k`.',
            'the specs with "sgd" that the rules accept',
            ("sqrt_for_sgd", "lr_not_scaled"),
            lambda spec: spec["kind"] == "sgd" and _hyper_refusal(spec) is None,
        ),
        Rule(
            '`"adam"` or `"adamw"`: `lr = base_lr * sqrt(k)`,',
            'the specs with "adam" or "adamw" that the rules accept',
            ("linear_for_adam",),
            lambda spec: spec["kind"] in ("adam", "adamw") and _hyper_refusal(spec) is None,
        ),
        Rule(
            "`betas = (1 - k * (1 - beta1), 1 - k * (1 - beta2))`",
            'the specs with "adam" or "adamw"',
            ("betas_not_scaled", "betas_scaled_wrong_way", "betas_divided_by_k", "betas_as_powers"),
            lambda spec: spec["kind"] in ("adam", "adamw"),
        ),
        Rule(
            "`eps = eps / sqrt(k)`",
            'the specs with "adam" or "adamw" that the rules accept',
            ("eps_not_scaled", "eps_scaled_wrong_way"),
            lambda spec: spec["kind"] in ("adam", "adamw") and _hyper_refusal(spec) is None,
        ),
        Rule(
            '`"adamw"` also scales a given `weight_decay` by `sqrt(k)`',
            'the specs with "adamw" and a weight decay',
            ("weight_decay_not_scaled", "weight_decay_scaled_by_k"),
            lambda spec: spec["kind"] == "adamw" and "weight_decay" in spec,
        ),
        Rule(
            '`"sgd"` and `"adam"` keep theirs',
            'the specs with "sgd" or "adam" and a weight decay',
            ("weight_decay_scaled_in_the_loss", "weight_decay_scaled_for_sgd"),
            lambda spec: spec["kind"] in ("sgd", "adam") and "weight_decay" in spec,
        ),
        Rule(
            "The warm-up keeps its length in samples: `ceil(warmup_steps * base_batch / "
            "new_batch)` steps, in integer arithmetic, so a warm-up never shrinks to 0 steps.",
            "the specs the rules accept; ceilings a float ratio gets wrong",
            (
                "warmup_not_rescaled",
                "warmup_scaled_up",
                "warmup_rounded_down",
                "warmup_float_rounding",
                "warmup_as_float",
            ),
            lambda spec: _hyper_refusal(spec) is None,
        ),
        Rule(
            'plus `"weight_decay"` when one is given.',
            "the specs with a weight decay, SGD's included",
            ("weight_decay_dropped",),
            lambda spec: "weight_decay" in spec and _hyper_refusal(spec) is None,
        ),
        Rule(
            "Raise `ValueError` for a batch below 1, a learning rate of 0 or less, a negative "
            "warm-up, an unknown `optimizer_kind`, a negative `weight_decay`",
            "the specs the rules refuse",
            ("bad_input_accepted", "wrong_exception", "batch_not_checked"),
            lambda spec: _hyper_refusal(spec) is not None,
        ),
        Rule(
            "or a scaled beta below 0 (then $k$ is too large for the rule).",
            'the specs with "adam" or "adamw": beta1 scaled to 0 exactly, and below 0',
            (
                "beta_range_not_checked",
                "only_beta1_checked",
                "betas_not_scaled_nor_checked",
                "beta_zero_refused",
            ),
            lambda spec: spec["kind"] in ("adam", "adamw"),
        ),
    )

    def public_specs(self):
        return [
            {"base_lr": 0.1, "base_batch": 256, "new_batch": 1024, "kind": "sgd", "warmup": 500},
            {"base_lr": 3e-4, "base_batch": 64, "new_batch": 256, "kind": "adam", "warmup": 1000},
            # k = 2.5: not a whole ratio; the warm-up's samples are not a whole number of steps
            # (and SGD's weight decay, a term of its loss, returned unchanged: rules 2 and 4)
            {
                "base_lr": 0.05,
                "base_batch": 48,
                "new_batch": 120,
                "kind": "sgd",
                "warmup": 101,
                "weight_decay": 1e-4,
            },
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
            # AdamW's decoupled weight decay: x sqrt(k) = x 2
            {
                "base_lr": 1e-3,
                "base_batch": 64,
                "new_batch": 256,
                "kind": "adamw",
                "warmup": 100,
                "weight_decay": 0.1,
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
            # SGD's weight decay is in the loss: returned, unchanged
            {
                "base_lr": 0.1,
                "base_batch": 128,
                "new_batch": 512,
                "kind": "sgd",
                "warmup": 20,
                "weight_decay": 5e-4,
            },
            # Adam's weight decay is in the loss: unchanged
            {
                "base_lr": 3e-4,
                "base_batch": 32,
                "new_batch": 128,
                "kind": "adam",
                "warmup": 50,
                "weight_decay": 0.01,
            },
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
            {
                "base_lr": 1e-3,
                "base_batch": 32,
                "new_batch": 64,
                "kind": "adamw",
                "warmup": 10,
                "weight_decay": -0.1,
            },
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
            if kind != "sgd" or rng.random() < 0.5:
                spec["weight_decay"] = rng.choice([0.01, 0.05, 0.1])
            specs.append(spec)
        return specs

    def run(self, fn, spec):
        args, kwargs = _hyper_call(spec)
        if _hyper_refusal(spec) is not None:
            outputs = refused(fn, args, kwargs)
            if "returned" in outputs and spec["kind"] != "sgd":
                # what it returned, read: unscaled betas say why nothing was refused
                try:
                    outputs["values"] = _read_hyperparameters(fn(*args, **kwargs)).get("values")
                except Exception:  # the refusal judged above says what matters
                    pass
            return outputs
        return repeated(lambda spec: _read_hyperparameters(fn(*args, **kwargs)), spec)

    def reference(self):
        return scaled_hyperparameters

    def judge(self, spec, outputs, expected):
        base, new, warmup, kind = (spec[k] for k in ("base_batch", "new_batch", "warmup", "kind"))
        named = ("betas", "eps", "weight_decay")
        given = "".join(f", {k} {spec[k]}" for k in named if k in spec)
        setting = (
            f"(base_lr {spec['base_lr']}, batch {base} -> {new}, optimizer_kind {kind!r}, "
            f"warmup_steps {warmup}{given})"
        )
        reason = _hyper_refusal(spec)
        if reason is not None:
            returned = outputs.get("values")
            betas = returned.get("betas") if isinstance(returned, dict) else None
            given = [float(b) for b in spec.get("betas", (0.9, 0.999))]
            if "raised" not in outputs and reason.startswith("with k") and betas == given:
                k = new / base
                why = HYPER_MESSAGES["betas_not_scaled"].format(k=k)
                raise Failure(
                    f"betas are {show(betas)} {setting}: {why}. Here that takes a beta below 0 "
                    f"({reason}), so the rule refuses: raise a ValueError.",
                    "betas_not_scaled",
                )
            judge_refusal(outputs, reason, setting)
            return
        judge_repeated(outputs, setting)
        values = outputs.get("values")
        if not isinstance(values, dict):
            raise Failure(f"Return a dict {setting}; got {outputs.get('returned')}.")
        wanted = expected["values"]
        keys = ["lr", "warmup_steps"] + (["betas", "eps"] if kind != "sgd" else [])
        keys += ["weight_decay"] if "weight_decay" in spec else []
        missing = [key for key in keys if key not in values]
        if missing == ["weight_decay"]:
            raise Failure(
                f"Your dict has no 'weight_decay' {setting}, yet one was given: return it "
                f"whenever it is given (rule 4), for {kind!r} too.",
                "weight_decay_dropped",
            )
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
        patterns = hyper_patterns(spec)
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
            if key in ("lr", "eps", "weight_decay") and not isinstance(got, float):
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
            why = HYPER_MESSAGES[name].format(**details, want=want, got=got, to_zero=zero)
            raise Failure(f"{said}: {why}. Want {show(want)}.", name)
