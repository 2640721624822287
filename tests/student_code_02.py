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
# Two mistakes the counts name before the weights do.
AMP_WINDOW_NAMED_AS = {"unscale_and_update_every_micro_batch": "unscale_every_micro_batch"}

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

BY_QUESTION = {
    "loss_scales": LOSS_SCALES,
    "accumulate_tokens": ACCUMULATE_TOKENS,
    "amp_window": AMP_WINDOW,
    "train_scheduled": TRAIN_SCHEDULED,
}
