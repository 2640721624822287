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
}

BY_QUESTION = {
    "resolve_batch_config": RESOLVE_BATCH_CONFIG,
    "ddp_window": DDP_WINDOW,
    "zero_memory": ZERO_MEMORY,
}

# Variants whose mistake is named after another one that shows first.
NAMED_AS = {"not_bytes_but_rounded_gibibytes": "not_bytes"}
