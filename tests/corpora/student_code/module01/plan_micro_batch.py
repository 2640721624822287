"""``plan_micro_batch`` hand-ins: the right search and each known mistake, as source."""

from tests.corpora.student_code import side_effects

PLAN_MICRO_BATCH_CORRECT = """
import coursekit
def plan_micro_batch(model, make_inputs, budget_bytes, effective_batch_size):
    for size in range(effective_batch_size, 0, -1):
        if effective_batch_size % size == 0:
            if coursekit.activation_bytes(model, make_inputs(size)) <= budget_bytes:
                return size, effective_batch_size // size
    raise ValueError("nothing fits")
"""

PLAN_MICRO_BATCH = {
    "correct": PLAN_MICRO_BATCH_CORRECT,
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
    # refuses, but says nothing: the exercise asks for "a message that says so"
    "message_too_short": PLAN_MICRO_BATCH_CORRECT.replace(
        'raise ValueError("nothing fits")', "raise ValueError()"
    ),
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

# For tests/helpers/mutation.py (see tests/corpora/student_code/__init__.py).
NON_TEXTBOOK = {
    ("plan_micro_batch", "halving_search"),
    ("plan_micro_batch", "powers_of_two_only"),
    ("plan_micro_batch", "divisors_up_to_square_root"),
    ("plan_micro_batch", "largest_size_skipped"),
    ("plan_micro_batch", "size_one_skipped"),
    ("plan_micro_batch", "bytes_as_kib"),
    ("plan_micro_batch", "stale_measurements"),
}
# The public check passes these; only the grader's hidden specs (fixed ones) catch them.
HIDDEN_ONLY = {
    ("plan_micro_batch", "halving_search"),
    ("plan_micro_batch", "size_one_skipped"),
    ("plan_micro_batch", "stale_measurements"),
}
ALSO_NAMED = {
    # a cached size may be over the budget (never measured here) or hide a larger one
    ("plan_micro_batch", "stale_measurements"): {"skipped_sizes"},
    # both also return an answer when nothing fits
    ("plan_micro_batch", "does_not_fit"): {"nothing_fits_not_raised"},
    ("plan_micro_batch", "bytes_as_kib"): {"nothing_fits_not_raised"},
}
# Variants named after the mistake the checks name.
NAMED_AS = {
    "halving_search": "skipped_sizes",
    "powers_of_two_only": "skipped_sizes",
    "divisors_up_to_square_root": "skipped_sizes",
    "largest_size_skipped": "skipped_sizes",
    "size_one_skipped": "skipped_sizes",
    "bytes_as_kib": "does_not_fit",
    "stale_measurements": "not_measured",
}


# Side-effect mutants (tests/corpora/student_code/side_effects.py): the answer right, the
# caller's inputs or model, or torch's switches, left changed.
PLAN_MICRO_BATCH.update(
    side_effects.variants(
        PLAN_MICRO_BATCH["correct"],
        "plan_micro_batch",
        eval_mode_left=side_effects.EVAL_MODE_LEFT,
    )
)
NON_TEXTBOOK = NON_TEXTBOOK | {("plan_micro_batch", "eval_mode_left")}
NAMED_AS = {**NAMED_AS, "eval_mode_left": side_effects.NAMED["eval_mode_left"]}
