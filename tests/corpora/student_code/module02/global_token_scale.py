"""``global_token_scale`` hand-ins: the right scale and each known mistake, as source."""

from tests.corpora.student_code import side_effects

_RANKS = """
import torch
import torch.distributed as dist


def global_token_scale(local_token_counts):
{body}
"""


def _ranks(body):
    return _RANKS.format(body=body)


GLOBAL_TOKEN_SCALE = {
    "correct": _ranks(
        "    total = torch.tensor(float(sum(local_token_counts)))\n"
        "    dist.all_reduce(total)\n"
        "    return dist.get_world_size() / total.item()"
    ),
    "correct_per_micro_batch_tensor": _ranks(
        "    counts = torch.tensor(local_token_counts, dtype=torch.float64)\n"
        "    dist.all_reduce(counts)\n"
        "    return dist.get_world_size() / counts.sum().item()"
    ),
    "correct_averaged_count": _ranks(
        "    total = torch.tensor(float(sum(local_token_counts)))\n"
        "    dist.all_reduce(total, op=dist.ReduceOp.AVG)  # the mean count per rank\n"
        "    return 1 / total.item()"
    ),
    "correct_int64_tensor": _ranks(
        "    total = torch.tensor(sum(local_token_counts), dtype=torch.int64)\n"
        "    dist.all_reduce(total, op=dist.ReduceOp.SUM)\n"
        "    return float(dist.get_world_size() / int(total))"
    ),
    "correct_async": _ranks(
        "    total = torch.tensor(float(sum(local_token_counts)))\n"
        "    work = dist.all_reduce(total, async_op=True)\n"
        "    work.wait()\n"
        "    return dist.get_world_size() / total.item()"
    ),
    # async, awaited through the future it hands back
    "correct_async_future": _ranks(
        "    total = torch.tensor(float(sum(local_token_counts)))\n"
        "    dist.all_reduce(total, async_op=True).get_future().wait()\n"
        "    return dist.get_world_size() / total.item()"
    ),
    # async, polled until done (a rank with other work to do meanwhile)
    "correct_async_polled": _ranks(
        "    total = torch.tensor(float(sum(local_token_counts)))\n"
        "    work = dist.all_reduce(total, async_op=True)\n"
        "    while not work.is_completed():\n"
        "        pass\n"
        "    return dist.get_world_size() / total.item()"
    ),
    "correct_through_c10d": _ranks(
        "    from torch.distributed import distributed_c10d as c10d\n"
        "    total = torch.tensor(float(sum(local_token_counts)))\n"
        "    c10d.all_reduce(total)\n"
        "    return c10d.get_world_size() / total.item()"
    ),
    "all_reduce_not_sum": _ranks(
        "    total = torch.tensor(float(sum(local_token_counts)))\n"
        "    dist.all_reduce(total, op=dist.ReduceOp.MAX)\n"
        "    return dist.get_world_size() / total.item()"
    ),
    # the world size counted with a second collective: right, but two all_reduces
    "several_all_reduces": _ranks(
        "    total = torch.tensor(float(sum(local_token_counts)))\n"
        "    dist.all_reduce(total)\n"
        "    ranks = torch.ones(())\n"
        "    dist.all_reduce(ranks)\n"
        "    return ranks.item() / total.item()"
    ),
    "token_count_not_summed_across_ranks": _ranks(
        "    return dist.get_world_size() / sum(local_token_counts)"
    ),
    "world_size_not_multiplied": _ranks(
        "    total = torch.tensor(float(sum(local_token_counts)))\n"
        "    dist.all_reduce(total)\n"
        "    return 1 / total.item()"
    ),
    "divided_by_world_size": _ranks(
        "    total = torch.tensor(float(sum(local_token_counts)))\n"
        "    dist.all_reduce(total)\n"
        "    return 1 / (total.item() * dist.get_world_size())"
    ),
    "averaged_not_summed": _ranks(
        "    total = torch.tensor(float(sum(local_token_counts)))\n"
        "    dist.all_reduce(total, op=dist.ReduceOp.AVG)\n"
        "    return dist.get_world_size() / total.item()"
    ),
    "all_reduce_per_micro_batch": _ranks(
        "    total = 0.0\n"
        "    for count in local_token_counts:\n"
        "        one = torch.tensor(float(count))\n"
        "        dist.all_reduce(one)\n"
        "        total += one.item()\n"
        "    return dist.get_world_size() / total"
    ),
    "scale_per_micro_batch": _ranks(
        "    first = torch.tensor(float(local_token_counts[0]))\n"
        "    dist.all_reduce(first)\n"
        "    return dist.get_world_size() / first.item()"
    ),
    # the own count alone, and DDP's average not undone either
    "own_count_alone": _ranks("    return 1 / sum(local_token_counts)"),
    # the functions imported by name, so the check cannot play the other ranks: in one
    # process this is the own count alone, named so, with a hint to call them through dist
    "functions_imported_by_name": """
import torch
from torch.distributed import all_reduce, get_world_size


def global_token_scale(local_token_counts):
    total = torch.tensor(float(sum(local_token_counts)))
    all_reduce(total)
    return get_world_size() / total.item()
""",
    # non-textbook: the all-reduce lands in a copy; the local count is what is used
    "all_reduced_a_copy": _ranks(
        "    total = torch.tensor(float(sum(local_token_counts)))\n"
        "    dist.all_reduce(total.clone())\n"
        "    return dist.get_world_size() / total.item()"
    ),
    # non-textbook: the count of sequences (micro-batch entries), not of tokens
    "micro_batches_counted": _ranks(
        "    total = torch.tensor(float(len(local_token_counts)))\n"
        "    dist.all_reduce(total)\n"
        "    return dist.get_world_size() / total.item()"
    ),
    # non-textbook: integer division of the world size by the count
    "integer_division": _ranks(
        "    total = torch.tensor(sum(local_token_counts))\n"
        "    dist.all_reduce(total)\n"
        "    return float(dist.get_world_size() // int(total))"
    ),
}

# For tests/helpers/mutation.py (see tests/corpora/student_code/__init__.py).
NON_TEXTBOOK = {
    ("global_token_scale", "all_reduced_a_copy"),
    ("global_token_scale", "micro_batches_counted"),
    ("global_token_scale", "integer_division"),
}
# Variants named after the mistake the checks name (one that shows first, or the same
# mistake seen from outside).
NAMED_AS = {
    "own_count_alone": "token_count_not_summed_across_ranks",
    "all_reduced_a_copy": "token_count_not_summed_across_ranks",
    "functions_imported_by_name": "token_count_not_summed_across_ranks",
}


# Side-effect mutants (tests/corpora/student_code/side_effects.py): the answer right, the
# caller's inputs or model, or torch's switches, left changed.
GLOBAL_TOKEN_SCALE.update(
    side_effects.variants(
        GLOBAL_TOKEN_SCALE["correct"],
        "global_token_scale",
        inputs_changed_in_place="args[0].clear()",
    )
)
GLOBAL_TOKEN_SCALE["async_not_awaited"] = _ranks(
    "    total = torch.tensor(float(sum(local_token_counts)))\n"
    "    dist.all_reduce(total, async_op=True)  # the work returned, never waited for\n"
    "    return dist.get_world_size() / total.item()"
)
GLOBAL_TOKEN_SCALE["count_cached"] = """
import torch
import torch.distributed as dist

_CACHE = {}


def global_token_scale(local_token_counts):
    if "scale" not in _CACHE:  # counted once, reused for every later window
        total = torch.tensor(float(sum(local_token_counts)))
        dist.all_reduce(total)
        _CACHE["scale"] = dist.get_world_size() / total.item()
    return _CACHE["scale"]
"""
NON_TEXTBOOK = NON_TEXTBOOK | {
    ("global_token_scale", "inputs_changed_in_place"),
    ("global_token_scale", "async_not_awaited"),
    ("global_token_scale", "count_cached"),
}
NAMED_AS = {
    **NAMED_AS,
    "inputs_changed_in_place": side_effects.NAMED["inputs_changed_in_place"],
    "count_cached": "state_across_calls",
}
