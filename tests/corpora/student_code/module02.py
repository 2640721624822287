"""Module 2 hand-ins as students write them: the right answer and each known mistake."""

LOSS_SCALES = {
    "correct": """
def loss_scales(micro_batch_sizes, reduction):
    total = sum(micro_batch_sizes)
    if reduction == "mean":
        return [size / total for size in micro_batch_sizes]
    return [1 / total] * len(micro_batch_sizes)
""",
    "correct_with_numpy": """
import numpy as np
def loss_scales(micro_batch_sizes, reduction):
    sizes = np.array(micro_batch_sizes, dtype=float)
    if reduction == "mean":
        return list(sizes / sizes.sum())
    return list(np.ones_like(sizes) / sizes.sum())
""",
    "correct_in_float32": """
import torch
def loss_scales(micro_batch_sizes, reduction):
    sizes = torch.tensor(micro_batch_sizes, dtype=torch.float32)
    if reduction == "mean":
        return (sizes / sizes.sum()).tolist()
    return (torch.ones_like(sizes) / sizes.sum()).tolist()
""",
}
_SCALE_BODIES = {
    "mean_of_means": ("[1 / len(micro_batch_sizes)] * len(micro_batch_sizes)", None),
    "loss_not_divided": ("[1.0] * len(micro_batch_sizes)", None),
    "mean_treated_as_sum": ("[1 / total] * len(micro_batch_sizes)", None),
    "size_not_divided": ("[float(s) for s in micro_batch_sizes]", None),
    "sum_not_divided": (None, "[1.0] * len(micro_batch_sizes)"),
    "sum_divided_by_count": (None, "[1 / len(micro_batch_sizes)] * len(micro_batch_sizes)"),
    "sum_treated_as_mean": (None, "[s / total for s in micro_batch_sizes]"),
    "sum_divided_by_size": (None, "[1 / s for s in micro_batch_sizes]"),
}
for _mistake, (_mean, _sum) in _SCALE_BODIES.items():
    LOSS_SCALES[_mistake] = f"""
def loss_scales(micro_batch_sizes, reduction):
    total = sum(micro_batch_sizes)
    if reduction == "mean":
        return {_mean or "[s / total for s in micro_batch_sizes]"}
    return {_sum or "[1 / total] * len(micro_batch_sizes)"}
"""
LOSS_SCALES.update(
    {
        # A // from integer habits: every factor rounds down to 0.
        "integer_division": """
def loss_scales(micro_batch_sizes, reduction):
    total = sum(micro_batch_sizes)
    if reduction == "mean":
        return [size // total for size in micro_batch_sizes]
    return [1 // total] * len(micro_batch_sizes)
""",
        # The window's size read from its first micro-batch: wrong when the sizes differ.
        "window_from_first_micro_batch": """
def loss_scales(micro_batch_sizes, reduction):
    total = micro_batch_sizes[0] * len(micro_batch_sizes)
    if reduction == "mean":
        return [size / total for size in micro_batch_sizes]
    return [1 / total] * len(micro_batch_sizes)
""",
        # A running total instead of the window's final one.
        "running_total": """
def loss_scales(micro_batch_sizes, reduction):
    scales, seen = [], 0
    for size in micro_batch_sizes:
        seen += size
        scales.append(size / seen if reduction == "mean" else 1 / seen)
    return scales
""",
        # A dtype slip: the factors computed in float16 (about 3 significant digits).
        "in_float16": """
import torch
def loss_scales(micro_batch_sizes, reduction):
    sizes = torch.tensor(micro_batch_sizes, dtype=torch.float16)
    if reduction == "mean":
        return (sizes / sizes.sum()).tolist()
    return (torch.ones_like(sizes) / sizes.sum()).tolist()
""",
        # Stale state between calls: factors cached by the number of micro-batches.
        "cached_by_count": """
_cache = {}
def loss_scales(micro_batch_sizes, reduction):
    key = (len(micro_batch_sizes), reduction)
    if key not in _cache:
        total = sum(micro_batch_sizes)
        if reduction == "mean":
            _cache[key] = [size / total for size in micro_batch_sizes]
        else:
            _cache[key] = [1 / total] * len(micro_batch_sizes)
    return _cache[key]
""",
    }
)

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

_AMP = """
import torch
def amp_window(model, optimizer, scaler, loss_fn, micro_batches, max_norm):
    for inputs, targets in micro_batches:
        loss = {loss}
        {backward}
        {per_micro_batch}
    {unscale}
    {clip}
    {step}
    {update}
    {zero_grad}
"""
_AMP_RIGHT = {
    "loss": "loss_fn(model(inputs), targets) / len(micro_batches)",
    "backward": "scaler.scale(loss).backward()",
    "per_micro_batch": "pass",
    "unscale": "scaler.unscale_(optimizer)",
    "clip": "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)",
    "step": "scaler.step(optimizer)",
    "update": "scaler.update()",
    "zero_grad": "optimizer.zero_grad()",
}


def _amp(**changes):
    return _AMP.format(**{**_AMP_RIGHT, **changes})


AMP_WINDOW = {
    "correct": _amp(),
    "unscale_every_micro_batch": _amp(per_micro_batch="scaler.unscale_(optimizer)", unscale="pass"),
    "unscale_and_update_every_micro_batch": _amp(
        per_micro_batch="scaler.unscale_(optimizer); scaler.update()", unscale="pass"
    ),
    "update_every_micro_batch": _amp(per_micro_batch="scaler.update()", update="pass"),
    "step_every_micro_batch": _amp(
        per_micro_batch=(
            "scaler.unscale_(optimizer); "
            "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm); "
            "scaler.step(optimizer); scaler.update(); optimizer.zero_grad()"
        ),
        unscale="pass",
        clip="pass",
        step="pass",
        update="pass",
    ),
    "loss_not_scaled": _amp(backward="loss.backward()"),
    "optimizer_step_not_scaler": _amp(step="optimizer.step()"),
    "update_missing": _amp(update="pass"),
    "zero_grad_missing": _amp(zero_grad="pass"),
    "inf_micro_batch_dropped": _amp(
        backward="scaler.scale(loss).backward() if torch.isfinite(loss) else None"
    ),
    "clipped_before_unscale": _amp(unscale="pass"),
    "clipping_missing": _amp(clip="pass"),
    "loss_not_divided": _amp(loss="loss_fn(model(inputs), targets)"),
    "correct_clipping_the_scaled_gradients_at_the_scaled_threshold": _amp(
        unscale="pass",
        clip="torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm * scaler.get_scale())",
    ),
    "zero_grad_before_step": _amp(unscale="optimizer.zero_grad(); scaler.unscale_(optimizer)"),
    "update_before_step": _amp(
        unscale="scaler.update(); scaler.unscale_(optimizer)", update="pass"
    ),
    "single_backward": """
import torch
def amp_window(model, optimizer, scaler, loss_fn, micro_batches, max_norm):
    total = sum(loss_fn(model(x), y) for x, y in micro_batches) / len(micro_batches)
    scaler.scale(total).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
""",
    "whole_batch_forward": """
import torch
def amp_window(model, optimizer, scaler, loss_fn, micro_batches, max_norm):
    inputs = torch.cat([x for x, _ in micro_batches])
    targets = torch.cat([y for _, y in micro_batches])
    scaler.scale(loss_fn(model(inputs), targets)).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
""",
}
AMP_WINDOW.update(
    {
        "correct_in_place_division": _amp(
            loss="loss_fn(model(inputs), targets); loss /= len(micro_batches)",
            zero_grad="model.zero_grad(set_to_none=False)",
        ),
        "correct_divided_after_scaling": _amp(
            loss="loss_fn(model(inputs), targets)",
            backward="scaler.scale(loss).div(len(micro_batches)).backward()",
        ),
        # A dtype slip: the loss computed in bfloat16, without .float().
        "loss_in_bfloat16": _amp(
            loss="loss_fn(model(inputs).bfloat16(), targets.bfloat16()) / len(micro_batches)"
        ),
        # State not kept between calls: a new GradScaler every window (its scale never adapts),
        # the one given never used.
        "new_scaler_every_window": _amp().replace(
            "    for inputs, targets in micro_batches:",
            '    scaler = torch.amp.GradScaler("cpu")\n    for inputs, targets in micro_batches:',
        ),
        # Gradients cleared when the window starts, not when it ends: left for the caller.
        "grads_cleared_at_start_not_end": _amp(zero_grad="pass").replace(
            "    for inputs, targets in micro_batches:",
            "    optimizer.zero_grad()\n    for inputs, targets in micro_batches:",
        ),
        "clipped_after_step": _amp(
            clip="pass",
            step=(
                "scaler.step(optimizer)\n"
                "    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)"
            ),
        ),
        # An in-place change to the inputs: the inf target "cleaned", so the step is taken.
        "inf_targets_replaced_in_place": _amp(
            loss="loss_fn(model(inputs), targets.nan_to_num_(posinf=0.0)) / len(micro_batches)"
        ),
        "clipped_by_value": _amp(
            clip="torch.nn.utils.clip_grad_value_(model.parameters(), max_norm)"
        ),
    }
)

# Variants whose mistake is named after another one that shows first (or that is the same
# mistake seen from outside). tests/corpora/student_code/__init__.py reads
# AMP_WINDOW_NAMED_AS, keyed by variant.
NAMED_AS = {
    "own_count_alone": "token_count_not_summed_across_ranks",
    "all_reduced_a_copy": "token_count_not_summed_across_ranks",
    "unscale_and_update_every_micro_batch": "unscale_every_micro_batch",
    "loss_in_bfloat16": "loss_in_low_precision",
    "new_scaler_every_window": "scaler_not_used",
    "grads_cleared_at_start_not_end": "zero_grad_missing",
    "clipped_after_step": "clipping_missing",
    "inf_targets_replaced_in_place": "inf_step_not_skipped",
}
AMP_WINDOW_NAMED_AS = NAMED_AS

_SCHEDULED = """
def train_scheduled(model, optimizer, scheduler, loss_fn, micro_batches, accum_steps):
    micro_batches = list(micro_batches)
    for start in range(0, len(micro_batches), accum_steps):
        window = micro_batches[start : start + accum_steps]
        window_samples = sum(len(targets) for _, targets in window)
        for inputs, targets in window:
            loss = loss_fn(model(inputs), targets)
            (loss * len(targets) / window_samples).backward()
            {per_micro_batch}
        {before}
        optimizer.step()
        {after}
        optimizer.zero_grad()
"""


def _scheduled(per_micro_batch="pass", before="pass", after="scheduler.step()"):
    return _SCHEDULED.format(per_micro_batch=per_micro_batch, before=before, after=after)


TRAIN_SCHEDULED = {
    "correct": _scheduled(),
    "scheduler_every_micro_batch": _scheduled(per_micro_batch="scheduler.step()", after="pass"),
    "scheduler_before_optimizer": _scheduled(before="scheduler.step()", after="pass"),
    "scheduler_never_stepped": _scheduled(after="pass"),
    "mean_of_means": _SCHEDULED.replace(
        "(loss * len(targets) / window_samples)", "(loss / len(window))"
    ).format(per_micro_batch="pass", before="pass", after="scheduler.step()"),
    "step_every_micro_batch": """
def train_scheduled(model, optimizer, scheduler, loss_fn, micro_batches, accum_steps):
    for inputs, targets in micro_batches:
        (loss_fn(model(inputs), targets) / accum_steps).backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
""",
    "single_backward": """
def train_scheduled(model, optimizer, scheduler, loss_fn, micro_batches, accum_steps):
    micro_batches = list(micro_batches)
    for start in range(0, len(micro_batches), accum_steps):
        window = micro_batches[start : start + accum_steps]
        window_samples = sum(len(targets) for _, targets in window)
        total = sum(loss_fn(model(x), y) * len(y) / window_samples for x, y in window)
        total.backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
""",
    "whole_batch_forward": """
import torch
def train_scheduled(model, optimizer, scheduler, loss_fn, micro_batches, accum_steps):
    micro_batches = list(micro_batches)
    for start in range(0, len(micro_batches), accum_steps):
        window = micro_batches[start : start + accum_steps]
        inputs = torch.cat([x for x, _ in window])
        targets = torch.cat([y for _, y in window])
        loss_fn(model(inputs), targets).backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
""",
    "last_window_scaled_by_n": """
def train_scheduled(model, optimizer, scheduler, loss_fn, micro_batches, accum_steps):
    for i, (inputs, targets) in enumerate(micro_batches):
        (loss_fn(model(inputs), targets) / accum_steps).backward()
        if (i + 1) % accum_steps == 0 or i == len(micro_batches) - 1:
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
""",
}

_SCHEDULED_FULL_WINDOWS = """
def train_scheduled(model, optimizer, scheduler, loss_fn, micro_batches, accum_steps):
    micro_batches = list(micro_batches)
    full = len(micro_batches) - len(micro_batches) % accum_steps
    for start in range(0, full, accum_steps):
        window = micro_batches[start : start + accum_steps]
        window_samples = sum(len(targets) for _, targets in window)
        for inputs, targets in window:
            (loss_fn(model(inputs), targets) * len(targets) / window_samples).backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    rest = micro_batches[full:]
    if rest:  # the flush of the last, shorter window
        rest_samples = sum(len(targets) for _, targets in rest)
        for inputs, targets in rest:
            (loss_fn(model(inputs), targets) * len(targets) / rest_samples).backward()
        optimizer.step()
        {flush_scheduler}
        optimizer.zero_grad()
"""

TRAIN_SCHEDULED.update(
    {
        "correct_flush_after_the_loop": _SCHEDULED_FULL_WINDOWS.replace(
            "{flush_scheduler}", "scheduler.step()"
        ),
        # Boundaries by index, zero_grad before each window, the squared errors summed.
        "correct_enumerate_boundary": """
import torch
def train_scheduled(model, optimizer, scheduler, loss_fn, micro_batches, accum_steps):
    micro_batches = list(micro_batches)
    last = len(micro_batches) - 1
    for i, (inputs, targets) in enumerate(micro_batches):
        start = i - i % accum_steps
        if i == start:
            optimizer.zero_grad(set_to_none=True)
        window = micro_batches[start : start + accum_steps]
        window_samples = sum(t.numel() for _, t in window)
        squared = torch.nn.functional.mse_loss(model(inputs), targets, reduction="sum")
        (squared / window_samples).backward()
        if (i + 1) % accum_steps == 0 or i == last:
            optimizer.step()
            scheduler.step()
    optimizer.zero_grad()
""",
        # A step outside the main loop (the flush of the last, shorter window) without the
        # scheduler: the weights are right, the schedule ends one step behind.
        "flush_omits_scheduler": _SCHEDULED_FULL_WINDOWS.replace("{flush_scheduler}", "pass"),
        # The scheduler stepped once, after the loop: a step outside the loop.
        "scheduler_after_the_loop": _scheduled(after="pass") + "    scheduler.step()\n",
        # The window's size read from its first micro-batch: wrong when the last is shorter.
        "window_from_first_micro_batch": _SCHEDULED.replace(
            "sum(len(targets) for _, targets in window)", "len(window) * len(window[0][1])"
        ).format(per_micro_batch="pass", before="pass", after="scheduler.step()"),
        # A dtype slip: the shares computed from an int tensor come out in float32.
        "shares_in_float32": """
import torch
def train_scheduled(model, optimizer, scheduler, loss_fn, micro_batches, accum_steps):
    micro_batches = list(micro_batches)
    for start in range(0, len(micro_batches), accum_steps):
        window = micro_batches[start : start + accum_steps]
        sizes = torch.tensor([len(targets) for _, targets in window])
        shares = sizes / sizes.sum()
        for (inputs, targets), share in zip(window, shares):
            (loss_fn(model(inputs), targets) * share).backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
""",
        "last_window_dropped": """
def train_scheduled(model, optimizer, scheduler, loss_fn, micro_batches, accum_steps):
    micro_batches = list(micro_batches)
    for start in range(0, len(micro_batches) - accum_steps + 1, accum_steps):
        window = micro_batches[start : start + accum_steps]
        window_samples = sum(len(targets) for _, targets in window)
        for inputs, targets in window:
            (loss_fn(model(inputs), targets) * len(targets) / window_samples).backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
""",
        "off_by_one_boundary": """
def train_scheduled(model, optimizer, scheduler, loss_fn, micro_batches, accum_steps):
    micro_batches = list(micro_batches)
    for i, (inputs, targets) in enumerate(micro_batches):
        start = i - i % accum_steps
        window_samples = sum(len(t) for _, t in micro_batches[start : start + accum_steps])
        (loss_fn(model(inputs), targets) * len(targets) / window_samples).backward()
        if i % accum_steps == 0 or i == len(micro_batches) - 1:
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
""",
    }
)
NAMED_AS.update(
    {
        "flush_omits_scheduler": "scheduler_skipped",
        "stale_token_count": "wrong_scale",
        "functions_imported_by_name": "token_count_not_summed_across_ranks",
        "bf16_buffer_returned": "accumulated_in_bf16",
        "bf16_buffer_converted": "accumulated_in_bf16",
        "whole_window_at_once": "whole_batch_forward",
        "sums_in_float16": "sums_not_float32",
        "model_cast_and_back": "model_cast",
        "float32_copy": "model_cast",
        "logged_last_micro_batch": "logged_loss_wrong",
    }
)

_RANKS = """
import torch
import torch.distributed as dist


def global_token_scale(local_token_counts):
{body}
"""


def _ranks(body):
    return _RANKS.format(body=body)


GLOBAL_TOKEN_SCALE = {
    "correct": _ranks(
        "    total = torch.tensor(float(sum(local_token_counts)))\n"
        "    dist.all_reduce(total)\n"
        "    return dist.get_world_size() / total.item()"
    ),
    "correct_per_micro_batch_tensor": _ranks(
        "    counts = torch.tensor(local_token_counts, dtype=torch.float64)\n"
        "    dist.all_reduce(counts)\n"
        "    return dist.get_world_size() / counts.sum().item()"
    ),
    "correct_averaged_count": _ranks(
        "    total = torch.tensor(float(sum(local_token_counts)))\n"
        "    dist.all_reduce(total, op=dist.ReduceOp.AVG)  # the mean count per rank\n"
        "    return 1 / total.item()"
    ),
    "correct_int64_tensor": _ranks(
        "    total = torch.tensor(sum(local_token_counts), dtype=torch.int64)\n"
        "    dist.all_reduce(total, op=dist.ReduceOp.SUM)\n"
        "    return float(dist.get_world_size() / int(total))"
    ),
    "correct_async": _ranks(
        "    total = torch.tensor(float(sum(local_token_counts)))\n"
        "    work = dist.all_reduce(total, async_op=True)\n"
        "    work.wait()\n"
        "    return dist.get_world_size() / total.item()"
    ),
    "correct_through_c10d": _ranks(
        "    from torch.distributed import distributed_c10d as c10d\n"
        "    total = torch.tensor(float(sum(local_token_counts)))\n"
        "    c10d.all_reduce(total)\n"
        "    return c10d.get_world_size() / total.item()"
    ),
    "all_reduce_not_sum": _ranks(
        "    total = torch.tensor(float(sum(local_token_counts)))\n"
        "    dist.all_reduce(total, op=dist.ReduceOp.MAX)\n"
        "    return dist.get_world_size() / total.item()"
    ),
    # the world size counted with a second collective: right, but two all_reduces
    "several_all_reduces": _ranks(
        "    total = torch.tensor(float(sum(local_token_counts)))\n"
        "    dist.all_reduce(total)\n"
        "    ranks = torch.ones(())\n"
        "    dist.all_reduce(ranks)\n"
        "    return ranks.item() / total.item()"
    ),
    "token_count_not_summed_across_ranks": _ranks(
        "    return dist.get_world_size() / sum(local_token_counts)"
    ),
    "world_size_not_multiplied": _ranks(
        "    total = torch.tensor(float(sum(local_token_counts)))\n"
        "    dist.all_reduce(total)\n"
        "    return 1 / total.item()"
    ),
    "divided_by_world_size": _ranks(
        "    total = torch.tensor(float(sum(local_token_counts)))\n"
        "    dist.all_reduce(total)\n"
        "    return 1 / (total.item() * dist.get_world_size())"
    ),
    "averaged_not_summed": _ranks(
        "    total = torch.tensor(float(sum(local_token_counts)))\n"
        "    dist.all_reduce(total, op=dist.ReduceOp.AVG)\n"
        "    return dist.get_world_size() / total.item()"
    ),
    "all_reduce_per_micro_batch": _ranks(
        "    total = 0.0\n"
        "    for count in local_token_counts:\n"
        "        one = torch.tensor(float(count))\n"
        "        dist.all_reduce(one)\n"
        "        total += one.item()\n"
        "    return dist.get_world_size() / total"
    ),
    "scale_per_micro_batch": _ranks(
        "    first = torch.tensor(float(local_token_counts[0]))\n"
        "    dist.all_reduce(first)\n"
        "    return dist.get_world_size() / first.item()"
    ),
    # the own count alone, and DDP's average not undone either
    "own_count_alone": _ranks("    return 1 / sum(local_token_counts)"),
    # the functions imported by name, so the check cannot play the other ranks: in one
    # process this is the own count alone, named so, with a hint to call them through dist
    "functions_imported_by_name": """
import torch
from torch.distributed import all_reduce, get_world_size


def global_token_scale(local_token_counts):
    total = torch.tensor(float(sum(local_token_counts)))
    all_reduce(total)
    return get_world_size() / total.item()
""",
    # non-textbook: the all-reduce lands in a copy; the local count is what is used
    "all_reduced_a_copy": _ranks(
        "    total = torch.tensor(float(sum(local_token_counts)))\n"
        "    dist.all_reduce(total.clone())\n"
        "    return dist.get_world_size() / total.item()"
    ),
    # non-textbook: the count of sequences (micro-batch entries), not of tokens
    "micro_batches_counted": _ranks(
        "    total = torch.tensor(float(len(local_token_counts)))\n"
        "    dist.all_reduce(total)\n"
        "    return dist.get_world_size() / total.item()"
    ),
    # non-textbook: integer division of the world size by the count
    "integer_division": _ranks(
        "    total = torch.tensor(sum(local_token_counts))\n"
        "    dist.all_reduce(total)\n"
        "    return float(dist.get_world_size() // int(total))"
    ),
}

_FLOAT32 = """
import torch
def accumulate_in_float32(model, loss_fn, micro_batches):
{body}
"""


def _float32(body):
    return _FLOAT32.format(body=body)


ACCUMULATE_IN_FLOAT32 = {
    "correct": _float32(
        "    sums = [torch.zeros_like(p, dtype=torch.float32) for p in model.parameters()]\n"
        "    for inputs, targets in micro_batches:\n"
        "        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()\n"
        "        for total, p in zip(sums, model.parameters()):\n"
        "            total += p.grad.float()\n"
        "            p.grad = None\n"
        "    return sums"
    ),
    # the micro-batch gradients kept and summed at the end, in float32, in another order
    "correct_summed_at_the_end": _float32(
        "    parts = []\n"
        "    for inputs, targets in micro_batches:\n"
        "        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()\n"
        "        parts.append([p.grad.float() for p in model.parameters()])\n"
        "        model.zero_grad(set_to_none=True)\n"
        "    return [torch.stack(column).sum(0) for column in zip(*parts)]"
    ),
    # add_ with an explicit conversion, and zero_grad() to clear
    "correct_with_add_": _float32(
        "    sums = [torch.zeros(p.shape, dtype=torch.float32) for p in model.parameters()]\n"
        "    for inputs, targets in micro_batches:\n"
        "        loss = loss_fn(model(inputs), targets) / len(micro_batches)\n"
        "        loss.backward()\n"
        "        for i, p in enumerate(model.parameters()):\n"
        "            sums[i].add_(p.grad.to(torch.float32))\n"
        "        model.zero_grad()\n"
        "    return sums"
    ),
    # float64 sums: finer than asked, and accepted
    "correct_in_float64": _float32(
        "    sums = [torch.zeros_like(p, dtype=torch.float64) for p in model.parameters()]\n"
        "    for inputs, targets in micro_batches:\n"
        "        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()\n"
        "        for total, p in zip(sums, model.parameters()):\n"
        "            total += p.grad.double()\n"
        "            p.grad = None\n"
        "    return sums"
    ),
    # the loss computed in float32: its bf16 gradients round a little differently
    "correct_loss_in_float32": _float32(
        "    sums = [torch.zeros_like(p, dtype=torch.float32) for p in model.parameters()]\n"
        "    for inputs, targets in micro_batches:\n"
        "        loss = loss_fn(model(inputs).float(), targets.float()) / len(micro_batches)\n"
        "        loss.backward()\n"
        "        for total, p in zip(sums, model.parameters()):\n"
        "            total += p.grad.float()\n"
        "            p.grad = None\n"
        "    return sums"
    ),
    # the undivided losses' gradients summed, the sums divided at the end
    "correct_divided_at_the_end": _float32(
        "    sums = [torch.zeros_like(p, dtype=torch.float32) for p in model.parameters()]\n"
        "    for inputs, targets in micro_batches:\n"
        "        loss_fn(model(inputs), targets).backward()\n"
        "        for total, p in zip(sums, model.parameters()):\n"
        "            total += p.grad\n"
        "            p.grad = None\n"
        "    return [total / len(micro_batches) for total in sums]"
    ),
    # forward and loss under autocast
    "correct_under_autocast": _float32(
        "    sums = [torch.zeros_like(p, dtype=torch.float32) for p in model.parameters()]\n"
        "    for inputs, targets in micro_batches:\n"
        "        with torch.autocast('cpu', dtype=torch.bfloat16):\n"
        "            loss = loss_fn(model(inputs), targets) / len(micro_batches)\n"
        "        loss.backward()\n"
        "        for total, p in zip(sums, model.parameters()):\n"
        "            total += p.grad\n"
        "            p.grad = None\n"
        "    return sums"
    ),
    # .grad left to add up in bf16, converted at the end: the pitfall itself
    "accumulated_in_bf16": _float32(
        "    for inputs, targets in micro_batches:\n"
        "        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()\n"
        "    return [p.grad.float() for p in model.parameters()]"
    ),
    # a bf16 buffer, returned as it is
    "bf16_buffer_returned": _float32(
        "    sums = [torch.zeros_like(p) for p in model.parameters()]\n"
        "    for inputs, targets in micro_batches:\n"
        "        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()\n"
        "        for total, p in zip(sums, model.parameters()):\n"
        "            total += p.grad\n"
        "            p.grad = None\n"
        "    return sums"
    ),
    # a bf16 buffer, converted at the end
    "bf16_buffer_converted": _float32(
        "    sums = [torch.zeros_like(p) for p in model.parameters()]\n"
        "    for inputs, targets in micro_batches:\n"
        "        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()\n"
        "        for total, p in zip(sums, model.parameters()):\n"
        "            total += p.grad\n"
        "            p.grad = None\n"
        "    return [total.float() for total in sums]"
    ),
    "loss_not_divided": _float32(
        "    sums = [torch.zeros_like(p, dtype=torch.float32) for p in model.parameters()]\n"
        "    for inputs, targets in micro_batches:\n"
        "        loss_fn(model(inputs), targets).backward()\n"
        "        for total, p in zip(sums, model.parameters()):\n"
        "            total += p.grad.float()\n"
        "            p.grad = None\n"
        "    return sums"
    ),
    # .grad never cleared: every micro-batch adds the running .grad again
    "grad_not_cleared": _float32(
        "    sums = [torch.zeros_like(p, dtype=torch.float32) for p in model.parameters()]\n"
        "    for inputs, targets in micro_batches:\n"
        "        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()\n"
        "        for total, p in zip(sums, model.parameters()):\n"
        "            total += p.grad.float()\n"
        "    return sums"
    ),
    # the model cast to float32 for the backward: more accurate, and the memory is gone
    "model_cast": _float32(
        "    model.float()\n"
        "    for inputs, targets in micro_batches:\n"
        "        loss = loss_fn(model(inputs.float()), targets.float()) / len(micro_batches)\n"
        "        loss.backward()\n"
        "    return [p.grad for p in model.parameters()]"
    ),
    # float16 sums: 11 significant bits, and a range too small for tiny gradients
    "sums_in_float16": _float32(
        "    sums = [torch.zeros_like(p, dtype=torch.float16) for p in model.parameters()]\n"
        "    for inputs, targets in micro_batches:\n"
        "        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()\n"
        "        for total, p in zip(sums, model.parameters()):\n"
        "            total += p.grad\n"
        "            p.grad = None\n"
        "    return sums"
    ),
    # non-textbook: the loss divided twice
    "divided_twice": _float32(
        "    n = len(micro_batches)\n"
        "    sums = [torch.zeros_like(p, dtype=torch.float32) for p in model.parameters()]\n"
        "    for inputs, targets in micro_batches:\n"
        "        (loss_fn(model(inputs), targets) / n / n).backward()\n"
        "        for total, p in zip(sums, model.parameters()):\n"
        "            total += p.grad\n"
        "            p.grad = None\n"
        "    return sums"
    ),
    # non-textbook: the sums returned after the first micro-batch
    "first_micro_batch_only": _float32(
        "    sums = [torch.zeros_like(p, dtype=torch.float32) for p in model.parameters()]\n"
        "    for inputs, targets in micro_batches:\n"
        "        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()\n"
        "        for total, p in zip(sums, model.parameters()):\n"
        "            total += p.grad\n"
        "            p.grad = None\n"
        "        return sums"
    ),
    # one backward for the summed losses: every micro-batch's graph alive at once
    "single_backward": _float32(
        "    total = sum(loss_fn(model(x), y) for x, y in micro_batches) / len(micro_batches)\n"
        "    total.backward()\n"
        "    return [p.grad.float() for p in model.parameters()]"
    ),
    # the model cast to float32 for the window and back to bf16 afterwards
    "model_cast_and_back": _float32(
        "    model.float()\n"
        "    for inputs, targets in micro_batches:\n"
        "        loss = loss_fn(model(inputs.float()), targets.float()) / len(micro_batches)\n"
        "        loss.backward()\n"
        "    sums = [p.grad.clone() for p in model.parameters()]\n"
        "    model.zero_grad(set_to_none=True)\n"
        "    model.to(torch.bfloat16)\n"
        "    return sums"
    ),
    # a float32 copy of the model does the work
    "float32_copy": _float32(
        "    import copy\n"
        "    twin = copy.deepcopy(model).float()\n"
        "    for inputs, targets in micro_batches:\n"
        "        loss = loss_fn(twin(inputs.float()), targets.float()) / len(micro_batches)\n"
        "        loss.backward()\n"
        "    return [p.grad for p in twin.parameters()]"
    ),
    # the last micro-batch left out of the sums
    "micro_batch_skipped": _float32(
        "    sums = [torch.zeros_like(p, dtype=torch.float32) for p in model.parameters()]\n"
        "    for inputs, targets in micro_batches[:-1]:\n"
        "        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()\n"
        "        for total, p in zip(sums, model.parameters()):\n"
        "            total += p.grad\n"
        "            p.grad = None\n"
        "    return sums"
    ),
    # the whole window in one forward: no accumulation at all
    "whole_window_at_once": _float32(
        "    inputs = torch.cat([x for x, _ in micro_batches])\n"
        "    targets = torch.cat([y for _, y in micro_batches])\n"
        "    loss_fn(model(inputs), targets).backward()\n"
        "    return [p.grad.float() for p in model.parameters()]"
    ),
}


BY_QUESTION = {
    "loss_scales": LOSS_SCALES,
    "accumulate_tokens": ACCUMULATE_TOKENS,
    "global_token_scale": GLOBAL_TOKEN_SCALE,
    "accumulate_in_float32": ACCUMULATE_IN_FLOAT32,
    "amp_window": AMP_WINDOW,
    "train_scheduled": TRAIN_SCHEDULED,
}

# For tests/helpers/mutation.py (see tests/corpora/student_code/__init__.py).
NON_TEXTBOOK = {
    ("loss_scales", "integer_division"),
    ("loss_scales", "window_from_first_micro_batch"),
    ("loss_scales", "running_total"),
    ("loss_scales", "in_float16"),
    ("loss_scales", "cached_by_count"),
    ("accumulate_tokens", "window_from_first_micro_batch"),
    ("accumulate_tokens", "running_token_count"),
    ("accumulate_tokens", "padding_relabelled_in_place"),
    ("accumulate_tokens", "stale_token_count"),
    ("amp_window", "loss_in_bfloat16"),
    ("amp_window", "new_scaler_every_window"),
    ("amp_window", "grads_cleared_at_start_not_end"),
    ("amp_window", "inf_targets_replaced_in_place"),
    ("amp_window", "inf_micro_batch_dropped"),
    ("train_scheduled", "flush_omits_scheduler"),
    ("train_scheduled", "scheduler_after_the_loop"),
    ("train_scheduled", "window_from_first_micro_batch"),
    ("train_scheduled", "shares_in_float32"),
    ("train_scheduled", "last_window_scaled_by_n"),
    ("global_token_scale", "all_reduced_a_copy"),
    ("global_token_scale", "micro_batches_counted"),
    ("global_token_scale", "integer_division"),
    ("accumulate_in_float32", "divided_twice"),
    ("accumulate_in_float32", "first_micro_batch_only"),
}
HIDDEN_ONLY: set[tuple[str, str]] = set()
UNNAMED = {
    ("loss_scales", "in_float16"),
    ("loss_scales", "cached_by_count"),
    ("accumulate_tokens", "padding_relabelled_in_place"),
    ("train_scheduled", "scheduler_after_the_loop"),
    ("train_scheduled", "shares_in_float32"),
    ("global_token_scale", "micro_batches_counted"),
    ("global_token_scale", "integer_division"),
    ("accumulate_in_float32", "divided_twice"),
    ("accumulate_in_float32", "first_micro_batch_only"),
}
ALSO_NAMED = {
    # With a window of one micro-batch, leaving out the last leaves no backward at all.
    ("accumulate_in_float32", "micro_batch_skipped"): {"no_backward"},
    # With a window of one micro-batch, update() per micro-batch runs twice (named so).
    ("amp_window", "unscale_and_update_every_micro_batch"): {"update_every_micro_batch"},
    # With a window of one micro-batch, update() per micro-batch is update() before the step.
    ("amp_window", "update_every_micro_batch"): {"update_before_step"},
    # Dividing by accum_steps is dividing by the window's count when the last window is full
    # but its last micro-batch short: the mean of means, too.
    ("train_scheduled", "last_window_scaled_by_n"): {"mean_of_means"},
    # Where no entry exceeds max_norm, clipping by value did not clip at all.
    ("amp_window", "clipped_by_value"): {"clipping_missing"},
}
