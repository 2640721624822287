"""``accumulate_tokens``: a window's gradient as the mean loss per real token.

Runs on a tiny language model with padded sequences (float64 throughout); the gradient is
compared with the reference's, and a wrong one is matched against each known normalisation
mistake (the mean of means, padding counted, a count from the first micro-batch or a
running one, ...) before a generic verdict. Each mistake's gradient comes from one backward
per micro-batch, as a weighted sum. The returned loss must be the window's mean per real
token, as a float.
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
from coursekit.checks.module02.common import MODULE
from coursekit.checks.question import (
    Failure,
    Question,
    Rule,
    flipped_sign,
    number_list,
    relative_gap,
    scale_of,
)
from coursekit.checks.registry import register
from coursekit.checks.side_effects import (
    Kept,
    gradient_again,
    judge_again,
    judge_left_behind,
)
from coursekit.checks.tamper_evident import judge_instruments, watched
from coursekit.checks.window_memory import (
    is_memory_spec,
    judge_memory,
    memory_spec,
    run_measured,
)
from coursekit.gradients import flat_gradient
from coursekit.models import tiny_lm
from coursekit.tokens import (
    accumulate_tokens,
    count_tokens,
    lm_loss,
    make_token_batches,
    split_token_batches,
)

TOLERANCE = 1e-10  # float64 throughout: a gap above this is a bug, not rounding

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
    rules = (
        Rule(
            "Run forward and backward on each micro-batch",
            "every spec: forward sizes and backward calls are counted",
            ("single_backward", "whole_batch_forward"),
        ),
        Rule(
            "so that `.grad` ends up holding the gradient of the window's mean loss per real token",
            "every spec; micro-batches of unequal sizes and padding in most",
            (
                "wrong_sign",
                "mean_of_means",
                "padding_counted",
                "not_divided",
                "sum_not_normalised",
                "window_from_first_micro_batch",
                "running_token_count",
                "stale_token_count",
            ),
        ),
        Rule(
            "and return that loss as a float.",
            "every spec: the returned loss against the reference's",
            ("logged_mean_of_means", "logged_tensor", "logged_last_micro_batch"),
        ),
    )

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
        # the memory test: one window on a wide model, its fresh memory counted by the kernel
        return [*specs, memory_spec(rng.randrange(10**6), problem="tokens")]

    def memory_call(self, fn) -> tuple:
        """How the memory test calls ``fn``, and the right answer its warm-up runs
        (:func:`coursekit.checks.window_memory.run_measured`)."""
        return (lambda model, _, micro_batches: fn(model, micro_batches)), None

    def run(self, fn, spec):
        if is_memory_spec(spec):
            return run_measured(spec, *self.memory_call(fn))
        model, micro_batches = _token_problem(spec)
        watch = Watch(model)
        kept = Kept((model,), micro_batches=micro_batches)
        returned = watched((watch,), fn, model, micro_batches)
        loss = as_float(returned)
        outputs = {
            **kept.report(),
            "grad": tensor_list(flat_gradient(model.parameters())),
            "loss": loss,
            "loss_keeps_graph": torch.is_tensor(returned) and returned.requires_grad,
            "largest_forward": max(watch.forward_sizes, default=0),
            "backward_passes": watch.backward_passes,
            "weights_moved": weights_of(model) != watch.start,
            "instruments": watch.verdict(samples=sum(spec["sizes"])),
        }
        if outputs["input_changed"] is None and not outputs["weights_moved"]:
            call = lambda: fn(model, micro_batches)  # noqa: E731
            outputs["again_gap"] = gradient_again(outputs["grad"], call, model.parameters())
        return outputs

    def reference(self):
        return accumulate_tokens

    def judge(self, spec, outputs, expected):
        if is_memory_spec(spec):
            return judge_memory(spec, outputs, expected)
        sizes = spec["sizes"]
        counts = _token_counts(spec)
        setting = f"(micro-batches of {sizes} sequences holding {counts} real tokens)"
        judge_left_behind(outputs, setting)
        judge_instruments(outputs, setting, bypass=False)
        judge_again(outputs, TOLERANCE, setting)
        judge_micro_batches_and_weights(outputs, max(sizes), setting, unit="sequences")
        require_gradient(outputs)
        actual = number_list(outputs, "grad", "a gradient for every parameter")
        wanted = expected["grad"]
        if relative_gap(actual, wanted) > TOLERANCE:
            self._diagnose(spec, actual, wanted, setting)
        judge_instruments(outputs, setting)
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
