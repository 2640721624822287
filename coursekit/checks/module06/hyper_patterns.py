"""What ``scaled_hyperparameters``'s known mistakes give, and what its messages say of each.

The judge names a mistake only when the hand-in's value equals what the rules give with that
mistake built in (``HYPER_PATTERNS``), and differs from the right value; ``HYPER_MESSAGES``
says, for each, what went wrong. Kept apart from the question so each file reads whole.
"""

from __future__ import annotations

import math

HYPER_MESSAGES = {
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
    "weight_decay_not_scaled": (
        "that is weight_decay unchanged. AdamW's decay is decoupled: each step shrinks the "
        "weights by lr x weight_decay. With the lr scaled by sqrt(k) = {sqrt_k:.6g} and k = "
        "{k:.6g} times fewer steps over the same samples, the shrinking per sample would "
        "fall by sqrt(k): weight_decay x sqrt(k) keeps it"
    ),
    "weight_decay_scaled_by_k": (
        "that is weight_decay x k. The learning rate already grows by sqrt(k) = {sqrt_k:.6g}, "
        "and each step shrinks the weights by lr x weight_decay: weight_decay x sqrt(k) makes "
        "that k times per step, the same per sample"
    ),
    "weight_decay_scaled_in_the_loss": (
        "{kind}'s weight_decay is an L2 term in the gradient, part of the loss the rules "
        "already scale for: it stays as it is. Only AdamW's decoupled decay scales, by sqrt(k)"
    ),
    "eps_not_scaled": (
        "that is eps unchanged. The square-root rule divides it by sqrt(k) = {sqrt_k:.6g}"
    ),
    "eps_scaled_wrong_way": (
        "that is eps times sqrt(k). The square-root rule divides it by sqrt(k) = {sqrt_k:.6g}"
    ),
}


def hyper_patterns(spec) -> dict[str, dict[str, list]]:
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
        "weight_decay": _decay_patterns(spec, k),
    }


def _decay_patterns(spec, k: float) -> dict[str, list]:
    """Weight decay's known wrong values: AdamW's decoupled decay left alone or scaled by k;
    the loss's decay (SGD, Adam) scaled as if it were decoupled."""
    decay = spec.get("weight_decay", 0.0)
    if spec["kind"] == "adamw":
        return {"weight_decay_not_scaled": [decay], "weight_decay_scaled_by_k": [decay * k]}
    return {"weight_decay_scaled_in_the_loss": [decay * math.sqrt(k), decay * k]}
