"""``loss_scales``: the factor each micro-batch's loss is multiplied by in a window.

Pure arithmetic, judged exactly (to 1e-6, so a right answer computed in float32 passes):
for ``reduction="mean"`` each micro-batch's share of the window's samples, size / total; for
``"sum"``, 1 / total. A wrong list is named after a known mistake (the mean of means, the
sum treated as a mean, integer division, a running total, ...) only when that mistake alone
gives it; otherwise the verdict says where the factors first differ.
"""

from __future__ import annotations

from coursekit.checks.module02.common import MODULE
from coursekit.checks.question import Failure, Question, Rule, number_list, relative_gap
from coursekit.checks.registry import register
from coursekit.checks.side_effects import Kept, judge_left_behind, judge_repeated, repeated
from coursekit.loss_scaling import loss_scales

SCALE_MISTAKES = {
    "mean_of_means": (
        "You gave every micro-batch the same factor 1/{n}, but they differ in size: with a "
        "mean loss, a micro-batch of few samples then weighs as much as a big one (the mean "
        "of means). Use each micro-batch's share of the window: size / total."
    ),
    "loss_not_divided": (
        "Every factor is 1: the window's gradient is then the sum of {n} micro-batch mean "
        "gradients, about {n} times too large (exactly {n} when the sizes are equal). With "
        "reduction='mean', use size / total."
    ),
    "mean_treated_as_sum": (
        "You used 1 / total, the factor for a summed loss; a mean loss is already divided by "
        "its own micro-batch's size. With reduction='mean', use size / total."
    ),
    "size_not_divided": (
        "You multiplied by each micro-batch's size but did not divide by the window's total "
        "({total} samples). With reduction='mean', use size / total."
    ),
    "sum_not_divided": (
        "Every factor is 1, but a summed loss adds up all {total} samples' losses: divide "
        "it by the window's total number of samples, 1 / total."
    ),
    "sum_divided_by_count": (
        "You divided each summed loss by the number of micro-batches ({n}), which leaves the "
        "window's gradient a sum over samples, {total} / {n} times too large. With "
        "reduction='sum', use 1 / total."
    ),
    "sum_treated_as_mean": (
        "You used size / total, the factor for a mean loss; a summed loss is not divided "
        "by its size yet, so divide it by the window's total: 1 / total."
    ),
    "sum_divided_by_size": (
        "Dividing each summed loss by its own size turns it into that micro-batch's mean, and "
        "then the means are added up. With reduction='sum', use 1 / total."
    ),
    "integer_division": (
        "Your factors are whole numbers: an integer division (// or int()) rounded them down. "
        "Divide with /."
    ),
    "window_from_first_micro_batch": (
        "You took the window's total as the first micro-batch's size times the number of "
        "micro-batches ({first} x {n} = {guess}), but the micro-batches differ in size: the "
        "window holds {total} samples. Use sum(micro_batch_sizes)."
    ),
    "running_total": (
        "Each factor divides by the samples counted so far (a running total), not by the "
        "window's final total of {total}: count the whole window first, then compute the "
        "factors."
    ),
}


def _scale_patterns(sizes: list[int], reduction: str) -> dict[str, list[float]]:
    total, n = sum(sizes), len(sizes)
    running = [sum(sizes[: k + 1]) for k in range(n)]
    guess = sizes[0] * n  # the window's size, read from its first micro-batch
    if reduction == "mean":
        patterns = {
            "mean_of_means": [1 / n] * n,
            "loss_not_divided": [1.0] * n,
            "mean_treated_as_sum": [1 / total] * n,
            "size_not_divided": [float(s) for s in sizes],
            "integer_division": [float(s // total) for s in sizes],
            "window_from_first_micro_batch": [s / guess for s in sizes],
            "running_total": [s / r for s, r in zip(sizes, running, strict=True)],
        }
    else:
        patterns = {
            "sum_not_divided": [1.0] * n,
            "sum_divided_by_count": [1 / n] * n,
            "sum_treated_as_mean": [s / total for s in sizes],
            "sum_divided_by_size": [1 / s for s in sizes],
            "integer_division": [float(1 // total)] * n,
            "window_from_first_micro_batch": [1 / guess] * n,
            "running_total": [1 / r for r in running],
        }
    return patterns


def _first_gap(actual: list[float], wanted: list[float]) -> str:
    """Where two lists of factors first differ, in words."""
    for k, (a, w) in enumerate(zip(actual, wanted, strict=True)):
        if abs(a - w) > 1e-6 * max(abs(w), 1e-300):
            return f"micro-batch {k}'s factor is {a:.6g}, it should be {w:.6g}"
    return "they differ"


def _rounding_hint(gap: float) -> str:
    """A sentence for a gap as small as low-precision rounding, else nothing."""
    if gap <= 1e-2:
        return (
            " The gap is as small as rounding: was something computed in a low-precision "
            "dtype (float16, bfloat16) or rounded?"
        )
    return ""


def _probe(spec) -> dict | None:
    """Another window with as many micro-batches and the same reduction, whose factors
    differ from the spec's (None where every window's are alike: one micro-batch, "mean")."""
    sizes = spec["sizes"]
    if len(sizes) == 1 and spec["reduction"] == "mean":
        return None
    return {
        "sizes": [size + index + 1 for index, size in enumerate(sizes)],
        "reduction": spec["reduction"],
    }


@register
class LossScales(Question):
    name = "loss_scales"
    module = MODULE
    points = 2
    rules = (
        Rule(
            'with `"mean"`: its share of the window, $b_k / B$ (this is $1/N$ only when all '
            "are equal);",
            'the specs with reduction "mean", sizes equal and unequal',
            (
                "mean_of_means",
                "mean_treated_as_sum",
                "size_not_divided",
                "window_from_first_micro_batch",
                "running_total",
                "integer_division",
                "in_float16",
                "cached_by_count",
            ),
            lambda spec: spec["reduction"] == "mean",
        ),
        Rule(
            'with `"sum"`: $1 / B$, the same for every micro-batch.',
            'the specs with reduction "sum"',
            (
                "sum_not_divided",
                "sum_divided_by_count",
                "sum_treated_as_mean",
                "sum_divided_by_size",
            ),
            lambda spec: spec["reduction"] == "sum",
        ),
        Rule(
            "return a list with the factor for each micro-batch.",
            "every spec, called one after another (a list kept between calls grows)",
            ("loss_not_divided", "scales_in_default_argument"),
        ),
    )

    def public_specs(self):
        return [
            {"sizes": [4, 4, 2], "reduction": "mean"},
            {"sizes": [4, 4, 2], "reduction": "sum"},
            {"sizes": [3, 5, 8, 1], "reduction": "mean"},
            {"sizes": [2, 7], "reduction": "sum"},
            {"sizes": [5, 5, 5], "reduction": "mean"},
            {"sizes": [6], "reduction": "sum"},
        ]

    def hidden_specs(self, rng):
        specs = []
        for reduction in ("mean", "sum", "mean", "sum"):
            sizes = [rng.randint(1, 12) for _ in range(rng.randint(2, 6))]
            while len(set(sizes)) == 1:
                sizes[0] = rng.randint(1, 12)
            specs.append({"sizes": sizes, "reduction": reduction})
        return specs

    def run(self, fn, spec):
        def answer(spec):
            sizes = list(spec["sizes"])
            kept = Kept(sizes=sizes)
            scales = fn(sizes, spec["reduction"])
            try:
                read = {"scales": [float(v) for v in scales]}
            except (TypeError, ValueError):
                read = {"scales": repr(scales)[:200]}
            return {**read, **kept.report()}

        outputs = repeated(answer, spec)
        probe = _probe(spec)
        if probe is not None:  # another window of as many micro-batches, asked for after
            outputs["other"] = answer(probe).get("scales")
        return outputs

    def reference(self):
        return loss_scales

    def judge(self, spec, outputs, expected):
        sizes, reduction = spec["sizes"], spec["reduction"]
        setting = f"(sizes {sizes}, reduction={reduction!r})"
        judge_left_behind(outputs, setting)
        judge_repeated(outputs, setting)
        scales = outputs.get("scales")
        if not isinstance(scales, list):
            raise Failure(f"Return a list with one number per micro-batch {setting}; got {scales}.")
        actual = number_list(outputs, "scales", "a list of numbers")
        if len(actual) != len(sizes):
            raise Failure(
                f"Return one factor per micro-batch: {len(sizes)} here, you returned "
                f"{len(actual)} {setting}."
            )
        # 1e-6: a right answer computed in float32 passes; every named mistake is far off
        if relative_gap(actual, expected["scales"]) <= 1e-6:
            return
        total, n = sum(sizes), len(sizes)
        patterns = _scale_patterns(sizes, reduction)
        matches = [
            mistake
            for mistake, pattern in patterns.items()
            if relative_gap(pattern, expected["scales"]) > 1e-6
            and relative_gap(actual, pattern) <= 1e-6
        ]
        # a name only when one mistake alone gives these factors (with one micro-batch, say,
        # "not divided", "divided by the count" and "size / total" all give [1.0])
        if len(matches) == 1:
            (mistake,) = matches
            message = SCALE_MISTAKES[mistake].format(
                n=n, total=total, first=sizes[0], guess=sizes[0] * n
            )
            raise Failure(f"{message} {setting}", mistake)
        probe, other = _probe(spec), outputs.get("other")
        if probe is not None and isinstance(other, list) and other == scales:
            wanted = loss_scales(probe["sizes"], reduction)
            if relative_gap(wanted, expected["scales"]) > 1e-6:
                raise Failure(
                    f"For this window and for sizes {probe['sizes']} (asked for just after), "
                    f"your function returned the same factors, {[round(v, 6) for v in actual]}; "
                    f"the right ones are {[round(v, 6) for v in expected['scales']]} and "
                    f"{[round(v, 6) for v in wanted]} {setting}. The factors do not follow the "
                    "sizes of the call: they come from a value kept from an earlier call (a "
                    "cache, a global) or from something other than the sizes."
                )
        gap = relative_gap(actual, expected["scales"])
        raise Failure(
            f"Expected {[round(v, 6) for v in expected['scales']]}, got "
            f"{[round(v, 6) for v in actual]}: {_first_gap(actual, expected['scales'])} "
            f"(largest relative gap {gap:.1e}) {setting}. The factors must make the window's "
            f"summed gradient the mean over all its samples.{_rounding_hint(gap)}"
        )
