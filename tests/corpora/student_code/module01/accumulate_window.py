"""``accumulate_window`` hand-ins: the right answer and each known mistake, as source."""

from tests.corpora.student_code import side_effects

ACCUMULATE_WINDOW = {
    "correct": """
def accumulate_window(model, loss_fn, micro_batches):
    for inputs, targets in micro_batches:
        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()
""",
    # correct too: a hook that counts samples, removed at the end; a copy popped, not the list
    "correct_hook_removed_copy_popped": """
def accumulate_window(model, loss_fn, micro_batches):
    seen = []
    handle = model.register_forward_hook(lambda module, args, out: seen.append(len(out)))
    pending = list(micro_batches)
    try:
        while pending:
            inputs, targets = pending.pop(0)
            (loss_fn(model(inputs), targets) / len(micro_batches)).backward()
    finally:
        handle.remove()
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

# For tests/helpers/mutation.py (see tests/corpora/student_code/__init__.py).
NON_TEXTBOOK = {
    ("accumulate_window", "micro_batch_skipped"),
    ("accumulate_window", "float32_accumulation"),
    ("accumulate_window", "gradients_cleared"),
}
# No name is true of this one: the feedback says how far off the gradient is instead.
UNNAMED = {("accumulate_window", "float32_accumulation")}
ALSO_NAMED = {
    # with 2 micro-batches, skipping the last is running the first only; with 1, no backward
    ("accumulate_window", "micro_batch_skipped"): {"first_micro_batch_only", "no_backward"},
}


# Side-effect mutants (tests/corpora/student_code/side_effects.py): the answer right, the
# caller's inputs or model, or torch's switches, left changed.
ACCUMULATE_WINDOW.update(
    side_effects.variants(
        ACCUMULATE_WINDOW["correct"],
        "accumulate_window",
        eval_mode_left=side_effects.EVAL_MODE_LEFT,
        grad_mode_left=side_effects.GRAD_MODE_LEFT,
        inputs_popped="args[2].pop()",
    )
)
NON_TEXTBOOK = NON_TEXTBOOK | {
    ("accumulate_window", "eval_mode_left"),
    ("accumulate_window", "grad_mode_left"),
    ("accumulate_window", "inputs_popped"),
}
NAMED_AS = {
    "eval_mode_left": side_effects.NAMED["eval_mode_left"],
    "grad_mode_left": side_effects.NAMED["grad_mode_left"],
    "inputs_popped": side_effects.NAMED["inputs_popped"],
}

# State kept between calls: the micro-batches counted in a global that is never reset
ACCUMULATE_WINDOW["count_in_global"] = """
_SEEN = []


def accumulate_window(model, loss_fn, micro_batches):
    _SEEN.extend(micro_batches)  # meant as this window's micro-batches
    for inputs, targets in micro_batches:
        (loss_fn(model(inputs), targets) / len(_SEEN)).backward()
"""
NON_TEXTBOOK = NON_TEXTBOOK | {("accumulate_window", "count_in_global")}
NAMED_AS = {**NAMED_AS, "count_in_global": "state_across_calls"}

# The gradients divided after the loop, every .grad read as if it were there: a frozen
# parameter's None raises (only the grader's draw holds one)
ACCUMULATE_WINDOW["grads_divided_after"] = """
def accumulate_window(model, loss_fn, micro_batches):
    for inputs, targets in micro_batches:
        loss_fn(model(inputs), targets).backward()
    for p in model.parameters():
        p.grad /= len(micro_batches)
"""
# correct too: divided after the loop, a frozen parameter's missing .grad skipped
ACCUMULATE_WINDOW["correct_grads_divided_after"] = """
def accumulate_window(model, loss_fn, micro_batches):
    for inputs, targets in micro_batches:
        loss_fn(model(inputs), targets).backward()
    for p in model.parameters():
        if p.grad is not None:
            p.grad /= len(micro_batches)
"""
NON_TEXTBOOK = NON_TEXTBOOK | {("accumulate_window", "grads_divided_after")}
HIDDEN_ONLY = {("accumulate_window", "grads_divided_after")}
UNNAMED = UNNAMED | {("accumulate_window", "grads_divided_after")}

# What feedback must say to name the mistake of an UNNAMED mutant (a crash names it by
# its own error and line).
DESCRIBED = {
    ("accumulate_window", "float32_accumulation"): r"summed in float32",
    ("accumulate_window", "grads_divided_after"): r"raised TypeError|^TypeError",
}
