"""``plan_accumulation`` hand-ins: the right answer and each known mistake, as source."""

_PLAN = """
import math

def plan_accumulation(target_batch, max_micro_batch):
    if max_micro_batch < 1:
        {refuse}
    count = {count}
    base, extra = divmod(target_batch, count)
    return {sizes}
"""


def _plan(
    refuse='raise ValueError("not even one sample fits: try checkpointing or bf16")',
    count="math.ceil(target_batch / max_micro_batch)",
    sizes="[base + 1] * extra + [base] * (count - extra)",
):
    return _PLAN.format(refuse=refuse, count=count, sizes=sizes)


PLAN_ACCUMULATION = {
    "correct": _plan(),
    # refuses, but says nothing: the exercise asks for a ValueError "that says so"
    "message_too_short": _plan(refuse="raise ValueError()"),
    "correct_full_micro_batches_then_the_rest": """
def plan_accumulation(target_batch, max_micro_batch):
    if max_micro_batch < 1:
        raise ValueError("nothing fits")
    full, rest = divmod(target_batch, max_micro_batch)
    return [max_micro_batch] * full + ([rest] if rest else [])
""",
    "remainder_dropped": _plan(
        count="target_batch // max_micro_batch", sizes="[max_micro_batch] * count"
    ),
    "rounded_up": _plan(sizes="[max_micro_batch] * count"),
    "too_many_micro_batches": _plan(count="math.ceil(target_batch / max_micro_batch) + 1"),
    "over_budget": _plan(count="max(1, target_batch // max_micro_batch)"),
    "nothing_fits_not_refused": _plan(refuse="return []"),
    "wrong_exception": _plan(refuse='raise ZeroDivisionError("nothing fits")'),
    "correct_searching_the_count": """
def plan_accumulation(target_batch, max_micro_batch):
    if max_micro_batch < 1:
        raise ValueError("not even one sample fits")
    count = 1
    while -(-target_batch // count) > max_micro_batch:  # the largest share must fit
        count += 1
    return [target_batch // count + (i < target_batch % count) for i in range(count)]
""",
    "correct_with_numpy": """
import numpy as np

def plan_accumulation(target_batch, max_micro_batch):
    if max_micro_batch < 1:
        raise ValueError("not even one sample fits")
    count = -(-target_batch // max_micro_batch)
    return [len(part) for part in np.array_split(np.arange(target_batch), count)]
""",
    # non-textbook: a search that skips candidates (1, 2, 4, 8, ...: never 3)
    "search_skips_candidates": """
def plan_accumulation(target_batch, max_micro_batch):
    if max_micro_batch < 1:
        raise ValueError("not even one sample fits")
    count = 1
    while -(-target_batch // count) > max_micro_batch:
        count *= 2
    base, extra = divmod(target_batch, count)
    return [base + 1] * extra + [base] * (count - extra)
""",
    # non-textbook: a search for equal sizes only; a prime target falls back to single samples
    "divisor_search": """
def plan_accumulation(target_batch, max_micro_batch):
    if max_micro_batch < 1:
        raise ValueError("not even one sample fits")
    size = min(max_micro_batch, target_batch)
    while target_batch % size:
        size -= 1
    return [size] * (target_batch // size)
""",
    # a search whose test is one step too strict: an exact multiple gets one more
    "off_by_one_search": """
def plan_accumulation(target_batch, max_micro_batch):
    if max_micro_batch < 1:
        raise ValueError("not even one sample fits")
    count = 1
    while target_batch / count >= max_micro_batch:
        count += 1
    base, extra = divmod(target_batch, count)
    return [base + 1] * extra + [base] * (count - extra)
""",
    # non-textbook precision slip: round() rounds half to even, so 3.5 -> 4 but 4.5 -> 4
    "rounded_half_to_even": _plan(count="round(target_batch / max_micro_batch + 0.5)"),
    # non-textbook dtype slip: true division, so sizes such as 25.25
    "sizes_not_whole": _plan(sizes="[target_batch / count] * count"),
    # non-textbook boundary: only 0 refused; a negative maximum is planned for
    "only_zero_refused": _plan().replace("if max_micro_batch < 1:", "if max_micro_batch == 0:"),
    # non-textbook stale state: plans remembered by target alone, between calls
    "stale_plan_cache": """
_PLANS = {}

def plan_accumulation(target_batch, max_micro_batch):
    if max_micro_batch < 1:
        raise ValueError("not even one sample fits")
    if target_batch not in _PLANS:
        count = -(-target_batch // max_micro_batch)
        base, extra = divmod(target_batch, count)
        _PLANS[target_batch] = [base + 1] * extra + [base] * (count - extra)
    return _PLANS[target_batch]
""",
}

# Variants whose mistake is named after another one that shows first.
NAMED_AS = {
    "search_skips_candidates": "too_many_micro_batches",
    "divisor_search": "too_many_micro_batches",
    "off_by_one_search": "too_many_micro_batches",
    "rounded_half_to_even": "too_many_micro_batches",
    "only_zero_refused": "nothing_fits_not_refused",
    "stale_plan_cache": "too_many_micro_batches",
}

# Mutation-testing sets (tests/helpers/mutation.py; tests/corpora/student_code/__init__.py
# says what each means).
NON_TEXTBOOK: set[tuple[str, str]] = {
    ("plan_accumulation", "search_skips_candidates"),
    ("plan_accumulation", "divisor_search"),
    ("plan_accumulation", "rounded_half_to_even"),
    ("plan_accumulation", "sizes_not_whole"),
    ("plan_accumulation", "only_zero_refused"),
    ("plan_accumulation", "stale_plan_cache"),
}
# the public specs pass them: only the grader's fixed hidden specs catch them
HIDDEN_ONLY: set[tuple[str, str]] = {
    ("plan_accumulation", "only_zero_refused"),
    ("plan_accumulation", "stale_plan_cache"),
}
ALSO_NAMED: dict[tuple[str, str], set[str]] = {
    # a plan remembered for another maximum may also hold too large a micro-batch
    ("plan_accumulation", "stale_plan_cache"): {"over_budget"},
}

# State kept between calls: the sizes appended to one list, a default argument made once
PLAN_ACCUMULATION["sizes_in_default_argument"] = """
def plan_accumulation(target_batch, max_micro_batch, sizes=[]):
    if max_micro_batch < 1:
        raise ValueError("not even one sample fits: try checkpointing or bf16")
    count = -(-target_batch // max_micro_batch)
    base, extra = divmod(target_batch, count)
    sizes.extend([base + 1] * extra + [base] * (count - extra))
    return sizes
"""
NON_TEXTBOOK = NON_TEXTBOOK | {("plan_accumulation", "sizes_in_default_argument")}
NAMED_AS = {**NAMED_AS, "sizes_in_default_argument": "state_across_calls"}
