"""``resolve_batch_config`` hand-ins: the right answer and each known mistake, as source."""

_RESOLVE = """
def resolve_batch_config(world_size, train_batch_size=None, micro=None, accum=None):
    given = [train_batch_size, micro, accum]
    if given.count(None) > 1:
        {too_few}
    if train_batch_size is None:
        train_batch_size = micro * accum * {world}
    elif micro is None:
        if {check_remainder}train_batch_size % (accum * {world}):
            raise ValueError(f"train_batch_size {{train_batch_size}} is not a multiple of "
                             f"accum x world_size = {{accum * {world}}}")
        micro = train_batch_size // (accum * {world})
    elif accum is None:
        if {check_remainder}train_batch_size % (micro * {world}):
            raise ValueError(f"train_batch_size {{train_batch_size}} is not a multiple of "
                             f"micro x world_size = {{micro * {world}}}")
        accum = train_batch_size // (micro * {world})
    elif {check_consistent}train_batch_size != micro * accum * {world}:
        raise ValueError(f"inconsistent: {{train_batch_size}} != {{micro}} x {{accum}} x {world}")
    return train_batch_size, micro, accum
"""


def _resolve(
    world="world_size",
    check_remainder="",
    check_consistent="",
    too_few='raise ValueError("give at least two of the three settings")',
):
    return _RESOLVE.format(
        world=world,
        check_remainder=check_remainder,
        check_consistent=check_consistent,
        too_few=too_few,
    )


RESOLVE_BATCH_CONFIG = {
    "correct": _resolve(),
    "world_size_ignored": _resolve(world="1"),
    "remainder_ignored": _resolve(check_remainder="False and "),
    "inconsistent_accepted": _resolve(check_consistent="False and "),
    "wrong_exception": _resolve(too_few='raise TypeError("give at least two settings")'),
    "message_too_short": _resolve(too_few='raise ValueError("bad")'),
    "correct_with_terse_messages": _resolve(too_few='raise ValueError("need 2 of 3")').replace(
        'f"inconsistent: ', 'f"'
    ),
    "correct_with_a_value_error_subclass": """
class BatchConfigError(ValueError):
    pass
"""
    + _resolve(too_few='raise BatchConfigError("give at least two of the three settings")'),
    "too_few_accepted": _resolve(too_few="return train_batch_size, micro, accum"),
    "accum_defaults_to_one": _resolve().replace(
        "    given = [",
        "    accum = 1 if accum is None and micro is None else accum\n    given = [",
    ),
    "world_size_in_one_branch": _resolve().replace(
        "micro = train_batch_size // (accum * world_size)", "micro = train_batch_size // accum"
    ),
    "remainder_without_world_size": _resolve()
    .replace("if train_batch_size % (accum * world_size):", "if train_batch_size % accum:")
    .replace("if train_batch_size % (micro * world_size):", "if train_batch_size % micro:"),
    "consistency_without_world_size": _resolve().replace(
        "elif train_batch_size != micro * accum * world_size:",
        "elif train_batch_size != micro * accum:",
    ),
    "true_division": _resolve().replace("train_batch_size // (", "train_batch_size / ("),
    "wrong_order": _resolve().replace(
        "return train_batch_size, micro, accum", "return micro, accum, train_batch_size"
    ),
    "stale_settings": """
_settings = {}
def resolve_batch_config(world_size, train_batch_size=None, micro=None, accum=None):
    if [train_batch_size, micro, accum].count(None) > 1:
        raise ValueError("give at least two of train_batch_size, micro and accum")
    for key, value in (("total", train_batch_size), ("micro", micro), ("accum", accum)):
        if value is not None:
            _settings[key] = value
    total, micro, accum = (_settings.get(k) for k in ("total", "micro", "accum"))
    if total is None:
        return micro * accum * world_size, micro, accum
    if micro is None:
        micro, remainder = divmod(total, accum * world_size)
    elif accum is None:
        accum, remainder = divmod(total, micro * world_size)
    else:
        remainder = total - micro * accum * world_size
    if remainder:
        raise ValueError(f"{total} != {micro} x {accum} x {world_size}")
    return total, micro, accum
""",
}

# Variants whose mistake is named after another one that shows first.
NAMED_AS = {
    "accum_defaults_to_one": "too_few_accepted",
    "world_size_in_one_branch": "world_size_ignored",
    "remainder_without_world_size": "remainder_ignored",
    "true_division": "not_integers",
    "consistency_without_world_size": "world_size_ignored",
    "stale_settings": "state_across_calls",
}

# Mutation-testing sets (tests/helpers/mutation.py; tests/corpora/student_code/__init__.py
# says what each means).
NON_TEXTBOOK = {
    ("resolve_batch_config", "remainder_without_world_size"),  # sizes that do not divide
    ("resolve_batch_config", "true_division"),  # dtype slip: 8.0, not 8
    ("resolve_batch_config", "stale_settings"),  # state kept between calls
    ("resolve_batch_config", "world_size_in_one_branch"),  # one branch of three
    ("resolve_batch_config", "accum_defaults_to_one"),  # boundary: one setting given
}
# Only the grader's fixed specs catch this one (60 = 6 x 10 with 4 devices).
HIDDEN_ONLY = {("resolve_batch_config", "remainder_without_world_size")}
# No name fits these (the message says what differs: which setting).
