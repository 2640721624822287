"""``ddp_window`` hand-ins: the right answer and each known mistake, as source."""

from tests.corpora.student_code import side_effects

_DDP = """
import contextlib
def ddp_window(model, loss_fn, micro_batches):
    n = len(micro_batches)
    for i, (inputs, targets) in enumerate(micro_batches):
        {body}
"""
_INSIDE = """sync = {sync}
        with contextlib.nullcontext() if sync else model.no_sync():
            ({loss}).backward()"""


def _ddp(sync="i == n - 1", loss="loss_fn(model(inputs), targets) / n"):
    return _DDP.format(body=_INSIDE.format(sync=sync, loss=loss))


DDP_WINDOW = {
    "correct": _ddp(),
    "correct_with_if_else": """
def ddp_window(model, loss_fn, micro_batches):
    for i, (x, y) in enumerate(micro_batches):
        if i < len(micro_batches) - 1:
            with model.no_sync():
                (loss_fn(model(x), y) / len(micro_batches)).backward()
        else:
            (loss_fn(model(x), y) / len(micro_batches)).backward()
""",
    "no_sync_missing": _DDP.format(body="(loss_fn(model(inputs), targets) / n).backward()"),
    "forward_outside_no_sync": _DDP.format(
        body="""loss = loss_fn(model(inputs), targets) / n
        with contextlib.nullcontext() if i == n - 1 else model.no_sync():
            loss.backward()"""
    ),
    "off_by_one_boundary": _ddp(sync="i % n == 0"),
    "never_synced": _ddp(sync="False"),
    "loss_not_divided": _ddp(loss="loss_fn(model(inputs), targets)"),
    "divided_by_world_size": "import torch.distributed as dist\n"
    + _ddp(loss="loss_fn(model(inputs), targets) / (n * dist.get_world_size())"),
    "ddp_bypassed": """
def ddp_window(model, loss_fn, micro_batches):
    for i, (x, y) in enumerate(micro_batches):
        net = model if i == len(micro_batches) - 1 else model.module
        (loss_fn(net(x), y) / len(micro_batches)).backward()
""",
    # The window's gradient made on the module, whole (each layer's forward called
    # directly, where no module hook sees it), and brought back through autograd behind
    # micro-batch passes made for show: DDP synchronises once, in the last one.
    "whole_window_elsewhere": """
import torch
def ddp_window(model, loss_fn, micro_batches):
    n = len(micro_batches)
    out = torch.cat([x for x, _ in micro_batches])
    for layer in model.module:
        out = layer.forward(out)
    targets = torch.cat([y for _, y in micro_batches])
    grads = torch.autograd.grad(loss_fn(out, targets), list(model.parameters()))
    for i, (x, y) in enumerate(micro_batches):
        if i < n - 1:
            with model.no_sync():
                (model(x).sum() * 0).backward()
        else:
            shown = model(x).sum() * 0
            shown = shown + sum((p * g).sum() for p, g in zip(model.parameters(), grads))
            shown.backward()
""",
    "synced_by_hand": """
import torch.distributed as dist
def ddp_window(model, loss_fn, micro_batches):
    with model.no_sync():
        for x, y in micro_batches:
            (loss_fn(model(x), y) / len(micro_batches)).backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()
""",
    "correct_with_one_no_sync_block": """
def ddp_window(model, loss_fn, micro_batches):
    n = len(micro_batches)
    *first, (last_x, last_y) = micro_batches
    with model.no_sync():
        for x, y in first:
            (loss_fn(model(x), y) / n).backward()
    (loss_fn(model(last_x), last_y) / n).backward()
""",
    "synced_twice": _ddp(sync="i >= n - 2"),
    "enumerate_from_one": _ddp().replace("enumerate(micro_batches)", "enumerate(micro_batches, 1)"),
    "float32_scale": "import torch\n"
    + _ddp(loss="loss_fn(model(inputs), targets) * torch.tensor(1 / n)"),
    "zero_grad_inside_loop": _DDP.format(
        body="model.zero_grad()\n        "
        + _INSIDE.format(sync="i == n - 1", loss="loss_fn(model(inputs), targets) / n")
    ),
    "popped_last_micro_batch": """
def ddp_window(model, loss_fn, micro_batches):
    n = len(micro_batches)
    last_x, last_y = micro_batches.pop()
    with model.no_sync():
        for x, y in micro_batches:
            (loss_fn(model(x), y) / n).backward()
    (loss_fn(model(last_x), last_y) / n).backward()
""",
    "divided_by_count_after_pop": """
def ddp_window(model, loss_fn, micro_batches):
    last_x, last_y = micro_batches.pop()
    with model.no_sync():
        for x, y in micro_batches:
            (loss_fn(model(x), y) / (len(micro_batches) + 1)).backward()
    (loss_fn(model(last_x), last_y) / len(micro_batches)).backward()
""",
}

# Variants whose mistake is named after another one that shows first.
NAMED_AS = {
    "whole_window_elsewhere": "whole_batch_forward",
    "synced_twice": "off_by_one_boundary",
    "divided_by_count_after_pop": "inputs_changed",
    "enumerate_from_one": "off_by_one_boundary",
    "popped_last_micro_batch": "inputs_changed",
}

# Mutation-testing sets (tests/helpers/mutation.py; tests/corpora/student_code/__init__.py
# says what each means).
NON_TEXTBOOK = {
    ("ddp_window", "float32_scale"),  # precision slip: torch.tensor(1 / n) is float32
    ("ddp_window", "popped_last_micro_batch"),  # in-place change to the input list
    ("ddp_window", "divided_by_count_after_pop"),  # in-place change, then a stale length
    ("ddp_window", "synced_twice"),  # boundary: the last two micro-batches
    ("ddp_window", "whole_window_elsewhere"),  # a way around the check, not a slip
}
# Only the grader's fixed spec catches the first (a window of 3); only its memory test the
# second.
HIDDEN_ONLY = {("ddp_window", "float32_scale"), ("ddp_window", "whole_window_elsewhere")}
# No name fits these (the message says what differs: the scale).
UNNAMED = {
    ("ddp_window", "float32_scale"),
}
ALSO_NAMED = {
    # With 2 micro-batches, "the last two" is every one: no_sync() is never used.
    ("ddp_window", "synced_twice"): {"no_sync_missing"},
    # With 1 micro-batch, index 1 is never n - 1 = 0: no synchronisation at all.
    ("ddp_window", "enumerate_from_one"): {"never_synced"},
}


# Side-effect mutants (tests/corpora/student_code/side_effects.py): the answer right, the
# caller's inputs or model, or torch's switches, left changed.
DDP_WINDOW.update(
    side_effects.variants(
        DDP_WINDOW["correct"],
        "ddp_window",
        eval_mode_left=side_effects.EVAL_MODE_LEFT,
        hook_left=side_effects.HOOK_LEFT,
    )
)
NON_TEXTBOOK = NON_TEXTBOOK | {("ddp_window", "eval_mode_left"), ("ddp_window", "hook_left")}
NAMED_AS = {
    **NAMED_AS,
    "eval_mode_left": side_effects.NAMED["eval_mode_left"],
    "hook_left": side_effects.NAMED["hook_left"],
}

# What feedback must say to name the mistake of an UNNAMED mutant (a crash names it by
# its own error and line).
DESCRIBED = {
    ("ddp_window", "float32_scale"): r"a float32 tensor rounds",
}
