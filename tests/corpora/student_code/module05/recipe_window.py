"""``recipe_window`` hand-ins: the right answer and each known mistake, as source."""

from tests.corpora.student_code import side_effects

_RECIPE = """
import torch
from coursekit import count_tokens, lm_loss

def recipe_window(model, optimizer, scheduler, window, max_norm, dtype=None):
    window_tokens = sum(count_tokens(labels) for _, labels in window)
    positions = sum(labels.numel() for _, labels in window)
    logged = 0.0
    for inputs, labels in window:
        with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
            logits = model(inputs)
        loss = {loss}
        loss.backward()
        logged += {logged}
        {each_micro_batch}
    {before_step}
    optimizer.step()
    {after_step}
    return logged
"""

_CLIP = "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)"


def _recipe(
    loss='lm_loss(logits.float(), labels, "sum") / window_tokens',
    logged="loss.item()",
    each_micro_batch="",
    before_step=_CLIP,
    after_step="scheduler.step()\n    optimizer.zero_grad(set_to_none=True)",
):
    return _RECIPE.format(
        loss=loss,
        logged=logged,
        each_micro_batch=each_micro_batch,
        before_step=before_step,
        after_step=after_step,
    )


_FLUSH = """
import torch
from coursekit import count_tokens, lm_loss

def recipe_window(model, optimizer, scheduler, window, max_norm, dtype=None):
    if not hasattr(optimizer, "accum_steps"):
        optimizer.accum_steps = len(window)  # a full window: set on the first call
    window_tokens = sum(count_tokens(labels) for _, labels in window)
    logged = 0.0
    for i, (inputs, labels) in enumerate(window):
        with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
            logits = model(inputs)
        loss = lm_loss(logits.float(), labels, "sum") / window_tokens
        loss.backward()
        logged += loss.item()
        if (i + 1) % optimizer.accum_steps == 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
    if len(window) % optimizer.accum_steps:  # the last, shorter window
        {flush}
        optimizer.zero_grad(set_to_none=True)
    return logged
"""


def _flush(flush):
    return _FLUSH.replace("{flush}", flush)


RECIPE_WINDOW = {
    "correct": _recipe(),
    "mean_of_means": _recipe(loss="lm_loss(logits.float(), labels) / len(window)"),
    "padding_counted": _recipe(loss='lm_loss(logits.float(), labels, "sum") / positions'),
    "loss_not_divided": _recipe(loss='lm_loss(logits.float(), labels, "sum")'),
    "clip_every_micro_batch": _recipe(each_micro_batch=_CLIP, before_step=""),
    "clipping_missing": _recipe(before_step=""),
    "clip_after_step": _recipe(
        before_step="",
        after_step=f"{_CLIP}\n    scheduler.step()\n    optimizer.zero_grad(set_to_none=True)",
    ),
    "zero_grad_missing": _recipe(after_step="scheduler.step()"),
    "scheduler_before_optimizer": _recipe(
        before_step=f"{_CLIP}\n    scheduler.step()",
        after_step="optimizer.zero_grad(set_to_none=True)",
    ),
    "scheduler_never_stepped": _recipe(after_step="optimizer.zero_grad(set_to_none=True)"),
    "scheduler_every_micro_batch": _recipe(
        each_micro_batch="scheduler.step()",
        after_step="optimizer.zero_grad(set_to_none=True)",
    ),
    "step_every_micro_batch": _recipe(
        each_micro_batch=f"{_CLIP}\n        optimizer.step()\n        scheduler.step()\n"
        "        optimizer.zero_grad()",
        before_step="",
        after_step="",
    ).replace("    optimizer.step()\n    \n", ""),
    "whole_batch_forward": """
import torch
from coursekit import count_tokens, lm_loss

def recipe_window(model, optimizer, scheduler, window, max_norm, dtype=None):
    inputs = torch.cat([x for x, _ in window])
    labels = torch.cat([y for _, y in window])
    with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
        logits = model(inputs)
    loss = lm_loss(logits.float(), labels)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
    return loss.item()
""",
    "single_backward": """
import torch
from coursekit import count_tokens, lm_loss

def recipe_window(model, optimizer, scheduler, window, max_norm, dtype=None):
    tokens = sum(count_tokens(y) for _, y in window)
    total = 0
    for x, y in window:
        with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
            logits = model(x)
        total = total + lm_loss(logits.float(), y, "sum") / tokens
    total.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
    return total.item()
""",
    "logged_loss_wrong": _recipe(logged="lm_loss(logits.float(), labels).item() / len(window)"),
    "autocast_missing": _recipe().replace(
        'torch.autocast("cpu", dtype=dtype, enabled=dtype is not None)', "torch.enable_grad()"
    ),
    "autocast_without_dtype": _recipe().replace(
        'torch.autocast("cpu", dtype=dtype, enabled=dtype is not None)',
        'torch.autocast("cpu", dtype=dtype or torch.bfloat16)',
    ),
    "zero_grad_at_window_start": _recipe(after_step="scheduler.step()").replace(
        "    logged = 0.0\n", "    optimizer.zero_grad()\n    logged = 0.0\n"
    ),
    "correct_with_zero_grad_keeping_zeros": _recipe(
        after_step="scheduler.step()\n    optimizer.zero_grad(set_to_none=False)"
    ),
    "correct_with_the_loss_as_mean_times_tokens": _recipe(
        loss="lm_loss(logits.float(), labels) * count_tokens(labels) / window_tokens"
    ),
    "correct_grads_divided_and_clipped_by_hand": """
import torch
from coursekit import count_tokens, lm_loss

def recipe_window(model, optimizer, scheduler, window, max_norm, dtype=None):
    window_tokens = sum(count_tokens(labels) for _, labels in window)
    total = 0.0
    for inputs, labels in window:
        with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
            logits = model(inputs)
        loss = lm_loss(logits.float(), labels, "sum")
        loss.backward()
        total += loss.item()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    for grad in grads:
        grad.div_(window_tokens)
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    for grad in grads:
        grad.mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return total / window_tokens
""",
    # non-textbook dtype slip: the loss from bf16 logits, no .float()
    "loss_in_bf16": _recipe(loss='lm_loss(logits, labels, "sum") / window_tokens'),
    # non-textbook .data misuse: the division hidden from autograd, so the log is right and
    # the gradient is not divided
    "loss_scaled_through_data": _recipe(loss='lm_loss(logits.float(), labels, "sum")').replace(
        "        loss.backward()\n",
        "        loss.data /= window_tokens  # the number to log\n        loss.backward()\n",
    ),
    # non-textbook .data misuse: clipping tensors that share the weights' memory but have no .grad
    "clip_on_data": _recipe(
        before_step="torch.nn.utils.clip_grad_norm_([p.data for p in model.parameters()], max_norm)"
    ),
    # non-textbook in-place change to the inputs: padding labels overwritten in the caller's
    # tensor (the loss itself is right)
    "labels_changed_in_place": _recipe(
        loss="(torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), "
        'reduction="none") * mask.flatten()).sum() / window_tokens'
    ).replace(
        "        loss = ",
        "        mask = labels != -100\n        labels.masked_fill_(~mask, 0)\n        loss = ",
    ),
    # non-textbook stale state and a step outside the main loop: accum_steps remembered from
    # the first window, so the last, shorter window is stepped by a flush after the loop...
    # ... that forgets the scheduler
    "flush_without_scheduler": _flush(_CLIP + "\n        optimizer.step()"),
    # ... that forgets clipping
    "flush_without_clipping": _flush("optimizer.step()\n        scheduler.step()"),
    # non-textbook stale state: the logged total is kept between calls
    "logged_total_kept_between_calls": "\nlogged = 0.0  # the running total"
    + _recipe().replace("    logged = 0.0\n", "    global logged\n"),
    # non-textbook partial window: the token count taken from the first micro-batch, as if
    # every micro-batch had as many real tokens
    "tokens_from_first_micro_batch": _recipe().replace(
        "sum(count_tokens(labels) for _, labels in window)",
        "count_tokens(window[0][1]) * len(window)",
    ),
}

# Variants whose mistake is named after another one that shows first.
NAMED_AS = {
    "clip_after_step": "clipping_missing",
    "loss_scaled_through_data": "loss_not_divided",
    "clip_on_data": "clipping_missing",
    "labels_changed_in_place": "window_changed_in_place",
    "flush_without_scheduler": "scheduler_skipped",
    "flush_without_clipping": "clipping_missing",
    "logged_total_kept_between_calls": "logged_loss_wrong",
}

# Mutation-testing sets (tests/helpers/mutation.py; tests/corpora/student_code/__init__.py
# says what each means).
NON_TEXTBOOK: set[tuple[str, str]] = {
    ("recipe_window", "loss_in_bf16"),
    ("recipe_window", "loss_scaled_through_data"),
    ("recipe_window", "clip_on_data"),
    ("recipe_window", "labels_changed_in_place"),
    ("recipe_window", "flush_without_scheduler"),
    ("recipe_window", "flush_without_clipping"),
    ("recipe_window", "logged_total_kept_between_calls"),
    ("recipe_window", "tokens_from_first_micro_batch"),
}
# no name fits: the message says which window's weights (or losses) differ
UNNAMED: set[tuple[str, str]] = {("recipe_window", "tokens_from_first_micro_batch")}
ALSO_NAMED: dict[tuple[str, str], set[str]] = {
    # a bf16 loss also logs a bf16-rounded loss
    ("recipe_window", "loss_in_bf16"): {"logged_loss_wrong"},
}


# Side-effect mutants (tests/corpora/student_code/side_effects.py): the answer right, the
# caller's inputs or model, or torch's switches, left changed.
RECIPE_WINDOW.update(
    side_effects.variants(
        RECIPE_WINDOW["correct"],
        "recipe_window",
        eval_mode_left=side_effects.EVAL_MODE_LEFT,
    )
)
# the labels, already aligned with the logits, shifted once more as for raw token ids
RECIPE_WINDOW["labels_shifted_again"] = RECIPE_WINDOW["correct"].replace(
    'lm_loss(logits.float(), labels, "sum")',
    'lm_loss(logits.float()[:, :-1], labels[:, 1:], "sum")',
)
NON_TEXTBOOK = NON_TEXTBOOK | {
    ("recipe_window", "eval_mode_left"),
    ("recipe_window", "labels_shifted_again"),
}
NAMED_AS = {**NAMED_AS, "eval_mode_left": side_effects.NAMED["eval_mode_left"]}
