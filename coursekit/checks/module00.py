"""Checks for module 0 (00_welcome): a warm-up that shows how checks work."""

from __future__ import annotations

import operator

from coursekit.checks.question import Failure, Question
from coursekit.checks.registry import register


@register
class EffectiveBatchSize(Question):
    name = "effective_batch_size"
    module = "00_welcome"
    points = 1
    hidden_tests = False

    def public_specs(self):
        return [
            {"micro_batch_size": m, "accum_steps": a, "world_size": w}
            for m, a, w in [(4, 8, 1), (3, 5, 2), (1, 1, 1), (16, 2, 4)]
        ]

    def run(self, fn, spec):
        answer = fn(spec["micro_batch_size"], spec["accum_steps"], spec["world_size"])
        try:  # a NumPy or torch integer is as good as a Python one
            return {"answer": operator.index(answer)}
        except TypeError:
            return {"answer": repr(answer)[:100]}

    def reference(self):
        return lambda micro_batch_size, accum_steps, world_size=1: (
            micro_batch_size * accum_steps * world_size
        )

    def judge(self, spec, outputs, expected):
        answer, wanted = outputs.get("answer"), expected["answer"]
        if type(answer) is int and answer == wanted:
            return
        if type(answer) is not int or abs(answer) > 10**12:
            answer = str(answer)[:40]
        m, a, w = spec["micro_batch_size"], spec["accum_steps"], spec["world_size"]
        call = f"effective_batch_size({m}, {a}, {w})"
        if answer == m * a and w > 1:
            raise Failure(
                f"{call} returned {answer}: every one of the {w} processes runs its own "
                "micro-batches, so multiply by world_size too.",
                "world_size_ignored",
            )
        if answer in {m + a, m + a + w}:
            raise Failure(
                f"{call} returned {answer}: the sizes multiply (N micro-batches of b samples "
                "each are N x b samples), they do not add.",
                "added_not_multiplied",
            )
        raise Failure(f"{call} returned {answer!r}; expected {wanted}.")
