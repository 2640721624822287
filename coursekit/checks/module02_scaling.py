"""Checks for module 2 (02_loss_scaling), part 1: the factor per micro-batch, and tokens.

``loss_scales`` is pure arithmetic, judged exactly. ``accumulate_tokens`` runs on a tiny
language model with padded sequences; its gradient is compared with the reference's, and
a wrong one is matched against each known normalisation mistake before a generic verdict.
"""

from __future__ import annotations

import torch

from coursekit.checks.instruments import (
    SINGLE_BACKWARD,
    Watch,
    as_float,
    judge_micro_batches_and_weights,
    require_gradient,
    tensor_list,
    weights_of,
)
from coursekit.checks.question import (
    Failure,
    Question,
    flipped_sign,
    number_list,
    relative_gap,
    scale_of,
)
from coursekit.checks.registry import register
from coursekit.gradients import flat_gradient
from coursekit.loss_scaling import loss_scales
from coursekit.models import tiny_lm
from coursekit.tokens import (
    accumulate_tokens,
    count_tokens,
    lm_loss,
    make_token_batches,
    split_token_batches,
)

MODULE = "02_loss_scaling"
TOLERANCE = 1e-10  # float64 throughout: a gap above this is a bug, not rounding

# ---------------------------------------------------------------- loss_scales

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


@register
class LossScales(Question):
    name = "loss_scales"
    module = MODULE
    points = 2

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
        scales = fn(list(spec["sizes"]), spec["reduction"])
        try:
            return {"scales": [float(v) for v in scales]}
        except (TypeError, ValueError):
            return {"scales": repr(scales)[:200]}

    def reference(self):
        return loss_scales

    def judge(self, spec, outputs, expected):
        sizes, reduction = spec["sizes"], spec["reduction"]
        setting = f"(sizes {sizes}, reduction={reduction!r})"
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
        gap = relative_gap(actual, expected["scales"])
        raise Failure(
            f"Expected {[round(v, 6) for v in expected['scales']]}, got "
            f"{[round(v, 6) for v in actual]}: {_first_gap(actual, expected['scales'])} "
            f"(largest relative gap {gap:.1e}) {setting}. The factors must make the window's "
            f"summed gradient the mean over all its samples.{_rounding_hint(gap)}"
        )


# ---------------------------------------------------------------- accumulate_tokens

VOCAB = 16


def _token_problem(spec):
    model = tiny_lm(vocab_size=VOCAB, dim=8, seed=spec["seed"], dtype=torch.float64)
    inputs, labels = make_token_batches(
        sum(spec["sizes"]), spec["seq_len"], VOCAB, spec["padding_ratio"], seed=spec["seed"]
    )
    return model, split_token_batches(inputs, labels, spec["sizes"])


def _token_counts(spec) -> list[int]:
    """The real tokens of each micro-batch (the data alone: no model is built)."""
    _, labels = make_token_batches(
        sum(spec["sizes"]), spec["seq_len"], VOCAB, spec["padding_ratio"], seed=spec["seed"]
    )
    counts, start = [], 0
    for size in spec["sizes"]:
        counts.append(count_tokens(labels[start : start + size]))
        start += size
    return counts


def _token_weights(micro_batches) -> dict[str, list[float]]:
    """What each mistake multiplies each micro-batch's *summed* loss by."""
    counts = [count_tokens(labels) for _, labels in micro_batches]
    positions = sum(labels.numel() for _, labels in micro_batches)
    n, total = len(counts), sum(counts)
    running = [sum(counts[: k + 1]) for k in range(n)]
    return {
        "mean_of_means": [1 / (n * c) for c in counts],
        "padding_counted": [1 / positions] * n,
        "not_divided": [1 / c for c in counts],
        "sum_not_normalised": [1.0] * n,
        "window_from_first_micro_batch": [1 / (counts[0] * n)] * n,
        "running_token_count": [1 / r for r in running],
        None: [1 / total] * n,  # right
    }


def _variant_gradients(spec) -> dict[str | None, list[float]]:
    """The gradient each normalisation (None: the right one) leaves, from one backward per
    micro-batch: at fixed weights every one is a weighted sum of the micro-batches' gradients
    of their summed losses."""
    model, micro_batches = _token_problem(spec)
    parts = []
    for inputs, labels in micro_batches:
        model.zero_grad(set_to_none=True)
        lm_loss(model(inputs), labels, "sum").backward()
        parts.append(flat_gradient(model.parameters()))
    return {
        mistake: sum(w * g for w, g in zip(weights, parts, strict=True)).tolist()
        for mistake, weights in _token_weights(micro_batches).items()
    }


TOKEN_MISTAKES = {
    "mean_of_means": (
        "Your gradient is the mean of the micro-batches' mean losses, divided by their "
        "number: the bug that shipped in widely used trainers until October 2024. Micro-"
        "batches hold different numbers of real tokens, so a token in a short micro-batch "
        "weighs more. Sum each micro-batch's loss (reduction='sum') and divide by the token "
        "count of the whole window."
    ),
    "padding_counted": (
        "You divided by the number of label positions, padding included, so the gradient is "
        "too small by the padding's share. Count only labels that are not -100."
    ),
    "not_divided": (
        "Your gradient is the sum of the micro-batches' mean losses: nothing divides by the "
        "window. Sum each micro-batch's loss and divide by the window's token count."
    ),
    "sum_not_normalised": (
        "Your gradient is that of the summed loss over all tokens, not divided by anything: "
        "divide by the token count of the whole window."
    ),
    "window_from_first_micro_batch": (
        "You divided by the first micro-batch's token count times the number of micro-"
        "batches ({first} x {n} = {guess} tokens), but micro-batches hold different numbers "
        "of real tokens: the window holds {total}. Count the tokens of every micro-batch "
        "before the first backward()."
    ),
    "running_token_count": (
        "Each micro-batch's summed loss was divided by the tokens counted so far (a running "
        "count: {running}), not by the window's final count of {total}: the early micro-"
        "batches weigh too much. Count the whole window's tokens first, then run the "
        "backward passes."
    ),
}


@register
class AccumulateTokens(Question):
    name = "accumulate_tokens"
    module = MODULE
    points = 4

    def public_specs(self):
        def spec(seed, sizes, padding_ratio, seq_len=12):
            return {
                "seed": seed,
                "sizes": sizes,
                "seq_len": seq_len,
                "padding_ratio": padding_ratio,
            }

        return [
            spec(1, [4, 4, 4], 0.5),  # same number of sequences, different token counts
            spec(2, [2, 6, 3], 0.5),
            spec(3, [5], 0.3),  # one micro-batch: every normalisation but padding agrees
            spec(4, [3, 3], 0.0),  # no padding: equal token counts
        ]

    def hidden_specs(self, rng):
        specs = []
        for _ in range(3):
            while True:
                spec = {
                    "seed": rng.randrange(10**6),
                    "sizes": [rng.randint(1, 6) for _ in range(rng.randint(2, 5))],
                    "seq_len": rng.randint(8, 16),
                    "padding_ratio": rng.choice([0.3, 0.5, 0.7]),
                }
                _, micro_batches = _token_problem(spec)
                counts = [count_tokens(labels) for _, labels in micro_batches]
                if len(set(counts)) > 1:  # else the mean of means would be right by chance
                    break
            specs.append(spec)
        return specs

    def run(self, fn, spec):
        model, micro_batches = _token_problem(spec)
        watch = Watch(model)
        returned = fn(model, micro_batches)
        loss = as_float(returned)
        return {
            "grad": tensor_list(flat_gradient(model.parameters())),
            "loss": loss,
            "loss_keeps_graph": torch.is_tensor(returned) and returned.requires_grad,
            "largest_forward": max(watch.forward_sizes, default=0),
            "backward_passes": watch.backward_passes,
            "weights_moved": weights_of(model) != watch.start,
        }

    def reference(self):
        return accumulate_tokens

    def judge(self, spec, outputs, expected):
        sizes = spec["sizes"]
        counts = _token_counts(spec)
        setting = f"(micro-batches of {sizes} sequences holding {counts} real tokens)"
        judge_micro_batches_and_weights(outputs, max(sizes), setting, unit="sequences")
        require_gradient(outputs)
        actual = number_list(outputs, "grad", "a gradient for every parameter")
        wanted = expected["grad"]
        if relative_gap(actual, wanted) > TOLERANCE:
            self._diagnose(spec, actual, wanted, setting)
        if len(sizes) > 1 and outputs.get("backward_passes") == 1:
            raise Failure("The gradient is right, but " + SINGLE_BACKWARD, "single_backward")
        self._judge_loss(spec, outputs, expected, setting)

    def _diagnose(self, spec, actual, wanted, setting):
        patterns = _variant_gradients(spec)
        counts = _token_counts(spec)
        n, total = len(counts), sum(counts)
        for mistake in TOKEN_MISTAKES:
            pattern = patterns[mistake]
            # a normalisation that agrees with the right one here names nothing
            if relative_gap(pattern, wanted) > 1e-7 and relative_gap(actual, pattern) <= 1e-9:
                message = TOKEN_MISTAKES[mistake].format(
                    n=n,
                    total=total,
                    first=counts[0],
                    guess=counts[0] * n,
                    running=[sum(counts[: k + 1]) for k in range(n)],
                )
                raise Failure(f"{message} {setting}", mistake)
        k = scale_of(actual, wanted)
        if k is not None and k < 0:
            raise flipped_sign(k, f"the mean-per-token gradient {setting}")
        if k is not None:
            raise Failure(
                f"Your gradient points the right way but is {k:.4g} times the mean-per-token "
                f"gradient {setting}: check what you divide by.",
                "wrong_scale",
            )
        gap = relative_gap(actual, wanted)
        hint = (
            " A gap this small is rounding: the check runs in float64, so something was "
            "computed in a lower precision (a .float() or .half() cast)."
            if gap < 1e-4
            else " Compute each micro-batch's summed loss over its real tokens (padding "
            "skipped) and divide it by the whole window's token count."
        )
        raise Failure(
            f"Your gradient differs from the gradient of the window's mean loss per real token "
            f"by {gap:.2e} (relative) {setting}.{hint}"
        )

    def _judge_loss(self, spec, outputs, expected, setting):
        loss = outputs.get("loss")
        if not isinstance(loss, float):
            raise Failure(
                f"The gradient is right, but return the window's loss as a float; got {loss}.",
                "logged_loss_wrong",
            )
        if abs(loss - expected["loss"]) <= 1e-9 * abs(expected["loss"]):
            if outputs.get("loss_keeps_graph") is True:
                raise Failure(
                    "The gradient and loss are right, but return a float (loss.item()), not a "
                    "tensor that keeps the graph alive.",
                    "logged_tensor",
                )
            return
        model, micro_batches = _token_problem(spec)
        mean_of_means = accumulate_tokens(model, micro_batches, "mean_of_means")
        if abs(loss - mean_of_means) <= 1e-9 * abs(mean_of_means):
            raise Failure(
                f"The gradient is right, but the returned loss {loss:.6g} is the mean of the "
                f"micro-batches' means; the window's mean per real token is "
                f"{expected['loss']:.6g} {setting}. Log the same normalisation you train with: "
                "a logged loss that changes with accum_steps is how the 2024 bug was found.",
                "logged_mean_of_means",
            )
        raise Failure(
            f"The gradient is right, but the returned loss is {loss:.6g}; the window's mean "
            f"loss per real token is {expected['loss']:.6g} {setting}. Return the sum of the "
            "scaled losses you called backward() on.",
            "logged_loss_wrong",
        )
