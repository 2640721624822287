"""``count_steps`` hand-ins: the right answer and each known mistake, as source."""

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

# Variants whose mistake is named after another one that shows first.
NAMED_AS = {
    "counts_as_floats": "not_an_int",
}

# Mutation-testing sets (tests/helpers/mutation.py; tests/corpora/student_code/__init__.py
# says what each means).
NON_TEXTBOOK: set[tuple[str, str]] = {
    ("count_steps", "windows_across_epochs"),
    ("count_steps", "micro_batches_split_across_processes"),
    ("count_steps", "deepspeed_rounded_up"),
    ("count_steps", "counts_as_floats"),
    ("count_steps", "tuple_returned"),
}
# no name fits: the message says which count differs
UNNAMED: set[tuple[str, str]] = {("count_steps", "tuple_returned")}


# Side-effect mutants (tests/corpora/student_code/side_effects.py): the answer right, the
# caller's inputs or model, or torch's switches, left changed.
COUNT_STEPS["extra_step_per_epoch"] = _counts(
    optimizer_steps="(micro_batches_per_epoch // accum_steps + 1) * epochs"
)
COUNT_STEPS["totals_in_default_argument"] = """
def count_steps(micro_batches_per_epoch, accum_steps, epochs, num_processes, totals={}):
    steps = -(-micro_batches_per_epoch // accum_steps) * epochs  # totals: one dict, every call
    totals["optimizer_steps"] = totals.get("optimizer_steps", 0) + steps
    totals["prepared_scheduler_total"] = totals["optimizer_steps"] * num_processes
    totals["deepspeed_steps"] = micro_batches_per_epoch * epochs // accum_steps
    totals["deepspeed_loss_divisor"] = 1
    return totals
"""
NON_TEXTBOOK = NON_TEXTBOOK | {
    ("count_steps", "extra_step_per_epoch"),
    ("count_steps", "totals_in_default_argument"),
}
NAMED_AS = {**NAMED_AS, "totals_in_default_argument": "state_across_calls"}

# What feedback must say to name the mistake of an UNNAMED mutant (a crash names it by
# its own error and line).
DESCRIBED = {
    ("count_steps", "tuple_returned"): r"got tuple",
}
