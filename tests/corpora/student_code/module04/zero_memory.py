"""``zero_memory`` hand-ins: the right answer and each known mistake, as source."""

_ZERO = """
def zero_memory(n_parameters, stage, world_size):
    psi, k = n_parameters, {k}
    weights, gradients, states = 2 * psi, 2 * psi, k * psi
    if stage >= 1:
        states /= world_size
    if stage >= {grad_stage}:
        gradients /= world_size
    if stage >= {weight_stage}:
        weights /= world_size
    return {result}
"""


def _zero(k=12, grad_stage=2, weight_stage=3, result="weights + gradients + states"):
    return _ZERO.format(k=k, grad_stage=grad_stage, weight_stage=weight_stage, result=result)


ZERO_MEMORY = {
    "correct": _zero(),
    "fp32_master_weights_forgotten": _zero(k=8),
    "everything_sharded": _zero(grad_stage=1, weight_stage=1),
    "not_bytes": _zero(result="(weights + gradients + states) / 1e9"),
    "not_bytes_but_rounded_gibibytes": _zero(
        result="round((weights + gradients + states) / 2**30, 1)"
    ),
    "world_size_ignored": """
def zero_memory(n_parameters, stage, world_size):
    return 16 * n_parameters
""",
    "correct_with_a_table": """
def zero_memory(n_parameters, stage, world_size):
    # bytes per parameter: (fp16 weights, fp16 gradients, fp32 Adam state + master weights)
    sharded = {0: (0, 0, 0), 1: (0, 0, 1), 2: (0, 1, 1), 3: (1, 1, 1)}[stage]
    return sum(
        size * n_parameters / (world_size if cut else 1)
        for size, cut in zip((2, 2, 12), sharded)
    )
""",
    "correct_with_if_elif": """
def zero_memory(n_parameters, stage, world_size):
    psi, nd = n_parameters, world_size
    if stage == 0:
        return 16 * psi
    elif stage == 1:
        return 4 * psi + 12 * psi / nd
    elif stage == 2:
        return 2 * psi + 14 * psi / nd
    return 16 * psi / nd
""",
    "stages_shifted": _zero(grad_stage=1, weight_stage=2),
    "gradients_sharded_from_stage_1": _zero(grad_stage=1),
    "weights_never_sharded": _zero(weight_stage=4),
    "stage_0_shards_the_state": _zero().replace("if stage >= 1:", "if stage >= 0:"),
    "stages_not_cumulative": _zero().replace("stage >= ", "stage == "),
    "fp32_gradients": _zero().replace("2 * psi, 2 * psi", "2 * psi, 4 * psi"),
    "returns_a_string": _zero(result='f"{(weights + gradients + states) / 1e9:.1f} GB"'),
}

# Variants whose mistake is named after another one that shows first.
NAMED_AS = {
    "not_bytes_but_rounded_gibibytes": "not_bytes",
    "gradients_sharded_from_stage_1": "stages_shifted",
    "stage_0_shards_the_state": "stages_shifted",
}

# Mutation-testing sets (tests/helpers/mutation.py; tests/corpora/student_code/__init__.py
# says what each means).
NON_TEXTBOOK = {
    ("zero_memory", "stage_0_shards_the_state"),  # boundary: stage 0
    ("zero_memory", "returns_a_string"),  # type slip
}
# No name fits these (the message says what differs: which stage).
UNNAMED = {
    ("zero_memory", "weights_never_sharded"),
    ("zero_memory", "returns_a_string"),
}

# What feedback must say to name the mistake of an UNNAMED mutant (a crash names it by
# its own error and line).
DESCRIBED = {
    ("zero_memory", "returns_a_string"): r"Return the number of bytes as a number",
    ("zero_memory", "weights_never_sharded"): r"stage 2's number",
}
