"""Module 5 hand-ins as students write them: the right answer and each known mistake."""

_PLAN = """
import math

def plan_accumulation(target_batch, max_micro_batch):
    if max_micro_batch < 1:
        {refuse}
    count = {count}
    base, extra = divmod(target_batch, count)
    return {sizes}
"""


def _plan(
    refuse='raise ValueError("not even one sample fits: try checkpointing or bf16")',
    count="math.ceil(target_batch / max_micro_batch)",
    sizes="[base + 1] * extra + [base] * (count - extra)",
):
    return _PLAN.format(refuse=refuse, count=count, sizes=sizes)


PLAN_ACCUMULATION = {
    "correct": _plan(),
    "correct_full_micro_batches_then_the_rest": """
def plan_accumulation(target_batch, max_micro_batch):
    if max_micro_batch < 1:
        raise ValueError("nothing fits")
    full, rest = divmod(target_batch, max_micro_batch)
    return [max_micro_batch] * full + ([rest] if rest else [])
""",
    "remainder_dropped": _plan(
        count="target_batch // max_micro_batch", sizes="[max_micro_batch] * count"
    ),
    "rounded_up": _plan(sizes="[max_micro_batch] * count"),
    "too_many_micro_batches": _plan(count="math.ceil(target_batch / max_micro_batch) + 1"),
    "over_budget": _plan(count="max(1, target_batch // max_micro_batch)"),
    "nothing_fits_not_refused": _plan(refuse="return []"),
    "wrong_exception": _plan(refuse='raise ZeroDivisionError("nothing fits")'),
}

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


RECIPE_WINDOW = {
    "correct": _recipe(),
    "mean_of_means": _recipe(loss="lm_loss(logits, labels) / len(window)"),
    "padding_counted": _recipe(loss='lm_loss(logits, labels, "sum") / positions'),
    "loss_not_divided": _recipe(loss='lm_loss(logits, labels, "sum")'),
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
    loss = lm_loss(model(inputs), labels)
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
    total = sum(lm_loss(model(x), y, "sum") for x, y in window) / tokens
    total.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
    return total.item()
""",
    "logged_loss_wrong": _recipe(logged="lm_loss(logits, labels).item() / len(window)"),
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
}

BY_QUESTION = {"plan_accumulation": PLAN_ACCUMULATION, "recipe_window": RECIPE_WINDOW}
NAMED_AS = {"clip_after_step": "clipping_missing"}
