"""``train_scheduled`` hand-ins: the right scheduled loop and each known mistake, as source."""

from tests.corpora.student_code import side_effects

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

# For tests/helpers/mutation.py (see tests/corpora/student_code/__init__.py).
NON_TEXTBOOK = {
    ("train_scheduled", "flush_omits_scheduler"),
    ("train_scheduled", "scheduler_after_the_loop"),
    ("train_scheduled", "window_from_first_micro_batch"),
    ("train_scheduled", "shares_in_float32"),
    ("train_scheduled", "last_window_scaled_by_n"),
}
UNNAMED = {
    ("train_scheduled", "scheduler_after_the_loop"),
    ("train_scheduled", "shares_in_float32"),
}
ALSO_NAMED = {
    # Dividing by accum_steps is dividing by the window's count when the last window is full
    # but its last micro-batch short: the mean of means, too.
    ("train_scheduled", "last_window_scaled_by_n"): {"mean_of_means"},
}
# Variants named after the mistake the checks name (one that shows first, or the same
# mistake seen from outside).
NAMED_AS = {"flush_omits_scheduler": "scheduler_skipped"}


# Side-effect mutants (tests/corpora/student_code/side_effects.py): the answer right, the
# caller's inputs or model, or torch's switches, left changed.
TRAIN_SCHEDULED.update(
    side_effects.variants(
        TRAIN_SCHEDULED["correct"],
        "train_scheduled",
        eval_mode_left=side_effects.EVAL_MODE_LEFT,
        inputs_popped="args[4].clear()",
    )
)
NON_TEXTBOOK = NON_TEXTBOOK | {
    ("train_scheduled", "eval_mode_left"),
    ("train_scheduled", "inputs_popped"),
}
NAMED_AS = {
    **NAMED_AS,
    "eval_mode_left": side_effects.NAMED["eval_mode_left"],
    "inputs_popped": side_effects.NAMED["inputs_popped"],
}

# What feedback must say to name the mistake of an UNNAMED mutant (a crash names it by
# its own error and line).
DESCRIBED = {
    ("train_scheduled", "scheduler_after_the_loop"): r"and the scheduler once",
    ("train_scheduled", "shares_in_float32"): r"computed in float32",
}
