"""Module 4 hand-ins as students write them: the right answer and each known mistake."""

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

BY_QUESTION = {
    "resolve_batch_config": RESOLVE_BATCH_CONFIG,
    "ddp_window": DDP_WINDOW,
    "zero_memory": ZERO_MEMORY,
}

# Variants whose mistake is named after another one that shows first.
NAMED_AS = {
    "not_bytes_but_rounded_gibibytes": "not_bytes",
    "accum_defaults_to_one": "too_few_accepted",
    "world_size_in_one_branch": "world_size_ignored",
    "remainder_without_world_size": "remainder_ignored",
    "true_division": "not_integers",
    "synced_twice": "off_by_one_boundary",
    "enumerate_from_one": "off_by_one_boundary",
    "popped_last_micro_batch": "inputs_changed",
    "gradients_sharded_from_stage_1": "stages_shifted",
    "stage_0_shards_the_state": "stages_shifted",
}

# Mutation-testing sets (tests/helpers/mutation.py; tests/corpora/student_code/__init__.py
# says what each means).
NON_TEXTBOOK = {
    ("resolve_batch_config", "remainder_without_world_size"),  # sizes that do not divide
    ("resolve_batch_config", "true_division"),  # dtype slip: 8.0, not 8
    ("resolve_batch_config", "stale_settings"),  # state kept between calls
    ("resolve_batch_config", "world_size_in_one_branch"),  # one branch of three
    ("resolve_batch_config", "accum_defaults_to_one"),  # boundary: one setting given
    ("ddp_window", "float32_scale"),  # precision slip: torch.tensor(1 / n) is float32
    ("ddp_window", "popped_last_micro_batch"),  # in-place change to the input list
    ("ddp_window", "divided_by_count_after_pop"),  # in-place change, then a stale length
    ("ddp_window", "synced_twice"),  # boundary: the last two micro-batches
    ("zero_memory", "stage_0_shards_the_state"),  # boundary: stage 0
    ("zero_memory", "returns_a_string"),  # type slip
}
# Only the grader's fixed specs catch these (60 = 6 x 10 with 4 devices; a window of 3).
HIDDEN_ONLY = {
    ("resolve_batch_config", "remainder_without_world_size"),
    ("ddp_window", "float32_scale"),
}
# No name fits these (the message says what differs: which setting, stage or scale).
UNNAMED = {
    ("resolve_batch_config", "consistency_without_world_size"),
    ("resolve_batch_config", "stale_settings"),
    ("ddp_window", "float32_scale"),
    ("ddp_window", "divided_by_count_after_pop"),
    ("zero_memory", "weights_never_sharded"),
    ("zero_memory", "fp32_gradients"),
    ("zero_memory", "returns_a_string"),
}
ALSO_NAMED = {
    # With 2 micro-batches, "the last two" is every one: no_sync() is never used.
    ("ddp_window", "synced_twice"): {"no_sync_missing"},
    # With 1 micro-batch, index 1 is never n - 1 = 0: no synchronisation at all.
    ("ddp_window", "enumerate_from_one"): {"never_synced"},
}
