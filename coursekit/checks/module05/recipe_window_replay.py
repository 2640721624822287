"""What ``recipe_window`` replays: its problem, and each known mistake's windows.

The problem is a tiny GPT with an SGD optimizer, whose step shows a gradient's scale, a
warmup-cosine schedule, and two windows of token micro-batches (the second one shorter, as
the last window of an epoch is). A mistake is recognised by re-running the windows with it:
its weights after the first window (every mistake's first step comes from one pass of
per-micro-batch gradients) or, where clipping hides a gradient's scale, its logged losses
match the student's.
"""

from __future__ import annotations

import torch
from torch import nn

from coursekit.gpt import tiny_gpt
from coursekit.schedules import warmup_cosine
from coursekit.tokens import count_tokens, lm_loss, make_token_batches, split_token_batches

VOCAB = 12
SEQ_LEN = 10

# Mistakes recognised by re-running the two windows with the mistake: their weights (or, when
# clipping hides a gradient's scale, their logged losses) match the student's.
RECIPE_MISTAKES = {
    "mean_of_means": (
        "Your weights match a window that averaged the micro-batches' mean losses: micro-"
        "batches with fewer real tokens then weigh more per token. Divide each micro-batch's "
        "summed loss by the token count of the whole window."
    ),
    "padding_counted": (
        "Your weights match a loss divided by every label position, padding included: count "
        "only labels that are not -100."
    ),
    "loss_not_divided": (
        "Your weights match a window whose summed token losses were never divided: the "
        "gradient is the window's token count times too large. (Dividing loss.data, or a "
        "detached copy, divides the number you log but not the gradient: autograd never sees "
        "it.)"
    ),
    "clip_every_micro_batch": (
        "Your weights match clipping after every micro-batch's backward. Clipping a partial "
        "sum shrinks the early micro-batches' share; clip once, after the window's last "
        "backward, just before optimizer.step()."
    ),
    "labels_shifted_again": (
        "Your weights match a loss whose labels were shifted once more (logits[:, :-1] "
        "against labels[:, 1:]): the labels you are given are already aligned with the "
        "logits, position by position (each is the next token), so shifting again trains the "
        "model to predict the token after next. Use lm_loss(logits, labels) as given."
    ),
    "loss_in_bf16": (
        "Your losses match a loss computed in bf16: under autocast the logits are bf16, and "
        "a cross-entropy summed in bf16 keeps about 3 significant digits, in the loss you log "
        "and in the gradient. Compute the loss from logits.float()."
    ),
}


def recipe_problem(spec):
    """The model, optimizer, schedule and windows a spec describes, built afresh: every run
    starts from the same weights and data."""
    model = tiny_gpt(
        VOCAB, SEQ_LEN, dim=8, heads=2, layers=spec.get("layers", 1), seed=spec["seed"]
    )
    sizes = [size for window in spec["windows"] for size in window]
    inputs, labels = make_token_batches(sum(sizes), SEQ_LEN, VOCAB, 0.5, seed=spec["seed"] + 1)
    micro_batches = split_token_batches(inputs, labels, sizes)
    windows, start = [], 0
    for window in spec["windows"]:
        windows.append(micro_batches[start : start + len(window)])
        start += len(window)
    optimizer = torch.optim.SGD(model.parameters(), lr=spec["lr"])
    scheduler = warmup_cosine(optimizer, warmup_steps=1, total_steps=len(windows) + 1)
    return model, optimizer, scheduler, windows


def _normalised(mistake, logits, labels, window, tokens, positions):
    """One micro-batch's loss as the recipe divides it, or as a mistake does."""
    if mistake != "loss_in_bf16":
        logits = logits.float()
    if mistake == "mean_of_means":
        return lm_loss(logits, labels) / len(window)
    if mistake == "padding_counted":
        return lm_loss(logits, labels, "sum") / positions
    if mistake == "loss_not_divided":
        return lm_loss(logits, labels, "sum")
    return lm_loss(logits, labels, "sum") / tokens


def spec_dtype(spec):
    """The autocast dtype a spec asks for (``"bfloat16"``), or None: float32, no autocast."""
    return getattr(torch, spec["dtype"]) if spec.get("dtype") else None


def after_first_window(spec, mistakes) -> dict:
    """The weights after the first window, as the recipe (None) and each mistake leave them.

    The first window starts from the same weights whatever the code, so one pass gives them
    all: each micro-batch's gradient of its summed loss, weighted as each normalisation
    weighs it (and clipped as each clips), makes each one's first SGD step.
    """
    model, _, _, windows = recipe_problem(spec)
    parameters = list(model.parameters())
    start = nn.utils.parameters_to_vector(parameters).detach()
    window, max_norm = windows[0], spec["max_norm"]
    tokens = sum(count_tokens(labels) for _, labels in window)
    positions = sum(labels.numel() for _, labels in window)
    grads, counts = [], []
    for inputs, labels in window:
        with torch.autocast("cpu", dtype=spec_dtype(spec), enabled=spec_dtype(spec) is not None):
            logits = model(inputs)
        summed = lm_loss(logits.float(), labels, "sum")
        grads.append(torch.cat([g.flatten() for g in torch.autograd.grad(summed, parameters)]))
        counts.append(count_tokens(labels))

    def clip(gradient):
        return gradient * torch.clamp(max_norm / (gradient.norm() + 1e-6), max=1.0)

    weights = {
        None: [1 / tokens] * len(grads),
        "mean_of_means": [1 / (count * len(window)) for count in counts],
        "padding_counted": [1 / positions] * len(grads),
        "loss_not_divided": [1.0] * len(grads),
    }
    lr = scheduled_lrs(spec, 1)[0]
    after = {}
    for mistake in mistakes:
        if mistake == "clip_every_micro_batch":
            total = torch.zeros_like(start)
            for grad in grads:
                total = clip(total + grad / tokens)
        else:
            total = clip(sum(w * g for w, g in zip(weights[mistake], grads, strict=True)))
        after[mistake] = (start - lr * total).tolist()
    return after


def after_labels_shifted_again(spec) -> list[list[float]]:
    """The weights after the first window when each micro-batch's labels are shifted once
    more (logits[:, :-1] against labels[:, 1:]), divided by the shifted labels' token count
    or by the window's own: the two ways to write that slip."""
    model, _, _, windows = recipe_problem(spec)
    parameters = list(model.parameters())
    start = nn.utils.parameters_to_vector(parameters).detach()
    window, max_norm = windows[0], spec["max_norm"]
    tokens = sum(count_tokens(labels) for _, labels in window)
    shifted_tokens = sum(count_tokens(labels[:, 1:]) for _, labels in window)
    total = torch.zeros_like(start)
    for inputs, labels in window:
        with torch.autocast("cpu", dtype=spec_dtype(spec), enabled=spec_dtype(spec) is not None):
            logits = model(inputs)
        summed = lm_loss(logits.float()[:, :-1], labels[:, 1:], "sum")
        total += torch.cat([g.flatten() for g in torch.autograd.grad(summed, parameters)])
    lr = scheduled_lrs(spec, 1)[0]
    after = []
    for count in (shifted_tokens, tokens):
        gradient = total / max(count, 1)
        gradient = gradient * torch.clamp(max_norm / (gradient.norm() + 1e-6), max=1.0)
        after.append((start - lr * gradient).tolist())
    return after


def logged_by(spec, window_weights, mistakes) -> dict:
    """Each window's logged loss, as the recipe (None) and each mistake log it, on the
    weights the recipe had before that window (forward passes only)."""
    model, _, _, windows = recipe_problem(spec)
    parameters = list(model.parameters())
    logged = {mistake: [] for mistake in mistakes}
    with torch.no_grad():
        for index, window in enumerate(windows):
            if index:
                nn.utils.vector_to_parameters(torch.tensor(window_weights[index - 1]), parameters)
            tokens = sum(count_tokens(labels) for _, labels in window)
            positions = sum(labels.numel() for _, labels in window)
            sums = dict.fromkeys(mistakes, 0.0)
            for inputs, labels in window:
                with torch.autocast(
                    "cpu", dtype=spec_dtype(spec), enabled=spec_dtype(spec) is not None
                ):
                    logits = model(inputs)
                for mistake in mistakes:
                    loss = _normalised(mistake, logits, labels, window, tokens, positions)
                    sums[mistake] += loss.item()
            for mistake in mistakes:
                logged[mistake].append(sums[mistake])
    return logged


def scheduled_lrs(spec, steps: int) -> list[float]:
    """The learning rate of each optimizer step, as the check's schedule gives it."""
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=spec["lr"])
    factor = warmup_cosine(optimizer, 1, len(spec["windows"]) + 1).lr_lambdas[0]
    return [spec["lr"] * factor(step) for step in range(steps)]
