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
    "correct_searching_the_count": """
def plan_accumulation(target_batch, max_micro_batch):
    if max_micro_batch < 1:
        raise ValueError("not even one sample fits")
    count = 1
    while -(-target_batch // count) > max_micro_batch:  # the largest share must fit
        count += 1
    return [target_batch // count + (i < target_batch % count) for i in range(count)]
""",
    "correct_with_numpy": """
import numpy as np

def plan_accumulation(target_batch, max_micro_batch):
    if max_micro_batch < 1:
        raise ValueError("not even one sample fits")
    count = -(-target_batch // max_micro_batch)
    return [len(part) for part in np.array_split(np.arange(target_batch), count)]
""",
    # non-textbook: a search that skips candidates (1, 2, 4, 8, ...: never 3)
    "search_skips_candidates": """
def plan_accumulation(target_batch, max_micro_batch):
    if max_micro_batch < 1:
        raise ValueError("not even one sample fits")
    count = 1
    while -(-target_batch // count) > max_micro_batch:
        count *= 2
    base, extra = divmod(target_batch, count)
    return [base + 1] * extra + [base] * (count - extra)
""",
    # non-textbook: a search for equal sizes only; a prime target falls back to single samples
    "divisor_search": """
def plan_accumulation(target_batch, max_micro_batch):
    if max_micro_batch < 1:
        raise ValueError("not even one sample fits")
    size = min(max_micro_batch, target_batch)
    while target_batch % size:
        size -= 1
    return [size] * (target_batch // size)
""",
    # a search whose test is one step too strict: an exact multiple gets one more
    "off_by_one_search": """
def plan_accumulation(target_batch, max_micro_batch):
    if max_micro_batch < 1:
        raise ValueError("not even one sample fits")
    count = 1
    while target_batch / count >= max_micro_batch:
        count += 1
    base, extra = divmod(target_batch, count)
    return [base + 1] * extra + [base] * (count - extra)
""",
    # non-textbook precision slip: round() rounds half to even, so 3.5 -> 4 but 4.5 -> 4
    "rounded_half_to_even": _plan(count="round(target_batch / max_micro_batch + 0.5)"),
    # non-textbook dtype slip: true division, so sizes such as 25.25
    "sizes_not_whole": _plan(sizes="[target_batch / count] * count"),
    # non-textbook boundary: only 0 refused; a negative maximum is planned for
    "only_zero_refused": _plan().replace("if max_micro_batch < 1:", "if max_micro_batch == 0:"),
    # non-textbook stale state: plans remembered by target alone, between calls
    "stale_plan_cache": """
_PLANS = {}

def plan_accumulation(target_batch, max_micro_batch):
    if max_micro_batch < 1:
        raise ValueError("not even one sample fits")
    if target_batch not in _PLANS:
        count = -(-target_batch // max_micro_batch)
        base, extra = divmod(target_batch, count)
        _PLANS[target_batch] = [base + 1] * extra + [base] * (count - extra)
    return _PLANS[target_batch]
""",
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

_COUNTS = """
def count_steps(micro_batches_per_epoch, accum_steps, epochs, num_processes):
    per_epoch = {per_epoch}
    optimizer_steps = {optimizer_steps}
    return {{
        "optimizer_steps": optimizer_steps,
        "prepared_scheduler_total": {scheduler},
        "deepspeed_steps": {deepspeed},
        "deepspeed_loss_divisor": {divisor},
    }}
"""


def _counts(
    per_epoch="-(-micro_batches_per_epoch // accum_steps)",
    optimizer_steps="per_epoch * epochs",
    scheduler="optimizer_steps * num_processes",
    deepspeed="micro_batches_per_epoch * epochs // accum_steps",
    divisor="1",
):
    return _COUNTS.format(
        per_epoch=per_epoch,
        optimizer_steps=optimizer_steps,
        scheduler=scheduler,
        deepspeed=deepspeed,
        divisor=divisor,
    )


COUNT_STEPS = {
    "correct": _counts(),
    "correct_with_math_ceil": "import math\n"
    + _counts(per_epoch="math.ceil(micro_batches_per_epoch / accum_steps)"),
    "correct_by_simulation": """
def count_steps(micro_batches_per_epoch, accum_steps, epochs, num_processes):
    loop = engine = seen = 0
    for _ in range(epochs):
        for index in range(micro_batches_per_epoch):
            if (index + 1) % accum_steps == 0 or index + 1 == micro_batches_per_epoch:
                loop += 1
            if (seen + 1) % accum_steps == 0:
                engine += 1
            seen += 1
    return {
        "optimizer_steps": loop,
        "prepared_scheduler_total": loop * num_processes,
        "deepspeed_steps": engine,
        "deepspeed_loss_divisor": 1,
    }
""",
    "correct_with_divmod": _counts(
        per_epoch="micro_batches_per_epoch // accum_steps "
        "+ (micro_batches_per_epoch % accum_steps != 0)"
    ),
    "schedule_in_micro_steps": _counts(optimizer_steps="micro_batches_per_epoch * epochs"),
    "short_window_not_counted": _counts(per_epoch="micro_batches_per_epoch // accum_steps"),
    "scheduler_not_multiplied": _counts(scheduler="optimizer_steps"),
    "deepspeed_counted_like_the_loop": _counts(deepspeed="optimizer_steps"),
    "loss_divided_twice_with_deepspeed": _counts(divisor="accum_steps"),
    "epochs_ignored": _counts(optimizer_steps="per_epoch"),
    # non-textbook: the whole run as one stream of windows, for the loop too
    "windows_across_epochs": _counts(
        optimizer_steps="-(-micro_batches_per_epoch * epochs // accum_steps)"
    ),
    # non-textbook: the per-process micro-batches divided by the processes once more
    "micro_batches_split_across_processes": _counts(
        per_epoch="-(-micro_batches_per_epoch // (accum_steps * num_processes))"
    ),
    "scheduler_divided_by_processes": _counts(scheduler="optimizer_steps // num_processes"),
    "scheduler_in_micro_steps": _counts(
        scheduler="micro_batches_per_epoch * epochs * num_processes"
    ),
    # non-textbook: the engine's leftovers at the very end counted as a step
    "deepspeed_rounded_up": _counts(
        deepspeed="-(-micro_batches_per_epoch * epochs // accum_steps)"
    ),
    "deepspeed_windows_per_epoch": _counts(
        deepspeed="micro_batches_per_epoch // accum_steps * epochs"
    ),
    # non-textbook dtype slip: true division and a float ceiling
    "counts_as_floats": _counts(per_epoch="float(-(-micro_batches_per_epoch // accum_steps))"),
    # non-textbook: a NamedTuple, not the dict the exercise asks for
    "tuple_returned": """
def count_steps(micro_batches_per_epoch, accum_steps, epochs, num_processes):
    steps = -(-micro_batches_per_epoch // accum_steps) * epochs
    return (steps, steps * num_processes, micro_batches_per_epoch * epochs // accum_steps, 1)
""",
}

BY_QUESTION = {
    "plan_accumulation": PLAN_ACCUMULATION,
    "recipe_window": RECIPE_WINDOW,
    "count_steps": COUNT_STEPS,
}
NAMED_AS = {
    "clip_after_step": "clipping_missing",
    "search_skips_candidates": "too_many_micro_batches",
    "divisor_search": "too_many_micro_batches",
    "off_by_one_search": "too_many_micro_batches",
    "rounded_half_to_even": "too_many_micro_batches",
    "only_zero_refused": "nothing_fits_not_refused",
    "stale_plan_cache": "too_many_micro_batches",
    "loss_scaled_through_data": "loss_not_divided",
    "clip_on_data": "clipping_missing",
    "labels_changed_in_place": "window_changed_in_place",
    "flush_without_scheduler": "scheduler_skipped",
    "flush_without_clipping": "clipping_missing",
    "logged_total_kept_between_calls": "logged_loss_wrong",
    "counts_as_floats": "not_an_int",
}

_P, _R, _C = "plan_accumulation", "recipe_window", "count_steps"
NON_TEXTBOOK: set[tuple[str, str]] = {
    (_P, "search_skips_candidates"),
    (_P, "divisor_search"),
    (_P, "rounded_half_to_even"),
    (_P, "sizes_not_whole"),
    (_P, "only_zero_refused"),
    (_P, "stale_plan_cache"),
    (_R, "loss_in_bf16"),
    (_R, "loss_scaled_through_data"),
    (_R, "clip_on_data"),
    (_R, "labels_changed_in_place"),
    (_R, "flush_without_scheduler"),
    (_R, "flush_without_clipping"),
    (_R, "logged_total_kept_between_calls"),
    (_R, "tokens_from_first_micro_batch"),
    (_C, "windows_across_epochs"),
    (_C, "micro_batches_split_across_processes"),
    (_C, "deepspeed_rounded_up"),
    (_C, "counts_as_floats"),
    (_C, "tuple_returned"),
}
# the public specs pass them: only the grader's fixed hidden specs catch them
HIDDEN_ONLY: set[tuple[str, str]] = {(_P, "only_zero_refused"), (_P, "stale_plan_cache")}
# no name fits: the message says which window's weights (or losses) differ
UNNAMED: set[tuple[str, str]] = {(_R, "tokens_from_first_micro_batch"), (_C, "tuple_returned")}
ALSO_NAMED: dict[tuple[str, str], set[str]] = {
    # a plan remembered for another maximum may also hold too large a micro-batch
    (_P, "stale_plan_cache"): {"over_budget"},
    # a bf16 loss also logs a bf16-rounded loss
    (_R, "loss_in_bf16"): {"logged_loss_wrong"},
}
