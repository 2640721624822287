"""``plan_accumulation``: the micro-batch sizes that reach a target batch within a budget.

Arithmetic: any split that reaches the target exactly with the fewest micro-batches, none
over the maximum, is right; when not even one sample fits, the function must raise a
ValueError. Each slip is named by what the sizes show: the remainder dropped, every size
rounded up, more micro-batches than needed, one over the budget, fractional sizes. Fixed
hidden cases catch searches that skip a count and plans remembered between calls.
"""

from __future__ import annotations

import math

from coursekit.budget import plan_accumulation
from coursekit.checks.module05.common import MODULE
from coursekit.checks.question import Failure, Question, Rule, empty_message, says_something
from coursekit.checks.registry import register
from coursekit.checks.side_effects import judge_repeated, repeated


def _reference_plan(target_batch: int, max_micro_batch: int) -> list[int]:
    return list(plan_accumulation(target_batch, max_micro_batch).sizes)


@register
class PlanAccumulation(Question):
    name = "plan_accumulation"
    module = MODULE
    points = 2
    rules = (
        Rule(
            "the micro-batch sizes of one window that add up to `target_batch` exactly",
            "the specs where something fits; targets that the micro-batch does not divide",
            (
                "remainder_dropped",
                "rounded_up",
                "sizes_not_whole",
                "rounded_half_to_even",
                "stale_plan_cache",
                "sizes_in_default_argument",
            ),
            lambda spec: spec["max_micro"] >= 1,
        ),
        Rule(
            "with the fewest micro-batches",
            "the specs where something fits",
            (
                "too_many_micro_batches",
                "search_skips_candidates",
                "divisor_search",
                "off_by_one_search",
            ),
            lambda spec: spec["max_micro"] >= 1,
        ),
        Rule(
            "and none larger than `max_micro_batch`.",
            "the specs where something fits",
            ("over_budget",),
            lambda spec: spec["max_micro"] >= 1,
        ),
        Rule(
            "When `max_micro_batch` is below 1, nothing fits and no number of steps helps: raise "
            "a `ValueError` that says so.",
            "the specs with max_micro_batch 0 or below",
            (
                "nothing_fits_not_refused",
                "wrong_exception",
                "only_zero_refused",
                "message_too_short",
            ),
            lambda spec: spec["max_micro"] < 1,
        ),
    )

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
            return self._answer(fn, spec)
        return repeated(lambda spec: self._answer(fn, spec), spec)

    @staticmethod
    def _answer(fn, spec):
        if spec["max_micro"] < 1:
            try:
                returned = fn(spec["target"], spec["max_micro"])
            except NotImplementedError:  # the stub as handed out: not attempted
                raise
            except Exception as error:  # the refusal is what this spec checks
                return {
                    "raised": type(error).__name__,
                    "value_error": isinstance(error, ValueError),
                    "message": str(error).split("\n")[0][:200],
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
        judge_repeated(outputs, setting)
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
            if not says_something(outputs.get("message")):
                raise empty_message(setting)
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
