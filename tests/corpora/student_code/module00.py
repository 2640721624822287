"""Module 0 hand-ins (``effective_batch_size``): the right answer and each known mistake."""

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

# For tests/helpers/mutation.py (see tests/corpora/student_code/__init__.py).
NON_TEXTBOOK = {
    ("effective_batch_size", "divided_by_world_size"),
    ("effective_batch_size", "world_size_counted_twice"),
    ("effective_batch_size", "returns_float"),
    ("effective_batch_size", "returns_string"),
    ("effective_batch_size", "returns_float_tensor"),
}
# Variants named after the mistake the checks name.
NAMED_AS = {
    "added_world_size": "added_not_multiplied",
    "returns_float": "not_an_int",
    "returns_string": "not_an_int",
    "returns_float_tensor": "not_an_int",
}
BY_QUESTION = {"effective_batch_size": EFFECTIVE_BATCH_SIZE}
