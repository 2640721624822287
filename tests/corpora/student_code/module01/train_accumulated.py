"""``train_accumulated`` hand-ins: the right loop and each known mistake, as source."""

from tests.corpora.student_code import side_effects

_LOOP = """
def train_accumulated(model, optimizer, loss_fn, micro_batches, accum_steps):
    micro_batches = list(micro_batches)
    count = len(micro_batches)
    losses, window_loss = [], 0.0
    for i, (inputs, targets) in enumerate(micro_batches):
        window = micro_batches[i - i % accum_steps : i - i % accum_steps + accum_steps]
        window_samples = sum(len(t) for _, t in window)
        {zero_inside}loss = loss_fn(model(inputs), targets)
        ({scaled}).backward()
        window_loss += {logged}
        if {boundary}:
            {step_and_zero}
            losses.append(window_loss)
            window_loss = 0.0
    return losses
"""
_RIGHT = {
    "zero_inside": "",
    "scaled": "loss * len(targets) / window_samples",
    "logged": "loss.item() * len(targets) / window_samples",
    "boundary": "(i + 1) % accum_steps == 0 or i == count - 1",
    "step_and_zero": "optimizer.step()\n            optimizer.zero_grad()",
}


def _loop(**changes):
    return _LOOP.format(**{**_RIGHT, **changes})


TRAIN_ACCUMULATED = {
    "correct": _loop(),
    # Correct too, written another way: windows first, model.zero_grad, set_to_none.
    "correct_by_windows": """
def train_accumulated(model, optimizer, loss_fn, micro_batches, accum_steps):
    micro_batches = list(micro_batches)
    logged = []
    for start in range(0, len(micro_batches), accum_steps):
        window = micro_batches[start:start + accum_steps]
        total = sum(len(y) for _, y in window)
        window_loss = 0.0
        for x, y in window:
            loss = loss_fn(model(x), y) * len(y) / total
            loss.backward()
            window_loss += loss.item()
        optimizer.step()
        model.zero_grad(set_to_none=True)
        logged.append(window_loss)
    return logged
""",
    "loss_not_divided": _loop(scaled="loss"),
    "mean_of_means": _loop(scaled="loss / len(window)", logged="loss.item() / len(window)"),
    "step_every_micro_batch": _loop(boundary="True"),
    "zero_grad_inside_loop": _loop(zero_inside="optimizer.zero_grad()\n        "),
    "zero_grad_missing": _loop(step_and_zero="optimizer.step()"),
    "zero_grad_before_step": _loop(
        step_and_zero="optimizer.zero_grad()\n            optimizer.step()"
    ),
    "last_window_dropped": _loop(boundary="(i + 1) % accum_steps == 0"),
    "last_window_scaled_by_n": _loop(scaled="loss / accum_steps"),
    "off_by_one_boundary": _loop(boundary="i % accum_steps == 0 or i == count - 1"),
    "logged_scaled_loss": _loop(logged="loss.item() * len(targets) / window_samples / accum_steps"),
    "single_backward": """
def train_accumulated(model, optimizer, loss_fn, micro_batches, accum_steps):
    micro_batches = list(micro_batches)
    logged = []
    for start in range(0, len(micro_batches), accum_steps):
        window = micro_batches[start:start + accum_steps]
        total = sum(len(y) for _, y in window)
        window_loss = sum(loss_fn(model(x), y) * len(y) / total for x, y in window)
        window_loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        logged.append(window_loss.item())
    return logged
""",
    # Correct too (issue 14, a hand-in marked down before): each micro-batch's gradient from
    # torch.autograd.grad into buffers, .grad set from them, one step per window. The
    # exercise asks for one step per window and the mean gradient, not for backward().
    "correct_autograd_grad": """
import torch
def train_accumulated(model, optimizer, loss_fn, micro_batches, accum_steps):
    micro_batches = list(micro_batches)
    params = [p for p in model.parameters() if p.requires_grad]
    losses = []
    for start in range(0, len(micro_batches), accum_steps):
        window = micro_batches[start:start + accum_steps]
        window_samples = sum(len(y) for _, y in window)
        buffers = [torch.zeros_like(p) for p in params]
        window_loss = 0.0
        for x, y in window:
            loss = loss_fn(model(x), y)
            share = len(y) / window_samples
            for buffer, grad in zip(buffers, torch.autograd.grad(loss * share, params)):
                buffer += grad
            window_loss += loss.item() * share
        for p, buffer in zip(params, buffers):
            p.grad = buffer
        optimizer.step()
        optimizer.zero_grad()
        losses.append(window_loss)
    return losses
""",
    # Correct too: an index loop with the window's end precomputed, the window loss kept as a
    # detached tensor and read once per step.
    "correct_detached_tensor_log": """
def train_accumulated(model, optimizer, loss_fn, micro_batches, accum_steps):
    micro_batches = list(micro_batches)
    losses, running = [], 0.0
    for i, (x, y) in enumerate(micro_batches):
        start = i - i % accum_steps
        end = min(start + accum_steps, len(micro_batches))
        window_samples = sum(len(t) for _, t in micro_batches[start:end])
        loss = loss_fn(model(x), y) * (len(y) / window_samples)
        loss.backward()
        running = running + loss.detach()
        if i + 1 == end:
            optimizer.step()
            optimizer.zero_grad(set_to_none=False)
            losses.append(float(running))
            running = 0.0
    return losses
""",
    # Non-textbook: window_samples assumes every micro-batch is full, so a smaller last
    # micro-batch is under-weighted (sizes that do not divide).
    "partial_micro_batch_as_full": _loop().replace(
        "window_samples = sum(len(t) for _, t in window)",
        "window_samples = len(window) * len(window[0][1])",
    ),
    # Non-textbook: full windows step inside the loop; the last, shorter window is flushed
    # after it, without zero_grad (a step outside the loop). Only a second call sees it.
    "flush_without_zero_grad": """
def train_accumulated(model, optimizer, loss_fn, micro_batches, accum_steps):
    micro_batches = list(micro_batches)
    losses, window_loss, pending = [], 0.0, 0
    for i, (x, y) in enumerate(micro_batches):
        start = i - i % accum_steps
        window_samples = sum(len(t) for _, t in micro_batches[start:start + accum_steps])
        loss = loss_fn(model(x), y)
        (loss * len(y) / window_samples).backward()
        window_loss += loss.item() * len(y) / window_samples
        pending += 1
        if pending == accum_steps:
            optimizer.step()
            optimizer.zero_grad()
            losses.append(window_loss)
            window_loss, pending = 0.0, 0
    if pending:
        optimizer.step()
        losses.append(window_loss)
    return losses
""",
    # Non-textbook: stale state between calls, a mutable default argument.
    "losses_kept_between_calls": """
def train_accumulated(model, optimizer, loss_fn, micro_batches, accum_steps, losses=[]):
    micro_batches = list(micro_batches)
    for start in range(0, len(micro_batches), accum_steps):
        window = micro_batches[start:start + accum_steps]
        total = sum(len(y) for _, y in window)
        window_loss = 0.0
        for x, y in window:
            loss = loss_fn(model(x), y) * len(y) / total
            loss.backward()
            window_loss += loss.item()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(window_loss)
    return losses
""",
    # Non-textbook: an in-place change to the input, windows popped off the caller's list.
    "micro_batches_modified": """
def train_accumulated(model, optimizer, loss_fn, micro_batches, accum_steps):
    losses = []
    while micro_batches:
        window = [micro_batches.pop(0) for _ in range(min(accum_steps, len(micro_batches)))]
        total = sum(len(y) for _, y in window)
        window_loss = 0.0
        for x, y in window:
            loss = loss_fn(model(x), y) * len(y) / total
            loss.backward()
            window_loss += loss.item()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(window_loss)
    return losses
""",
    # Non-textbook: .data misuse, a hand-written SGD update instead of optimizer.step():
    # right for plain SGD, wrong with momentum or Adam (only the hidden specs use them).
    "optimizer_not_stepped": """
import torch
def train_accumulated(model, optimizer, loss_fn, micro_batches, accum_steps):
    micro_batches = list(micro_batches)
    lr = optimizer.param_groups[0]["lr"]
    losses = []
    for start in range(0, len(micro_batches), accum_steps):
        window = micro_batches[start:start + accum_steps]
        total = sum(len(y) for _, y in window)
        window_loss = 0.0
        for x, y in window:
            loss = loss_fn(model(x), y) * len(y) / total
            loss.backward()
            window_loss += loss.item()
        for p in model.parameters():
            p.data -= lr * p.grad.data
        optimizer.zero_grad()
        losses.append(window_loss)
    return losses
""",
    # Non-textbook: a dtype slip, the logged loss summed in a float32 tensor.
    "losses_in_float32": """
import torch
def train_accumulated(model, optimizer, loss_fn, micro_batches, accum_steps):
    micro_batches = list(micro_batches)
    losses = []
    for start in range(0, len(micro_batches), accum_steps):
        window = micro_batches[start:start + accum_steps]
        total = sum(len(y) for _, y in window)
        window_loss = torch.zeros(())
        for x, y in window:
            loss = loss_fn(model(x), y) * len(y) / total
            loss.backward()
            window_loss += loss.detach()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(window_loss.item())
    return losses
""",
}

# For tests/helpers/mutation.py (see tests/corpora/student_code/__init__.py).
NON_TEXTBOOK = {
    ("train_accumulated", "partial_micro_batch_as_full"),
    ("train_accumulated", "flush_without_zero_grad"),
    ("train_accumulated", "losses_kept_between_calls"),
    ("train_accumulated", "micro_batches_modified"),
    ("train_accumulated", "optimizer_not_stepped"),
    ("train_accumulated", "losses_in_float32"),
}
# The public check passes these; only the grader's hidden specs (fixed ones) catch them.
HIDDEN_ONLY = {
    ("train_accumulated", "flush_without_zero_grad"),
    ("train_accumulated", "optimizer_not_stepped"),
}
# No name is true of this one: the feedback says which window or step differs instead.
UNNAMED = {("train_accumulated", "partial_micro_batch_as_full")}
# Variants named after the mistake the checks name.
NAMED_AS = {
    "losses_in_float32": "logged_loss_wrong",
    "flush_without_zero_grad": "grads_left_after_last_step",
}


# Side-effect mutants (tests/corpora/student_code/side_effects.py): the answer right, the
# caller's inputs or model, or torch's switches, left changed.
TRAIN_ACCUMULATED.update(
    side_effects.variants(
        TRAIN_ACCUMULATED["correct"],
        "train_accumulated",
        eval_mode_left=side_effects.EVAL_MODE_LEFT,
        hook_left=side_effects.HOOK_LEFT,
    )
)
NON_TEXTBOOK = NON_TEXTBOOK | {
    ("train_accumulated", "eval_mode_left"),
    ("train_accumulated", "hook_left"),
}
NAMED_AS = {
    **NAMED_AS,
    "eval_mode_left": side_effects.NAMED["eval_mode_left"],
    "hook_left": side_effects.NAMED["hook_left"],
}

# What feedback must say to name the mistake of an UNNAMED mutant (a crash names it by
# its own error and line).
DESCRIBED = {
    ("train_accumulated", "partial_micro_batch_as_full"): r"its last micro-batch ha",
}
