"""``accumulate_tokens`` hand-ins: the right normalisation and each known mistake, as source."""

from tests.corpora.student_code import side_effects

_TOKENS = """
import torch.nn.functional as F
def accumulate_tokens(model, micro_batches):
    window_tokens = sum(int((labels != -100).sum()) for _, labels in micro_batches)
    positions = sum(labels.numel() for _, labels in micro_batches)
    logged = 0.0
    for inputs, labels in micro_batches:
        logits = model(inputs)
        loss = {loss}
        loss.backward()
        logged += {logged}
    return logged
"""
_SUM = 'F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum")'
_MEAN = "F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)"


def _tokens(loss=f"{_SUM} / window_tokens", logged="loss.item()"):
    return _TOKENS.format(loss=loss, logged=logged)


ACCUMULATE_TOKENS = {
    "correct": _tokens(),
    "wrong_sign": _tokens(loss=f"-{_SUM} / window_tokens", logged="-loss.item()"),
    "correct_with_coursekit_helpers": """
import coursekit.tokens as tk
def accumulate_tokens(model, micro_batches):
    window_tokens = sum(tk.count_tokens(labels) for _, labels in micro_batches)
    total = 0.0
    for inputs, labels in micro_batches:
        loss = tk.lm_loss(model(inputs), labels, reduction="sum") / window_tokens
        loss.backward()
        total += loss.item()
    return total
""",
    "mean_of_means": _tokens(loss=f"{_MEAN} / len(micro_batches)"),
    "padding_counted": _tokens(loss=f"{_SUM} / positions"),
    "not_divided": _tokens(loss=_MEAN),
    "sum_not_normalised": _tokens(loss=_SUM, logged="loss.item() / window_tokens"),
    "logged_mean_of_means": _tokens(
        logged=f"{_MEAN}.item() / len(micro_batches)",
    ),
    "logged_tensor": _tokens(logged="loss"),
    "single_backward": """
import torch.nn.functional as F
def accumulate_tokens(model, micro_batches):
    window_tokens = sum(int((labels != -100).sum()) for _, labels in micro_batches)
    total = sum(
        F.cross_entropy(model(x).flatten(0, 1), y.flatten(), reduction="sum")
        for x, y in micro_batches
    ) / window_tokens
    total.backward()
    return total.item()
""",
    "whole_batch_forward": """
import torch
import torch.nn.functional as F
def accumulate_tokens(model, micro_batches):
    inputs = torch.cat([x for x, _ in micro_batches])
    labels = torch.cat([y for _, y in micro_batches])
    loss = F.cross_entropy(model(inputs).flatten(0, 1), labels.flatten())
    loss.backward()
    return loss.item()
""",
}
ACCUMULATE_TOKENS.update(
    {
        # The right loss into .grad by autograd.grad, added to .grad by hand: no backward().
        "correct_autograd_grad_into_grad": """
import torch
from coursekit.tokens import count_tokens, lm_loss
def accumulate_tokens(model, micro_batches):
    params = [p for p in model.parameters() if p.requires_grad]
    window_tokens = sum(count_tokens(labels) for _, labels in micro_batches)
    total = 0.0
    for inputs, labels in micro_batches:
        loss = lm_loss(model(inputs), labels, reduction="sum") / window_tokens
        grads = torch.autograd.grad(loss, params, allow_unused=True)
        for p, g in zip(params, grads):
            if g is not None:
                p.grad = g.clone() if p.grad is None else p.grad + g
        total += loss.item()
    return total
""",
        # The token count kept as a tensor, the logged loss summed as a detached tensor.
        "correct_tensor_count": """
import torch.nn.functional as F
def accumulate_tokens(model, micro_batches):
    window_tokens = sum((labels != -100).sum() for _, labels in micro_batches)
    logged = 0
    for inputs, labels in micro_batches:
        logits = model(inputs)
        loss = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), reduction="sum"
        ) / window_tokens
        loss.backward()
        logged = logged + loss.detach()
    return float(logged)
""",
        "window_from_first_micro_batch": _tokens(
            loss=f"{_SUM} / (int((micro_batches[0][1] != -100).sum()) * len(micro_batches))"
        ),
        "running_token_count": """
import torch.nn.functional as F
def accumulate_tokens(model, micro_batches):
    seen, logged = 0, 0.0
    for inputs, labels in micro_batches:
        seen += int((labels != -100).sum())
        loss = F.cross_entropy(
            model(inputs).flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum"
        ) / seen
        loss.backward()
        logged += loss.item()
    return logged
""",
        # An in-place change to the inputs: padding relabelled as token 0, so it counts.
        "padding_relabelled_in_place": """
import torch.nn.functional as F
def accumulate_tokens(model, micro_batches):
    window_tokens = sum(int((labels != -100).sum()) for _, labels in micro_batches)
    logged = 0.0
    for inputs, labels in micro_batches:
        labels[labels == -100] = 0
        loss = F.cross_entropy(
            model(inputs).flatten(0, 1), labels.flatten(), reduction="sum"
        ) / window_tokens
        loss.backward()
        logged += loss.item()
    return logged
""",
        # Stale state between calls: the token count kept in a default argument.
        "stale_token_count": """
import torch.nn.functional as F
def accumulate_tokens(model, micro_batches, _count=[0]):
    _count[0] += sum(int((labels != -100).sum()) for _, labels in micro_batches)
    logged = 0.0
    for inputs, labels in micro_batches:
        loss = F.cross_entropy(
            model(inputs).flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum"
        ) / _count[0]
        loss.backward()
        logged += loss.item()
    return logged
""",
        # Logs the last micro-batch's share only: = where += belongs.
        "logged_last_micro_batch": _TOKENS.replace(
            "logged += {logged}", "logged = {logged}"
        ).format(loss=f"{_SUM} / window_tokens", logged="loss.item()"),
    }
)

# For tests/helpers/mutation.py (see tests/corpora/student_code/__init__.py).
NON_TEXTBOOK = {
    ("accumulate_tokens", "window_from_first_micro_batch"),
    ("accumulate_tokens", "running_token_count"),
    ("accumulate_tokens", "padding_relabelled_in_place"),
    ("accumulate_tokens", "stale_token_count"),
}
UNNAMED: set = set()
# Variants named after the mistake the checks name (one that shows first, or the same
# mistake seen from outside).
NAMED_AS = {
    # the caller's labels changed in place: seen first, and true whatever else it did
    "padding_relabelled_in_place": "inputs_changed",
    "stale_token_count": "state_across_calls",
    "logged_last_micro_batch": "logged_loss_wrong",
}


# Side-effect mutants (tests/corpora/student_code/side_effects.py): the answer right, the
# caller's inputs or model, or torch's switches, left changed.
ACCUMULATE_TOKENS.update(
    side_effects.variants(
        ACCUMULATE_TOKENS["correct"],
        "accumulate_tokens",
        eval_mode_left=side_effects.EVAL_MODE_LEFT,
        hook_left=side_effects.HOOK_LEFT,
    )
)
NON_TEXTBOOK = NON_TEXTBOOK | {
    ("accumulate_tokens", "eval_mode_left"),
    ("accumulate_tokens", "hook_left"),
}
NAMED_AS = {
    **NAMED_AS,
    "eval_mode_left": side_effects.NAMED["eval_mode_left"],
    "hook_left": side_effects.NAMED["hook_left"],
}
# on a later spec the count is already stale at the first call: the scale is wrong, and said so
ALSO_NAMED = {("accumulate_tokens", "stale_token_count"): {"wrong_scale"}}
