"""Hand-ins as students write them: the right answer and each known mistake, as source text.

Source text, not functions, because the same code is injected into exercise notebooks to
test that the notebook run names the mistake too (tests/test_notebooks.py).
"""

from tests import student_code_02, student_code_03, student_code_04, student_code_05

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
}
# Variants whose mistake is named after another one that shows first.
NAMED_AS = {
    **student_code_02.AMP_WINDOW_NAMED_AS,
    **student_code_03.NAMED_AS,
    **student_code_04.NAMED_AS,
    **student_code_05.NAMED_AS,
}


def mistake_of(variant: str) -> str:
    """The mistake the checks should name for a variant."""
    return NAMED_AS.get(variant, variant)


def load(question: str, variant: str):
    """The function a variant's source defines."""
    namespace: dict = {}
    exec(BY_QUESTION[question][variant], namespace)  # test fixtures, written above
    return namespace[question]
