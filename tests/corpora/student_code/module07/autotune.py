"""``autotune`` hand-ins: right answers written several ways, and each known mistake, as
source. Most mistakes are one change to the textbook answer (``_tuner``)."""

_TUNER = """
import torch

GIB = 2**30

def autotune(try_step, free_memory, max_memory_gb, target_batch, world_size=1, margin=0.1):
    if target_batch % world_size:
        raise ValueError("the target batch must divide among the devices")
    share = {share}
    limit = {limit}

    def fits(size):
        peak = None
        try:
            peak = try_step(size)
        {handler}
        if peak is None:
            {free}
            return False
        return {verdict}

    if not fits(1):
        {nothing_fits}
    good, bad = 1, None
    while good < share:
        trial = {grow}
        if not fits(trial):
            bad = trial
            break
        good = trial
    if bad is not None:
        while {gap}:
            middle = (good + bad) // 2
            if fits(middle):
                {good_update}
            else:
                bad = middle
    largest = {largest}
    steps = {steps}
    base, extra = divmod(share, steps)
    sizes = {sizes}
    return {{"largest_fit": largest, "accum_steps": len(sizes), "micro_batch_sizes": sizes}}
"""

_OOM_ONLY = "except torch.OutOfMemoryError:\n            pass"


def _tuner(
    share="target_batch // world_size",
    limit="max_memory_gb * GIB * (1 - margin)",
    handler=_OOM_ONLY,
    free="free_memory()",
    verdict="peak <= limit",
    nothing_fits='raise ValueError("not even a micro-batch of 1 fits the budget")',
    grow="min(2 * good, share)",
    gap="bad - good > 1",
    good_update="good = middle",
    largest="good",
    steps="-(-share // largest)",
    sizes="[base + 1] * extra + [base] * (steps - extra)",
):
    return _TUNER.format(
        share=share,
        limit=limit,
        handler=handler,
        free=free,
        verdict=verdict,
        nothing_fits=nothing_fits,
        grow=grow,
        gap=gap,
        good_update=good_update,
        largest=largest,
        steps=steps,
        sizes=sizes,
    )


AUTOTUNE = {
    "correct": _tuner(),
    # a plain binary search over 1..share, remembering each answer; the message tells OOMs
    # apart; the window from coursekit's own planner (module 5)
    "correct_top_down_bisection": """
import coursekit

def autotune(try_step, free_memory, max_memory_gb, target_batch, world_size=1, margin=0.1):
    if target_batch % world_size != 0:
        raise ValueError(f"{target_batch} samples do not split over {world_size} devices")
    share = target_batch // world_size
    budget = max_memory_gb * 1024**3 * (1.0 - margin)
    seen = {}

    def fits(size):
        if size not in seen:
            out_of_memory = False
            try:
                seen[size] = try_step(size) <= budget
            except RuntimeError as error:
                if "out of memory" not in str(error):
                    raise
                out_of_memory = True
            if out_of_memory:
                seen[size] = False
                free_memory()
        return seen[size]

    low, high = 0, share  # low fits (0 trivially); find the largest that fits
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    if low == 0:
        raise ValueError("even one sample is over the budget: try checkpointing or bf16")
    plan = coursekit.plan_accumulation(target_batch, low, world_size)
    return {"largest_fit": low, "accum_steps": plan.accum_steps,
            "micro_batch_sizes": list(plan.sizes)}
""",
    # a probe that returns the error instead of raising it; a full-then-rest window
    "correct_error_as_value": """
import math
import torch

def probe(try_step, size):
    try:
        return try_step(size), None
    except torch.OutOfMemoryError as error:
        return None, type(error).__name__   # the name only: the error itself is dropped

def autotune(try_step, free_memory, max_memory_gb, target_batch, world_size=1, margin=0.1):
    if target_batch % world_size:
        raise ValueError("target_batch must be a multiple of world_size")
    share = target_batch // world_size
    limit = int(max_memory_gb * 2**30 * (1 - margin))
    def ok(size):
        peak, failure = probe(try_step, size)
        if failure:
            free_memory()
            return False
        return peak <= limit
    sizes_tried = []
    size = 1
    last_good, first_bad = 0, None
    while True:
        sizes_tried.append(size)
        if ok(size):
            last_good = size
            if size == share:
                break
            size = min(size * 2, share)
        else:
            first_bad = size
            break
    if last_good == 0:
        raise ValueError("a micro-batch of 1 does not fit")
    if first_bad is not None:
        while first_bad - last_good > 1:
            middle = (last_good + first_bad) // 2
            if ok(middle):
                last_good = middle
            else:
                first_bad = middle
    steps = math.ceil(share / last_good)
    full, rest = divmod(share, last_good)
    sizes = [last_good] * full + ([rest] if rest else [])
    return {"largest_fit": last_good, "accum_steps": len(sizes), "micro_batch_sizes": sizes}
""",
    "nothing_freed": _tuner(free="pass"),
    "freed_while_error_alive": _tuner(
        handler="except torch.OutOfMemoryError:\n            free_memory()", free="pass"
    ),
    "error_swallowed": _tuner(handler="except RuntimeError:\n            pass"),
    "budget_ignored": _tuner(verdict="True"),
    "margin_ignored": _tuner(limit="max_memory_gb * GIB"),
    "bisection_off_by_one": _tuner(gap="bad - good > 2"),
    "failed_size_chosen": _tuner(largest="bad if bad is not None and bad - good == 1 else good"),
    "probing_never_stops": _tuner(gap="good < bad"),
    "beyond_share": _tuner(grow="2 * good"),
    # halving from the whole share until a size runs, as Accelerate's finder does
    "not_largest": """
import torch

def autotune(try_step, free_memory, max_memory_gb, target_batch, world_size=1, margin=0.1):
    if target_batch % world_size:
        raise ValueError("the target batch must divide among the devices")
    share = target_batch // world_size
    limit = max_memory_gb * 2**30 * (1 - margin)
    size = share
    while size >= 1:
        peak = None
        try:
            peak = try_step(size)
        except torch.OutOfMemoryError:
            pass
        if peak is not None and peak <= limit:
            break
        if peak is None:
            free_memory()
        size //= 2
    if size < 1:
        raise ValueError("nothing fits")
    steps = -(-share // size)
    base, extra = divmod(share, steps)
    sizes = [base + 1] * extra + [base] * (steps - extra)
    return {"largest_fit": size, "accum_steps": steps, "micro_batch_sizes": sizes}
""",
    # counting down from the share, one size at a time: right in the end, after share - b
    # calls where the exercise's search needs about 2 log2(share)
    "counting_down": """
import torch

def autotune(try_step, free_memory, max_memory_gb, target_batch, world_size=1, margin=0.1):
    if target_batch % world_size:
        raise ValueError("the target batch must divide among the devices")
    share = target_batch // world_size
    limit = max_memory_gb * 2**30 * (1 - margin)
    size = share
    while size >= 1:
        peak = None
        try:
            peak = try_step(size)
        except torch.OutOfMemoryError:
            pass
        if peak is None:
            free_memory()
        elif peak <= limit:
            break
        size -= 1
    if size < 1:
        raise ValueError("not even a micro-batch of 1 fits the budget")
    steps = -(-share // size)
    base, extra = divmod(share, steps)
    sizes = [base + 1] * extra + [base] * (steps - extra)
    return {"largest_fit": size, "accum_steps": steps, "micro_batch_sizes": sizes}
""",
    # no check that the devices can share the target: a window of target // world_size each
    "indivisible_target_accepted": _tuner().replace(
        "    if target_batch % world_size:\n"
        '        raise ValueError("the target batch must divide among the devices")\n',
        "",
    ),
    # a bisection that moves the wrong end when the middle fits
    "bisection_keeps_wrong_end": _tuner(good_update="bad = middle"),
    "effective_batch_missed": _tuner(steps="share // largest", sizes="[largest] * steps"),
    "window_rounded_up": _tuner(sizes="[largest] * steps"),
    "world_size_ignored": _tuner(share="target_batch", steps="-(-target_batch // largest)"),
    "too_many_steps": _tuner(steps="-(-share // largest) + 1"),
    "nothing_fits_returned_empty": _tuner(
        nothing_fits='return {"largest_fit": 0, "accum_steps": 0, "micro_batch_sizes": []}'
    ),
    "units_in_gigabytes": _tuner(limit="max_memory_gb * 1e9 * (1 - margin)"),
    # a flaky size retried until it passes: "it was a fluke"
    "flaky_size_retried": _tuner(
        handler="except torch.OutOfMemoryError:\n            pass\n"
        "        if peak is None:\n"
        "            free_memory()\n"
        "            try:\n"
        "                peak = try_step(size)\n"
        "            except torch.OutOfMemoryError:\n"
        "                pass"
    ),
    # sizes that fitted, collected in a list that no call empties
    "state_across_calls": _tuner(
        verdict="_record(size, peak <= limit)",
        largest="max(s for s in _FITTED if s <= share)",
    ).replace(
        "GIB = 2**30",
        "GIB = 2**30\n_FITTED = []\n\n"
        "def _record(size, fits):\n    if fits:\n        _FITTED.append(size)\n    return fits",
    ),
}

NAMED_AS = {
    "probing_never_stops": "too_many_probes",
    "counting_down": "too_many_probes",
    "indivisible_target_accepted": "bad_input_accepted",
    "window_rounded_up": "effective_batch_missed",
    "nothing_fits_returned_empty": "bad_input_accepted",
    "flaky_size_retried": "failed_size_chosen",
}
# Mutants beyond the textbook mistakes.
NON_TEXTBOOK = {
    ("autotune", "units_in_gigabytes"),
    ("autotune", "flaky_size_retried"),
    ("autotune", "state_across_calls"),
    ("autotune", "bisection_keeps_wrong_end"),
    ("autotune", "counting_down"),
}
# No name is true of these: each is told exactly what differs.
UNNAMED = {
    ("autotune", "units_in_gigabytes"),
    ("autotune", "bisection_keeps_wrong_end"),
}
# Further names, each true of the mutant on some draws: a never-ending bisection that
# probes a flaky size again and ends on it; a share taken as the whole target, which probes
# past the device's share; halving that skips exactly one size between a fit and a failure;
# sizes kept from earlier cards, one of which was never run on this one.
ALSO_NAMED = {
    ("autotune", "state_across_calls"): {"untried_size_chosen"},
    ("autotune", "probing_never_stops"): {"failed_size_chosen"},
    ("autotune", "world_size_ignored"): {"beyond_share"},
    ("autotune", "not_largest"): {"bisection_off_by_one"},
    ("autotune", "budget_ignored"): {"margin_ignored", "failed_size_chosen"},
    ("autotune", "beyond_share"): {"nothing_freed"},
}

# What feedback must say to name the mistake of an UNNAMED mutant (a crash names it by
# its own error and line).
DESCRIBED = {
    ("autotune", "bisection_keeps_wrong_end"): r"did not keep a size that fitted",
    ("autotune", "units_in_gigabytes"): r"a GiB of 2\*\*30 bytes",
}
