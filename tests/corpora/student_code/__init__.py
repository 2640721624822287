"""Hand-ins as students write them: the right answer and each known mistake, as source text.

Source text, not functions, because the same code is injected into exercise notebooks to
test that the notebook run names the mistake too (tests/test_notebooks.py).
"""

from tests.corpora.student_code import (
    module02 as student_code_02,
)
from tests.corpora.student_code import (
    module03 as student_code_03,
)
from tests.corpora.student_code import (
    module04 as student_code_04,
)
from tests.corpora.student_code import (
    module05 as student_code_05,
)
from tests.corpora.student_code import (
    module06_batch as student_code_06_batch,
)
from tests.corpora.student_code import (
    module06_noise as student_code_06_noise,
)

ACCUMULATE_WINDOW = {
    "correct": """
def accumulate_window(model, loss_fn, micro_batches):
    for inputs, targets in micro_batches:
        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()
""",
    "loss_not_divided": """
def accumulate_window(model, loss_fn, micro_batches):
    for inputs, targets in micro_batches:
        loss_fn(model(inputs), targets).backward()
""",
    # the loss negated: a gradient -1 times the right one is a sign, not a scale, to fix
    "wrong_sign": """
def accumulate_window(model, loss_fn, micro_batches):
    for inputs, targets in micro_batches:
        (-loss_fn(model(inputs), targets) / len(micro_batches)).backward()
""",
    "zero_grad_inside_loop": """
def accumulate_window(model, loss_fn, micro_batches):
    for inputs, targets in micro_batches:
        model.zero_grad()
        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()
""",
    "first_micro_batch_only": """
def accumulate_window(model, loss_fn, micro_batches):
    for inputs, targets in micro_batches:
        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()
        return
""",
    "divided_twice": """
def accumulate_window(model, loss_fn, micro_batches):
    n = len(micro_batches)
    for inputs, targets in micro_batches:
        (loss_fn(model(inputs), targets) / n).backward()
    for p in model.parameters():
        p.grad /= n
""",
    "no_backward": """
def accumulate_window(model, loss_fn, micro_batches):
    for inputs, targets in micro_batches:
        loss = loss_fn(model(inputs), targets) / len(micro_batches)
""",
    "single_backward": """
def accumulate_window(model, loss_fn, micro_batches):
    total = sum(loss_fn(model(x), y) for x, y in micro_batches) / len(micro_batches)
    total.backward()
""",
    "stepped_in_window": """
import torch
def accumulate_window(model, loss_fn, micro_batches):
    for inputs, targets in micro_batches:
        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()
    torch.optim.SGD(model.parameters(), lr=0.1).step()
""",
    "whole_batch_forward": """
import torch
def accumulate_window(model, loss_fn, micro_batches):
    inputs = torch.cat([x for x, _ in micro_batches])
    targets = torch.cat([y for _, y in micro_batches])
    loss_fn(model(inputs), targets).backward()
""",
    # Correct too: the scale computed once, an index loop, torch.autograd.backward.
    "correct_scale_once": """
def accumulate_window(model, loss_fn, micro_batches):
    scale = 1.0 / len(micro_batches)
    for i in range(len(micro_batches)):
        inputs, targets = micro_batches[i]
        loss = loss_fn(model(inputs), targets)
        (loss * scale).backward()
""",
    "correct_autograd_backward": """
import torch
def accumulate_window(model, loss_fn, micro_batches):
    n = len(micro_batches)
    for inputs, targets in micro_batches:
        torch.autograd.backward(loss_fn(model(inputs), targets) / n)
""",
    # Non-textbook: a range that stops one early, so the last micro-batch never runs.
    "micro_batch_skipped": """
def accumulate_window(model, loss_fn, micro_batches):
    for i in range(len(micro_batches) - 1):
        inputs, targets = micro_batches[i]
        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()
""",
    # Non-textbook: gradients summed in float32 buffers (torch.zeros' default dtype).
    "float32_accumulation": """
import torch
def accumulate_window(model, loss_fn, micro_batches):
    params = list(model.parameters())
    sums = [torch.zeros(p.shape) for p in params]
    for inputs, targets in micro_batches:
        model.zero_grad()
        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()
        for total, p in zip(sums, params):
            total += p.grad
    for total, p in zip(sums, params):
        p.grad = total.to(p.dtype)
""",
    # Non-textbook: a tidy-up after the loop clears what the loop accumulated.
    "gradients_cleared": """
def accumulate_window(model, loss_fn, micro_batches):
    for inputs, targets in micro_batches:
        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()
    model.zero_grad()
""",
}

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

PLAN_MICRO_BATCH = {
    "correct": """
import coursekit
def plan_micro_batch(model, make_inputs, budget_bytes, effective_batch_size):
    for size in range(effective_batch_size, 0, -1):
        if effective_batch_size % size == 0:
            if coursekit.activation_bytes(model, make_inputs(size)) <= budget_bytes:
                return size, effective_batch_size // size
    raise ValueError("nothing fits")
""",
    "not_largest": """
import coursekit
def plan_micro_batch(model, make_inputs, budget_bytes, effective_batch_size):
    for size in range(effective_batch_size, 0, -1):
        if effective_batch_size % size == 0:
            if coursekit.activation_bytes(model, make_inputs(size)) < budget_bytes:
                return size, effective_batch_size // size
    raise ValueError("nothing fits")
""",
    "does_not_fit": """
import coursekit
def plan_micro_batch(model, make_inputs, budget_bytes, effective_batch_size):
    divisors = [m for m in range(1, effective_batch_size + 1) if effective_batch_size % m == 0]
    for index, size in enumerate(divisors):
        if coursekit.activation_bytes(model, make_inputs(size)) > budget_bytes:
            return size, effective_batch_size // size
    return divisors[-1], 1
""",
    "effective_batch_wrong": """
import coursekit
def plan_micro_batch(model, make_inputs, budget_bytes, effective_batch_size):
    for size in range(effective_batch_size, 0, -1):
        if effective_batch_size % size == 0:
            if coursekit.activation_bytes(model, make_inputs(size)) <= budget_bytes:
                return size, effective_batch_size
    raise ValueError("nothing fits")
""",
    "swapped": """
import coursekit
def plan_micro_batch(model, make_inputs, budget_bytes, effective_batch_size):
    for size in range(effective_batch_size, 0, -1):
        if effective_batch_size % size == 0:
            if coursekit.activation_bytes(model, make_inputs(size)) <= budget_bytes:
                return effective_batch_size // size, size
    raise ValueError("nothing fits")
""",
    "nothing_fits_not_raised": """
import coursekit
def plan_micro_batch(model, make_inputs, budget_bytes, effective_batch_size):
    for size in range(effective_batch_size, 0, -1):
        if effective_batch_size % size == 0:
            if coursekit.activation_bytes(model, make_inputs(size)) <= budget_bytes:
                return size, effective_batch_size // size
    return 1, effective_batch_size
""",
    # Correct too: divisors found first and searched from the top; a bisection over the
    # sorted divisors (the bytes grow with the size).
    "correct_divisors_first": """
from coursekit import activation_bytes
def plan_micro_batch(model, make_inputs, budget_bytes, effective_batch_size):
    divisors = [d for d in range(1, effective_batch_size + 1) if effective_batch_size % d == 0]
    fitting = [d for d in divisors if activation_bytes(model, make_inputs(d)) <= budget_bytes]
    if not fitting:
        raise ValueError(f"Not even one sample fits in {budget_bytes} bytes.")
    return max(fitting), effective_batch_size // max(fitting)
""",
    "correct_bisection": """
import coursekit
def plan_micro_batch(model, make_inputs, budget_bytes, effective_batch_size):
    sizes = [d for d in range(1, effective_batch_size + 1) if effective_batch_size % d == 0]
    low, high = 0, len(sizes)  # sizes[:low] fit, sizes[high:] do not
    while low < high:
        middle = (low + high) // 2
        if coursekit.activation_bytes(model, make_inputs(sizes[middle])) <= budget_bytes:
            low = middle + 1
        else:
            high = middle
    if low == 0:
        raise ValueError("Not even one sample fits.")
    return sizes[low - 1], effective_batch_size // sizes[low - 1]
""",
    # Non-textbook searches that skip candidates: halving from the effective batch (every
    # public case lies on its path), powers of two only, divisors up to the square root only,
    # a range that starts below the effective batch, a range that stops before 1.
    "halving_search": """
import coursekit
def plan_micro_batch(model, make_inputs, budget_bytes, effective_batch_size):
    size = effective_batch_size
    while size >= 1:
        if effective_batch_size % size == 0:
            if coursekit.activation_bytes(model, make_inputs(size)) <= budget_bytes:
                return size, effective_batch_size // size
        size //= 2
    raise ValueError("nothing fits")
""",
    "powers_of_two_only": """
import coursekit
def plan_micro_batch(model, make_inputs, budget_bytes, effective_batch_size):
    best = None
    size = 1
    while size <= effective_batch_size and effective_batch_size % size == 0:
        if coursekit.activation_bytes(model, make_inputs(size)) > budget_bytes:
            break
        best = size
        size *= 2
    if best is None:
        raise ValueError("nothing fits")
    return best, effective_batch_size // best
""",
    "divisors_up_to_square_root": """
import math
import coursekit
def plan_micro_batch(model, make_inputs, budget_bytes, effective_batch_size):
    divisors = [d for d in range(1, math.isqrt(effective_batch_size) + 1)
                if effective_batch_size % d == 0]
    for size in reversed(divisors):
        if coursekit.activation_bytes(model, make_inputs(size)) <= budget_bytes:
            return size, effective_batch_size // size
    raise ValueError("nothing fits")
""",
    "largest_size_skipped": """
import coursekit
def plan_micro_batch(model, make_inputs, budget_bytes, effective_batch_size):
    for size in range(effective_batch_size - 1, 0, -1):
        if effective_batch_size % size == 0:
            if coursekit.activation_bytes(model, make_inputs(size)) <= budget_bytes:
                return size, effective_batch_size // size
    raise ValueError("nothing fits")
""",
    "size_one_skipped": """
import coursekit
def plan_micro_batch(model, make_inputs, budget_bytes, effective_batch_size):
    for size in range(effective_batch_size, 1, -1):
        if effective_batch_size % size == 0:
            if coursekit.activation_bytes(model, make_inputs(size)) <= budget_bytes:
                return size, effective_batch_size // size
    raise ValueError("nothing fits")
""",
    # Non-textbook: a units slip, bytes compared as KiB with a budget in bytes.
    "bytes_as_kib": """
import coursekit
def plan_micro_batch(model, make_inputs, budget_bytes, effective_batch_size):
    for size in range(effective_batch_size, 0, -1):
        if effective_batch_size % size == 0:
            if coursekit.activation_bytes(model, make_inputs(size)) / 1024 <= budget_bytes:
                return size, effective_batch_size // size
    raise ValueError("nothing fits")
""",
    # Non-textbook: stale state between calls, measurements cached by size alone.
    "stale_measurements": """
import coursekit
_bytes_by_size = {}
def plan_micro_batch(model, make_inputs, budget_bytes, effective_batch_size):
    for size in range(effective_batch_size, 0, -1):
        if effective_batch_size % size == 0:
            if size not in _bytes_by_size:
                _bytes_by_size[size] = coursekit.activation_bytes(model, make_inputs(size))
            if _bytes_by_size[size] <= budget_bytes:
                return size, effective_batch_size // size
    raise ValueError("nothing fits")
""",
}

EFFECTIVE_BATCH_SIZE = {
    "correct": """
def effective_batch_size(micro_batch_size, accum_steps, world_size=1):
    return micro_batch_size * accum_steps * world_size
""",
    "world_size_ignored": """
def effective_batch_size(micro_batch_size, accum_steps, world_size=1):
    return micro_batch_size * accum_steps
""",
    "added_not_multiplied": """
def effective_batch_size(micro_batch_size, accum_steps, world_size=1):
    return micro_batch_size + accum_steps + world_size
""",
    "added_world_size": """
def effective_batch_size(micro_batch_size, accum_steps, world_size=1):
    return micro_batch_size * accum_steps + world_size
""",
    "accum_steps_ignored": """
def effective_batch_size(micro_batch_size, accum_steps, world_size=1):
    return micro_batch_size * world_size
""",
    "micro_batch_size_ignored": """
def effective_batch_size(micro_batch_size, accum_steps, world_size=1):
    return accum_steps * world_size
""",
    "returned_none": """
def effective_batch_size(micro_batch_size, accum_steps, world_size=1):
    print(micro_batch_size * accum_steps * world_size)
""",
    # Non-textbook: the global batch split across processes instead of multiplied.
    "divided_by_world_size": """
def effective_batch_size(micro_batch_size, accum_steps, world_size=1):
    return micro_batch_size * accum_steps // world_size
""",
    # Non-textbook: world_size applied twice (once per process "and once for the step").
    "world_size_counted_twice": """
def effective_batch_size(micro_batch_size, accum_steps, world_size=1):
    per_process = micro_batch_size * accum_steps * world_size
    return per_process * world_size
""",
    # Non-textbook dtype slips: a float, a string, a float tensor.
    "returns_float": """
def effective_batch_size(micro_batch_size, accum_steps, world_size=1):
    return float(micro_batch_size * accum_steps * world_size)
""",
    "returns_string": """
def effective_batch_size(micro_batch_size, accum_steps, world_size=1):
    return f"{micro_batch_size * accum_steps * world_size}"
""",
    "returns_float_tensor": """
import torch
def effective_batch_size(micro_batch_size, accum_steps, world_size=1):
    return torch.tensor([micro_batch_size, accum_steps, world_size], dtype=torch.float32).prod()
""",
    # Correct too: math.prod, and a NumPy integer (as good as a Python int).
    "correct_math_prod": """
import math
def effective_batch_size(micro_batch_size, accum_steps, world_size=1):
    return math.prod((micro_batch_size, accum_steps, world_size))
""",
    "correct_numpy": """
import numpy as np
def effective_batch_size(micro_batch_size, accum_steps, world_size=1):
    return np.prod(np.array([micro_batch_size, accum_steps, world_size], dtype=np.int64))
""",
}

BY_QUESTION = {
    "effective_batch_size": EFFECTIVE_BATCH_SIZE,
    "accumulate_window": ACCUMULATE_WINDOW,
    "train_accumulated": TRAIN_ACCUMULATED,
    "plan_micro_batch": PLAN_MICRO_BATCH,
    **student_code_02.BY_QUESTION,
    **student_code_03.BY_QUESTION,
    **student_code_04.BY_QUESTION,
    **student_code_05.BY_QUESTION,
    **student_code_06_noise.BY_QUESTION,
    **student_code_06_batch.BY_QUESTION,
}

# Modules 0 and 1's mutation-testing sets; each module file has its own (see below).
_NON_TEXTBOOK_01: set[tuple[str, str]] = {
    ("effective_batch_size", "divided_by_world_size"),
    ("effective_batch_size", "world_size_counted_twice"),
    ("effective_batch_size", "returns_float"),
    ("effective_batch_size", "returns_string"),
    ("effective_batch_size", "returns_float_tensor"),
    ("accumulate_window", "micro_batch_skipped"),
    ("accumulate_window", "float32_accumulation"),
    ("accumulate_window", "gradients_cleared"),
    ("train_accumulated", "partial_micro_batch_as_full"),
    ("train_accumulated", "flush_without_zero_grad"),
    ("train_accumulated", "losses_kept_between_calls"),
    ("train_accumulated", "micro_batches_modified"),
    ("train_accumulated", "optimizer_not_stepped"),
    ("train_accumulated", "losses_in_float32"),
    ("plan_micro_batch", "halving_search"),
    ("plan_micro_batch", "powers_of_two_only"),
    ("plan_micro_batch", "divisors_up_to_square_root"),
    ("plan_micro_batch", "largest_size_skipped"),
    ("plan_micro_batch", "size_one_skipped"),
    ("plan_micro_batch", "bytes_as_kib"),
    ("plan_micro_batch", "stale_measurements"),
}
# The public check passes these; only the grader's hidden specs (fixed ones) catch them.
_HIDDEN_ONLY_01: set[tuple[str, str]] = {
    ("train_accumulated", "flush_without_zero_grad"),
    ("train_accumulated", "optimizer_not_stepped"),
    ("plan_micro_batch", "halving_search"),
    ("plan_micro_batch", "size_one_skipped"),
    ("plan_micro_batch", "stale_measurements"),
}
# No name is true of these: the feedback says which window, step or value differs instead.
_UNNAMED_01: set[tuple[str, str]] = {
    ("accumulate_window", "float32_accumulation"),
    ("train_accumulated", "partial_micro_batch_as_full"),
}
_ALSO_NAMED_01: dict[tuple[str, str], set[str]] = {
    # with 2 micro-batches, skipping the last is running the first only; with 1, no backward
    ("accumulate_window", "micro_batch_skipped"): {"first_micro_batch_only", "no_backward"},
    # a cached size may be over the budget (never measured here) or hide a larger one
    ("plan_micro_batch", "stale_measurements"): {"skipped_sizes"},
    # both also return an answer when nothing fits
    ("plan_micro_batch", "does_not_fit"): {"nothing_fits_not_raised"},
    ("plan_micro_batch", "bytes_as_kib"): {"nothing_fits_not_raised"},
}
# Variants named after the mistake the checks name (module 0 and 1's part of NAMED_AS).
_NAMED_AS_01 = {
    "added_world_size": "added_not_multiplied",
    "returns_float": "not_an_int",
    "returns_string": "not_an_int",
    "returns_float_tensor": "not_an_int",
    "losses_in_float32": "logged_loss_wrong",
    "flush_without_zero_grad": "grads_left_after_last_step",
    "halving_search": "skipped_sizes",
    "powers_of_two_only": "skipped_sizes",
    "divisors_up_to_square_root": "skipped_sizes",
    "largest_size_skipped": "skipped_sizes",
    "size_one_skipped": "skipped_sizes",
    "bytes_as_kib": "does_not_fit",
    "stale_measurements": "not_measured",
}

# Variants whose mistake is named after another one that shows first.
NAMED_AS = {
    **_NAMED_AS_01,
    **student_code_02.AMP_WINDOW_NAMED_AS,
    **student_code_03.NAMED_AS,
    **student_code_04.NAMED_AS,
    **student_code_05.NAMED_AS,
    **student_code_06_noise.NAMED_AS,
    **student_code_06_batch.NAMED_AS,
}

_MODULES = (
    student_code_02,
    student_code_03,
    student_code_04,
    student_code_05,
    student_code_06_noise,
    student_code_06_batch,
)
# (question, variant) pairs, for tests/helpers/mutation.py:
# - NON_TEXTBOOK: mutants beyond the textbook mistakes (boundaries, partial windows, steps
#   outside the loop, sizes that do not divide, dtype slips, in-place changes to inputs,
#   stale state, .data/detach misuse, searches that skip candidates);
# - HIDDEN_ONLY: mutants the public check(...) may pass; only the grader's draw kills them;
# - UNNAMED: mutants whose failures must carry no mistake name (none would be true);
# - ALSO_NAMED: further mistake names that are also true of a mutant.
NON_TEXTBOOK = _NON_TEXTBOOK_01.union(*(getattr(m, "NON_TEXTBOOK", set()) for m in _MODULES))
HIDDEN_ONLY = _HIDDEN_ONLY_01.union(*(getattr(m, "HIDDEN_ONLY", set()) for m in _MODULES))
UNNAMED = _UNNAMED_01.union(*(getattr(m, "UNNAMED", set()) for m in _MODULES))
ALSO_NAMED = {
    **_ALSO_NAMED_01,
    **{k: v for m in _MODULES for k, v in getattr(m, "ALSO_NAMED", {}).items()},
}


def mistake_of(variant: str) -> str:
    """The mistake the checks should name for a variant."""
    return NAMED_AS.get(variant, variant)


def load(question: str, variant: str):
    """The function a variant's source defines."""
    namespace: dict = {}
    exec(BY_QUESTION[question][variant], namespace)  # test fixtures, written above
    return namespace[question]
