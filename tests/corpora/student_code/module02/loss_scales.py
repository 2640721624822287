"""``loss_scales`` hand-ins: the right factors and each known mistake, as source."""

from tests.corpora.student_code import side_effects

LOSS_SCALES = {
    "correct": """
def loss_scales(micro_batch_sizes, reduction):
    total = sum(micro_batch_sizes)
    if reduction == "mean":
        return [size / total for size in micro_batch_sizes]
    return [1 / total] * len(micro_batch_sizes)
""",
    "correct_with_numpy": """
import numpy as np
def loss_scales(micro_batch_sizes, reduction):
    sizes = np.array(micro_batch_sizes, dtype=float)
    if reduction == "mean":
        return list(sizes / sizes.sum())
    return list(np.ones_like(sizes) / sizes.sum())
""",
    "correct_in_float32": """
import torch
def loss_scales(micro_batch_sizes, reduction):
    sizes = torch.tensor(micro_batch_sizes, dtype=torch.float32)
    if reduction == "mean":
        return (sizes / sizes.sum()).tolist()
    return (torch.ones_like(sizes) / sizes.sum()).tolist()
""",
}
_SCALE_BODIES = {
    "mean_of_means": ("[1 / len(micro_batch_sizes)] * len(micro_batch_sizes)", None),
    "loss_not_divided": ("[1.0] * len(micro_batch_sizes)", None),
    "mean_treated_as_sum": ("[1 / total] * len(micro_batch_sizes)", None),
    "size_not_divided": ("[float(s) for s in micro_batch_sizes]", None),
    "sum_not_divided": (None, "[1.0] * len(micro_batch_sizes)"),
    "sum_divided_by_count": (None, "[1 / len(micro_batch_sizes)] * len(micro_batch_sizes)"),
    "sum_treated_as_mean": (None, "[s / total for s in micro_batch_sizes]"),
    "sum_divided_by_size": (None, "[1 / s for s in micro_batch_sizes]"),
}
for _mistake, (_mean, _sum) in _SCALE_BODIES.items():
    LOSS_SCALES[_mistake] = f"""
def loss_scales(micro_batch_sizes, reduction):
    total = sum(micro_batch_sizes)
    if reduction == "mean":
        return {_mean or "[s / total for s in micro_batch_sizes]"}
    return {_sum or "[1 / total] * len(micro_batch_sizes)"}
"""
LOSS_SCALES.update(
    {
        # A // from integer habits: every factor rounds down to 0.
        "integer_division": """
def loss_scales(micro_batch_sizes, reduction):
    total = sum(micro_batch_sizes)
    if reduction == "mean":
        return [size // total for size in micro_batch_sizes]
    return [1 // total] * len(micro_batch_sizes)
""",
        # The window's size read from its first micro-batch: wrong when the sizes differ.
        "window_from_first_micro_batch": """
def loss_scales(micro_batch_sizes, reduction):
    total = micro_batch_sizes[0] * len(micro_batch_sizes)
    if reduction == "mean":
        return [size / total for size in micro_batch_sizes]
    return [1 / total] * len(micro_batch_sizes)
""",
        # A running total instead of the window's final one.
        "running_total": """
def loss_scales(micro_batch_sizes, reduction):
    scales, seen = [], 0
    for size in micro_batch_sizes:
        seen += size
        scales.append(size / seen if reduction == "mean" else 1 / seen)
    return scales
""",
        # A dtype slip: the factors computed in float16 (about 3 significant digits).
        "in_float16": """
import torch
def loss_scales(micro_batch_sizes, reduction):
    sizes = torch.tensor(micro_batch_sizes, dtype=torch.float16)
    if reduction == "mean":
        return (sizes / sizes.sum()).tolist()
    return (torch.ones_like(sizes) / sizes.sum()).tolist()
""",
        # Stale state between calls: factors cached by the number of micro-batches.
        "cached_by_count": """
_cache = {}
def loss_scales(micro_batch_sizes, reduction):
    key = (len(micro_batch_sizes), reduction)
    if key not in _cache:
        total = sum(micro_batch_sizes)
        if reduction == "mean":
            _cache[key] = [size / total for size in micro_batch_sizes]
        else:
            _cache[key] = [1 / total] * len(micro_batch_sizes)
    return _cache[key]
""",
    }
)

# For tests/helpers/mutation.py (see tests/corpora/student_code/__init__.py).
NON_TEXTBOOK = {
    ("loss_scales", "integer_division"),
    ("loss_scales", "window_from_first_micro_batch"),
    ("loss_scales", "running_total"),
    ("loss_scales", "in_float16"),
    ("loss_scales", "cached_by_count"),
}
UNNAMED = {
    ("loss_scales", "in_float16"),
    ("loss_scales", "cached_by_count"),
}


# Side-effect mutants (tests/corpora/student_code/side_effects.py): the answer right, the
# caller's inputs or model, or torch's switches, left changed.
LOSS_SCALES.update(
    side_effects.variants(
        LOSS_SCALES["correct"],
        "loss_scales",
        inputs_popped="args[0].clear()",
    )
)
LOSS_SCALES["scales_in_default_argument"] = """
def loss_scales(sizes, reduction, scales=[]):  # one list, made once, shared by every call
    total = sum(sizes)
    for size in sizes:
        scales.append(size / total if reduction == "mean" else 1 / total)
    return scales
"""
NON_TEXTBOOK = NON_TEXTBOOK | {
    ("loss_scales", "inputs_popped"),
    ("loss_scales", "scales_in_default_argument"),
}
NAMED_AS = {
    "inputs_popped": side_effects.NAMED["inputs_popped"],
    "scales_in_default_argument": "state_across_calls",
}

# What feedback must say to name the mistake of an UNNAMED mutant (a crash names it by
# its own error and line).
DESCRIBED = {
    ("loss_scales", "in_float16"): r"as small as rounding",
    ("loss_scales", "cached_by_count"): r"returned the same factors",
}
