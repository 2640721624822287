"""``effective_batch_size``: the samples one optimizer step learns from, as an int.

Module 0's warm-up (00_welcome), which shows how checks work: micro_batch_size x
accum_steps x world_size. The answer is judged exactly, and must be an integer (a NumPy or
torch integer is as good as a Python one). A right number of the wrong type (a float, a
string, a tensor) or None is named as such; a wrong number is named after a known mistake (a
factor left out, sizes added, world_size divided or counted twice) only where that mistake
alone gives it, since with equal factors two mistakes can give the same number.
"""

from __future__ import annotations

import operator

from coursekit.checks.question import Failure, Question, Rule
from coursekit.checks.registry import register
from coursekit.checks.side_effects import judge_repeated, repeated


@register
class EffectiveBatchSize(Question):
    name = "effective_batch_size"
    module = "00_welcome"
    points = 1
    rules = (
        Rule(
            r"\text{effective batch} = \text{micro\_batch\_size} \times "
            r"\text{accum\_steps} \times \text{world\_size}",
            "every public spec (world sizes 1, 2 and 4, accum_steps 1 to 8)",
            (
                "world_size_ignored",
                "added_not_multiplied",
                "added_world_size",
                "accum_steps_ignored",
                "micro_batch_size_ignored",
                "divided_by_world_size",
                "world_size_counted_twice",
                "returned_none",
            ),
        ),
        Rule(
            "the number of samples one optimizer step learns from",
            "every public spec: the answer must be a whole number (an int)",
            ("returns_float", "returns_string", "returns_float_tensor"),
        ),
    )
    hidden_tests = False

    def public_specs(self):
        return [
            {"micro_batch_size": m, "accum_steps": a, "world_size": w}
            for m, a, w in [(4, 8, 1), (3, 5, 2), (1, 1, 1), (16, 2, 4)]
        ]

    def run(self, fn, spec):
        return repeated(lambda spec: self._answer(fn, spec), spec)

    @staticmethod
    def _answer(fn, spec):
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
        judge_repeated(
            outputs, f"({spec['micro_batch_size']}, {spec['accum_steps']}, {spec['world_size']})"
        )
        if type(answer) is int and answer == wanted:
            return
        m, a, w = spec["micro_batch_size"], spec["accum_steps"], spec["world_size"]
        call = f"effective_batch_size({m}, {a}, {w})"
        if not isinstance(answer, int):  # run() gives the repr of anything that is no integer
            shown = str(answer)[:40]
            if shown == "None":
                raise Failure(
                    f"{call} returned None: print shows a value, return hands it back. End "
                    "with `return ...`.",
                    "returned_none",
                )
            number = f"{float(wanted)!r}"
            as_text = {str(wanted), number, f"'{wanted}'", f'"{wanted}"', f"tensor({wanted}.)"}
            as_text |= {f"np.float{bits}({number})" for bits in (16, 32, 64)}
            if shown in as_text:
                raise Failure(
                    f"{call} returned {shown}: the right number, but not an int. A batch "
                    "size is a whole number: return an int (no float(), /, or str).",
                    "not_an_int",
                )
            raise Failure(f"{call} returned {shown}; expected the int {wanted}.")
        if abs(answer) > 10**12:
            raise Failure(f"{call} returned {str(answer)[:40]}; expected {wanted}.")
        # Each known mistake is named only where the answer fits it alone: with equal
        # factors two mistakes can give the same number, and then neither is certain.
        patterns = {
            "world_size_ignored": {m * a} if w > 1 else set(),
            "added_not_multiplied": {m + a, m + a + w, m * a + w},
            "divided_by_world_size": {m * a // w, -(-m * a // w)} if w > 1 else set(),
            "world_size_counted_twice": {m * a * w * w} if w > 1 else set(),
            "accum_steps_ignored": {m * w} if a > 1 else set(),
            "micro_batch_size_ignored": {a * w} if m > 1 else set(),
        }
        matches = [mistake for mistake, values in patterns.items() if answer in values]
        messages = {
            "world_size_ignored": (
                f"{call} returned {answer}: every one of the {w} processes runs its own "
                "micro-batches, so multiply by world_size too."
            ),
            "added_not_multiplied": (
                f"{call} returned {answer}: the sizes multiply (N micro-batches of b samples "
                "each are N x b samples), they do not add."
            ),
            "divided_by_world_size": (
                f"{call} returned {answer}, micro_batch_size x accum_steps divided by "
                f"world_size: each of the {w} processes runs {m} x {a} samples of its own, so "
                "the step learns from world_size times more, not fewer."
            ),
            "world_size_counted_twice": (
                f"{call} returned {answer}: world_size was multiplied in twice. Each factor "
                "counts once."
            ),
            "accum_steps_ignored": (
                f"{call} returned {answer}, without accum_steps: each optimizer step adds up "
                f"{a} micro-batches, so multiply by accum_steps too."
            ),
            "micro_batch_size_ignored": (
                f"{call} returned {answer}, without micro_batch_size: each micro-batch holds "
                f"{m} samples, so multiply by micro_batch_size too."
            ),
        }
        if len(matches) == 1:
            raise Failure(messages[matches[0]], matches[0])
        raise Failure(
            f"{call} returned {answer}; expected {wanted} ({m} x {a} x {w}: samples per "
            "micro-batch, micro-batches per step, processes)."
        )
