"""``plan_micro_batch``: the largest micro-batch whose activations fit a memory budget.

The hand-in measures activation bytes (coursekit.memory) for a tiny MLP and returns
``(micro_batch_size, accum_steps)`` for the largest divisor of the effective batch that fits
``budget_bytes`` (a size needing exactly the budget fits), or raises ValueError when not even
one sample fits. Budgets are set from measured bytes, so an off-by-one ``<`` is caught. The
run also reports which sizes ran forward, so a search that skipped the right size (halving,
powers of two) or kept numbers measured on another call's model is told apart from one that
measured it and still chose wrong.
"""

from __future__ import annotations

import functools

import torch

from coursekit.checks.instruments import Watch
from coursekit.checks.module01.common import MODULE
from coursekit.checks.question import Failure, Question, Rule, empty_message, says_something
from coursekit.checks.registry import register
from coursekit.checks.side_effects import Kept, judge_left_behind
from coursekit.checks.tamper_evident import watched
from coursekit.memory import activation_bytes
from coursekit.models import tiny_mlp


def _memory_model(spec):
    model = tiny_mlp(in_features=spec["in_features"], hidden=spec["hidden"], depth=3, seed=21)
    return model, (lambda size: torch.zeros(size, spec["in_features"]))


_MEASURED_SIZES = 200  # the sizes a search ran forward, as the run reports them


def _divisors(n: int) -> list[int]:
    return [m for m in range(1, n + 1) if n % m == 0]


def _reference_plan(model, make_inputs, budget_bytes, effective_batch_size):
    for size in sorted(_divisors(effective_batch_size), reverse=True):
        if activation_bytes(model, make_inputs(size)) <= budget_bytes:
            return size, effective_batch_size // size
    raise ValueError(f"Not even one sample's activations fit in {budget_bytes} bytes.")


def _plan_spec(effective_batch_size, in_features, hidden, budget_of, label):
    spec = {
        "effective_batch_size": effective_batch_size,
        "in_features": in_features,
        "hidden": hidden,
        "label": label,
    }
    return {**spec, "budget_bytes": int(budget_of(_Bytes(spec)))}


class _Bytes(dict):
    """``{micro_batch_size: activation bytes}`` for a spec's model, measured on first use
    (a spec's budget needs one or two sizes, a judge two or three, a right answer none)."""

    def __init__(self, spec):
        super().__init__()
        self.spec = spec
        self.model = None

    def __missing__(self, size: int) -> int:
        if self.model is None:
            self.model, self.make_inputs = _memory_model(self.spec)
        self[size] = activation_bytes(self.model, self.make_inputs(size))
        return self[size]


@register
class PlanMicroBatch(Question):
    name = "plan_micro_batch"
    module = MODULE
    points = 3
    rules = (
        Rule(
            "measure the activation bytes (with `coursekit.activation_bytes(model, "
            "make_inputs(size))`) of the micro-batch sizes that divide `effective_batch_size`",
            "the specs where some size fits: the sizes measured are logged",
            (
                "halving_search",
                "powers_of_two_only",
                "divisors_up_to_square_root",
                "largest_size_skipped",
                "size_one_skipped",
                "bytes_as_kib",
                "stale_measurements",
            ),
            lambda spec: "nothing fits" not in spec.get("label", ""),
        ),
        Rule(
            "return `(micro_batch_size, accum_steps)` for the **largest** size that fits "
            "(measured bytes `<=` budget)",
            "the specs where some size fits, one with a budget exactly a size's bytes",
            ("not_largest", "does_not_fit"),
            lambda spec: "nothing fits" not in spec.get("label", ""),
        ),
        Rule(
            "so that `micro_batch_size * accum_steps == effective_batch_size`",
            "the specs where some size fits",
            ("effective_batch_wrong", "swapped"),
            lambda spec: "nothing fits" not in spec.get("label", ""),
        ),
        Rule(
            "If not even one sample fits, raise `ValueError` with a message that says so.",
            "the public spec 'a budget where nothing fits'",
            ("nothing_fits_not_raised", "message_too_short"),
            lambda spec: "nothing fits" in spec.get("label", ""),
        ),
    )

    def public_specs(self):
        return [
            _plan_spec(
                32, 32, 64, lambda m: (m[8] + m[16]) // 2, "a budget between 8 and 16 samples"
            ),
            _plan_spec(32, 32, 64, lambda m: m[16], "a budget exactly equal to 16 samples' bytes"),
            _plan_spec(24, 32, 64, lambda m: 10 * m[24], "a budget where everything fits"),
            _plan_spec(32, 32, 64, lambda m: m[1] - 1, "a budget where nothing fits"),
        ]

    def hidden_specs(self, rng):
        effective = rng.choice([24, 36, 48, 60])
        sizes = _divisors(effective)
        pick = rng.choice(sizes[1:-1])

        def drawn(budget_of):
            return _plan_spec(
                effective,
                rng.randint(8, 40),
                rng.randint(16, 80),
                budget_of,
                "a budget drawn at grading time",
            )

        fixed = "a budget chosen for grading"
        return [
            drawn(lambda m: m[pick]),  # exactly the bytes of one size: <= matters
            drawn(lambda m: m[pick] + 1),
            drawn(lambda m: m[1] - 1),  # nothing fits
            drawn(lambda m: m[effective] + 1),  # everything fits
            # Fixed: the answer is neither a power of two nor on the halving path from the
            # effective batch (36, 18, 9, ...; 60, 30, 15, ...), so a search that tries only
            # some sizes fails whatever the draw; the two models differ, so sizes measured in
            # an earlier call are stale here.
            _plan_spec(36, 8, 16, lambda m: m[12], fixed),
            _plan_spec(60, 24, 48, lambda m: m[20] + 1, fixed),
            _plan_spec(18, 12, 24, lambda m: m[1], fixed),  # only 1 fits, exactly
        ]

    def run(self, fn, spec):
        model, make_inputs = _memory_model(spec)
        watch = Watch(model)  # the batch sizes run forward: the sizes the search measured
        kept = Kept((model,))
        outputs = self._answer(functools.partial(watched, (watch,), fn), model, make_inputs, spec)
        return {
            **outputs,
            **kept.report(),
            "measured": sorted(set(watch.forward_sizes))[:_MEASURED_SIZES],
        }

    @staticmethod
    def _answer(fn, model, make_inputs, spec):
        try:
            answer = fn(model, make_inputs, spec["budget_bytes"], spec["effective_batch_size"])
        except NotImplementedError:
            raise
        except Exception as exc:  # which exception is part of the answer here
            # the first line only: the feedback quotes it, and the inputs it shows are the spec's
            return {"raised": type(exc).__name__, "message": str(exc).split("\n")[0][:200]}
        if isinstance(answer, (tuple, list)) and len(answer) == 2:
            try:
                return {"answer": [int(answer[0]), int(answer[1])]}
            except (TypeError, ValueError):
                pass
        return {"answer": repr(answer)[:200]}

    def reference(self):
        return _reference_plan

    def judge(self, spec, outputs, expected):
        budget, effective = spec["budget_bytes"], spec["effective_batch_size"]
        where = f"({spec['label']}: budget {budget} bytes, effective batch {effective})"
        judge_left_behind(outputs, where)
        bytes_of = _Bytes(spec)
        raised = outputs.get("raised")
        measured = outputs.get("measured")
        # The sizes run forward in this call (an empty list: nothing was measured here).
        known = isinstance(measured, list) and all(type(v) is int for v in measured)
        if "raised" in expected:
            if raised == "ValueError":
                if not says_something(outputs.get("message")):
                    raise empty_message(where)
                return
            if raised:
                raise Failure(
                    f"Nothing fits {where}, and you raised {raised}: raise ValueError, the "
                    "exception Python uses for an argument with no valid answer.",
                    "wrong_exception",
                )
            needs = bytes_of[1]
            answer = outputs.get("answer")
            if known and isinstance(answer, list) and answer and answer[0] not in measured:
                raise Failure(
                    f"You returned {tuple(answer)}, but your function never measured a "
                    f"micro-batch of {answer[0]} in this call (no forward pass of that size ran), "
                    f"and nothing fits: even 1 sample needs {needs} bytes {where}. Measure each "
                    "size with this call's model and make_inputs: numbers kept from an earlier "
                    "call belong to another model.",
                    "not_measured",
                )
            raise Failure(
                f"With a budget of {budget} bytes even a micro-batch of 1 needs {needs} bytes, "
                f"so nothing fits; you returned {answer!r}. Raise ValueError "
                "with a message that says so.",
                "nothing_fits_not_raised",
            )
        if not raised and outputs.get("answer") == expected["answer"]:
            return
        best = expected["answer"][0]
        best_needs = bytes_of[best]

        def skipped(size):  # no forward pass of that size ran: the search never measured it
            return known and size not in measured

        if raised == "ValueError":
            if skipped(best):
                raise Failure(
                    f"You raised ValueError, but a micro-batch of {best} fits: it needs "
                    f"{best_needs} bytes {where}. Your search never measured it (no forward "
                    f"pass of that size ran in this call): try every size that divides "
                    f"{effective}{', 1 included' if best == 1 else ''}.",
                    "skipped_sizes",
                )
            raise Failure(
                f"You raised ValueError, but a micro-batch of {best} fits: it needs "
                f"{best_needs} bytes {where}.{self._equal_hint(best_needs, budget, known)}",
                "not_largest",
            )
        if raised:
            message = str(outputs.get("message", "")).split("\n")[0][:200]
            raise Failure(f"Your function raised {raised}: {message} {where}")
        answer = outputs.get("answer")
        if not (isinstance(answer, list) and len(answer) == 2):
            raise Failure(
                f"Return a tuple (micro_batch_size, accum_steps); got {str(answer)[:80]}."
            )
        if not all(type(v) is int and 0 < v <= 10**6 for v in answer):
            raise Failure(f"Return two positive whole numbers; got {str(answer)[:80]}.")
        micro, accum = answer
        # (a search that never measured the right size did not find it and swap it)
        if (accum, micro) == tuple(expected["answer"]) and micro != accum:
            # Read as written, the same pair can be another mistake: a size over the budget,
            # or the size just below one that needs exactly the budget (`<`). Name the order
            # only when that reading is impossible and the search did measure the answer.
            literal_needs = bytes_of[micro]
            below = [d for d in _divisors(effective) if d < best]
            other_reading = literal_needs > budget or (
                best_needs == budget and below and micro == below[-1]
            )
            if not other_reading and not skipped(best):
                raise Failure(
                    f"You returned ({micro}, {accum}): the right numbers in the wrong order. "
                    f"Return (micro_batch_size, accum_steps) {where}.",
                    "swapped",
                )
            if other_reading:
                raise Failure(
                    f"You returned ({micro}, {accum}) {where}. The answer is ({accum}, {micro}): "
                    f"either your numbers are in the wrong order, or your search chose a "
                    f"micro-batch of {micro}, which needs {literal_needs} bytes where the largest "
                    f"size that fits is {best} ({best_needs} bytes, <= the budget)."
                )
        if micro * accum != effective:
            raise Failure(
                f"micro_batch_size x accum_steps = {micro} x {accum} = {micro * accum}, but the "
                f"effective batch must be {effective} {where}.",
                "effective_batch_wrong",
            )
        if micro < 1 or effective % micro:
            raise Failure(f"{micro} does not divide {effective} {where}.")
        needs = bytes_of[micro]
        if needs > budget and skipped(micro):
            raise Failure(
                f"You returned a micro-batch of {micro}, but your function never measured it "
                f"in this call (no forward pass of that size ran), and it needs {needs} "
                f"bytes, over the budget {where}. Measure each size with this call's model and "
                "make_inputs: numbers kept from an earlier call belong to another model.",
                "not_measured",
            )
        if needs > budget:
            raise Failure(
                f"A micro-batch of {micro} needs {needs} bytes of activations, over the budget "
                f"{where}. Only sizes whose measured bytes are <= the budget fit.",
                "does_not_fit",
            )
        if micro < best and skipped(best):
            raise Failure(
                f"A larger micro-batch also fits: {best} needs {best_needs} bytes {where}, but "
                f"your search never measured it (no forward pass of that size ran; it "
                f"measured {', '.join(map(str, measured)) or 'nothing'} in this call). Measure "
                f"every size that divides {effective}, from the largest down (halving or powers "
                "of two skip some), with this call's model.",
                "skipped_sizes",
            )
        if micro < best:
            raise Failure(
                f"A larger micro-batch also fits: {best} needs {best_needs} bytes {where}. The "
                "largest that fits means the fewest accumulation steps."
                + self._equal_hint(best_needs, budget, known),
                "not_largest",
            )

    @staticmethod
    def _equal_hint(best_needs, budget, measured_it):
        """Only said when the search measured the best size and rejected it although it needs
        exactly the budget: then `<` is the bug (a search that never tried it gets no hint)."""
        if best_needs != budget or not measured_it:
            return ""
        return " A size whose bytes equal the budget exactly still fits: use <=, not <."
