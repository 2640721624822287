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
from coursekit.checks.question import Failure, Question, number_list, relative_gap, scale_of
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
}


def _scale_patterns(sizes: list[int], reduction: str) -> dict[str, list[float]]:
    total, n = sum(sizes), len(sizes)
    if reduction == "mean":
        return {
            "mean_of_means": [1 / n] * n,
            "loss_not_divided": [1.0] * n,
            "mean_treated_as_sum": [1 / total] * n,
            "size_not_divided": [float(s) for s in sizes],
        }
    return {
        "sum_not_divided": [1.0] * n,
        "sum_divided_by_count": [1 / n] * n,
        "sum_treated_as_mean": [s / total for s in sizes],
        "sum_divided_by_size": [1 / s for s in sizes],
    }


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
        for mistake, pattern in _scale_patterns(sizes, reduction).items():
            if (
                relative_gap(pattern, expected["scales"]) > 1e-6
                and relative_gap(actual, pattern) <= 1e-6
            ):
                message = SCALE_MISTAKES[mistake].format(n=n, total=total)
                raise Failure(f"{message} {setting}", mistake)
        raise Failure(
            f"Expected {[round(v, 6) for v in expected['scales']]}, got "
            f"{[round(v, 6) for v in actual]} (largest relative gap "
            f"{relative_gap(actual, expected['scales']):.1e}) {setting}. The factors must make "
            "the window's summed gradient the mean over all its samples."
        )


# ---------------------------------------------------------------- accumulate_tokens

VOCAB = 16


def _token_problem(spec):
    model = tiny_lm(vocab_size=VOCAB, dim=8, seed=spec["seed"], dtype=torch.float64)
    inputs, labels = make_token_batches(
        sum(spec["sizes"]), spec["seq_len"], VOCAB, spec["padding_ratio"], seed=spec["seed"]
    )
    return model, split_token_batches(inputs, labels, spec["sizes"])


def _variant_gradient(spec, normalisation):
    model, micro_batches = _token_problem(spec)
    if normalisation == "sum_not_normalised":
        for inputs, labels in micro_batches:
            lm_loss(model(inputs), labels, "sum").backward()
    else:
        accumulate_tokens(model, micro_batches, normalisation)
    return flat_gradient(model.parameters()).tolist()


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
        _, micro_batches = _token_problem(spec)
        counts = [count_tokens(labels) for _, labels in micro_batches]
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
        for mistake in TOKEN_MISTAKES:
            pattern = _variant_gradient(spec, mistake)
            if relative_gap(pattern, wanted) > TOLERANCE and relative_gap(actual, pattern) <= 1e-9:
                raise Failure(f"{TOKEN_MISTAKES[mistake]} {setting}", mistake)
        k = scale_of(actual, wanted)
        if k is not None:
            raise Failure(
                f"Your gradient points the right way but is {k:.4g} times the mean-per-token "
                f"gradient {setting}: check what you divide by.",
                "wrong_scale",
            )
        raise Failure(
            f"Your gradient differs from the gradient of the window's mean loss per real token "
            f"by {relative_gap(actual, wanted):.2e} (relative) {setting}."
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
