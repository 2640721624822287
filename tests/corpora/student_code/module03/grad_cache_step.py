"""``grad_cache_step`` hand-ins: the right answer and each known mistake, as source."""

from tests.corpora.student_code import side_effects

_CACHE = """
import torch
from coursekit.contrastive import info_nce
def grad_cache_step(encoder, queries, keys, micro_batch_size, temperature):
    {first_pass}
    query_cache.requires_grad_(True)
    key_cache.requires_grad_(True)
    loss = info_nce(query_cache, key_cache, temperature)
    loss.backward()
    for inputs, cache in {which}:
        for chunk, grad in zip(inputs.split(micro_batch_size), cache.grad.split(micro_batch_size)):
            encoder(chunk).backward({gradient})
    return loss.item()
"""
_NO_GRAD = """with torch.no_grad():
        query_cache = torch.cat([encoder(q) for q in queries.split(micro_batch_size)])
        key_cache = torch.cat([encoder(k) for k in keys.split(micro_batch_size)])"""


def _cache(
    first_pass=_NO_GRAD, which="((queries, query_cache), (keys, key_cache))", gradient="grad"
):
    return _CACHE.format(first_pass=first_pass, which=which, gradient=gradient)


GRAD_CACHE_STEP = {
    "correct": _cache(),
    # the gradient right, the loss returned per pair: not the full-batch loss info_nce gives
    "loss_wrong": _cache().replace(
        "    return loss.item()\n", "    return loss.item() / len(queries)\n"
    ),
    "correct_with_detach_in_the_first_pass": _cache(
        first_pass=(
            "query_cache = torch.cat([encoder(q).detach() for q in "
            "queries.split(micro_batch_size)])\n"
            "    key_cache = torch.cat([encoder(k).detach() for k in keys.split(micro_batch_size)])"
        )
    ),
    "correct_queries_and_keys_in_one_backward": """
import torch
from coursekit.contrastive import info_nce
def grad_cache_step(encoder, queries, keys, micro_batch_size, temperature):
    with torch.no_grad():
        q_cache = torch.cat([encoder(q) for q in queries.split(micro_batch_size)])
        k_cache = torch.cat([encoder(k) for k in keys.split(micro_batch_size)])
    q_cache.requires_grad_(True)
    k_cache.requires_grad_(True)
    loss = info_nce(q_cache, k_cache, temperature)
    loss.backward()
    chunks = zip(
        queries.split(micro_batch_size), keys.split(micro_batch_size),
        q_cache.grad.split(micro_batch_size), k_cache.grad.split(micro_batch_size),
    )
    for q, k, gq, gk in chunks:
        torch.autograd.backward([encoder(q), encoder(k)], [gq, gk])
    return loss
""",
    "negatives_per_micro_batch": """
from coursekit.contrastive import info_nce
def grad_cache_step(encoder, queries, keys, micro_batch_size, temperature):
    total = 0.0
    chunks = list(zip(queries.split(micro_batch_size), keys.split(micro_batch_size)))
    for q, k in chunks:
        loss = info_nce(encoder(q), encoder(k), temperature) * len(q) / len(queries)
        loss.backward()
        total += loss.item()
    return total
""",
    "keys_not_backpropagated": _cache(which="((queries, query_cache),)"),
    "wrong_scale": _cache(gradient="grad / (len(queries) // micro_batch_size)"),
    "whole_batch_forward": """
from coursekit.contrastive import info_nce
def grad_cache_step(encoder, queries, keys, micro_batch_size, temperature):
    loss = info_nce(encoder(queries), encoder(keys), temperature)
    loss.backward()
    return loss.item()
""",
    "all_graphs_then_one_backward": """
import torch
from coursekit.contrastive import info_nce
def grad_cache_step(encoder, queries, keys, micro_batch_size, temperature):
    with torch.no_grad():
        q_cache = torch.cat([encoder(q) for q in queries.split(micro_batch_size)])
        k_cache = torch.cat([encoder(k) for k in keys.split(micro_batch_size)])
    q_cache.requires_grad_(True)
    k_cache.requires_grad_(True)
    loss = info_nce(q_cache, k_cache, temperature)
    loss.backward()
    outputs, grads = [], []
    for inputs, cache in ((queries, q_cache), (keys, k_cache)):
        for chunk, grad in zip(inputs.split(micro_batch_size), cache.grad.split(micro_batch_size)):
            outputs.append(encoder(chunk))
            grads.append(grad)
    torch.autograd.backward(outputs, grads)
    return loss.item()
""",
    "keys_with_graph": """
import torch
from coursekit.contrastive import info_nce
def grad_cache_step(encoder, queries, keys, micro_batch_size, temperature):
    with torch.no_grad():
        q_cache = torch.cat([encoder(q) for q in queries.split(micro_batch_size)])
    q_cache.requires_grad_(True)
    k_all = torch.cat([encoder(k) for k in keys.split(micro_batch_size)])
    loss = info_nce(q_cache, k_all, temperature)
    loss.backward()
    for chunk, grad in zip(queries.split(micro_batch_size), q_cache.grad.split(micro_batch_size)):
        encoder(chunk).backward(grad)
    return loss.item()
""",
    "graph_kept_for_all_micro_batches": """
import torch
from coursekit.contrastive import info_nce
def grad_cache_step(encoder, queries, keys, micro_batch_size, temperature):
    q = torch.cat([encoder(chunk) for chunk in queries.split(micro_batch_size)])
    k = torch.cat([encoder(chunk) for chunk in keys.split(micro_batch_size)])
    loss = info_nce(q, k, temperature)
    loss.backward()
    return loss.item()
""",
}

GRAD_CACHE_STEP.update(
    {
        "correct_with_autograd_grad": """
import torch
from coursekit.contrastive import info_nce
def grad_cache_step(encoder, queries, keys, micro_batch_size, temperature):
    with torch.no_grad():
        q_cache = torch.cat([encoder(q) for q in torch.split(queries, micro_batch_size)])
        k_cache = torch.cat([encoder(k) for k in torch.split(keys, micro_batch_size)])
    q_cache.requires_grad_(True)
    k_cache.requires_grad_(True)
    loss = info_nce(q_cache, k_cache, temperature)
    q_grad, k_grad = torch.autograd.grad(loss, [q_cache, k_cache])
    params = list(encoder.parameters())
    total = [torch.zeros_like(p) for p in params]
    for inputs, cache_grad in ((queries, q_grad), (keys, k_grad)):
        for start in range(0, len(inputs), micro_batch_size):
            rows = slice(start, start + micro_batch_size)
            grads = torch.autograd.grad(encoder(inputs[rows]), params, cache_grad[rows])
            for t, g in zip(total, grads):
                t += g
    for p, t in zip(params, total):
        p.grad = t
    return loss.item()
""",
        "gradients_chunked_by_count": _cache().replace(
            "cache.grad.split(micro_batch_size)",
            "cache.grad.chunk(-(-len(inputs) // micro_batch_size))",
        ),
        "slice_offset_from_chunk_length": """
import torch
from coursekit.contrastive import info_nce
def grad_cache_step(encoder, queries, keys, micro_batch_size, temperature):
    with torch.no_grad():
        q_cache = torch.cat([encoder(q) for q in queries.split(micro_batch_size)])
        k_cache = torch.cat([encoder(k) for k in keys.split(micro_batch_size)])
    q_cache.requires_grad_(True)
    k_cache.requires_grad_(True)
    loss = info_nce(q_cache, k_cache, temperature)
    loss.backward()
    for inputs, cache in ((queries, q_cache), (keys, k_cache)):
        for i, chunk in enumerate(inputs.split(micro_batch_size)):
            start = i * len(chunk)
            encoder(chunk).backward(cache.grad[start:start + len(chunk)])
    return loss.item()
""",
        "last_partial_micro_batch_dropped": """
import torch
from coursekit.contrastive import info_nce
def grad_cache_step(encoder, queries, keys, micro_batch_size, temperature):
    with torch.no_grad():
        q_cache = torch.cat([encoder(q) for q in queries.split(micro_batch_size)])
        k_cache = torch.cat([encoder(k) for k in keys.split(micro_batch_size)])
    q_cache.requires_grad_(True)
    k_cache.requires_grad_(True)
    loss = info_nce(q_cache, k_cache, temperature)
    loss.backward()
    m = micro_batch_size
    for inputs, cache in ((queries, q_cache), (keys, k_cache)):
        for i in range(len(inputs) // m):
            encoder(inputs[i * m:(i + 1) * m]).backward(cache.grad[i * m:(i + 1) * m])
    return loss.item()
""",
        "second_pass_detached": _cache(gradient="grad").replace(
            "encoder(chunk).backward(grad)",
            "encoder(chunk).detach().requires_grad_(True).backward(grad)",
        ),
        "zero_grad_between_passes": _cache().replace(
            "    for inputs, cache in ((queries, query_cache), (keys, key_cache)):\n",
            "    for inputs, cache in ((queries, query_cache), (keys, key_cache)):\n"
            "        encoder.zero_grad()  # start each pass clean\n",
        ),
        "float32_cache": _cache(
            first_pass=_NO_GRAD.replace(
                "for q in queries.split(micro_batch_size)])",
                "for q in queries.split(micro_batch_size)]).float()",
            ).replace(
                "for k in keys.split(micro_batch_size)])",
                "for k in keys.split(micro_batch_size)]).float()",
            )
        ),
    }
)

# Variants whose mistake is named after another one that shows first.
NAMED_AS = {
    "all_graphs_then_one_backward": "graph_kept_for_all_micro_batches",
    "keys_with_graph": "graph_kept_for_all_micro_batches",
    "second_pass_detached": "no_backward",
}

# Mutation-testing sets (tests/helpers/mutation.py; tests/corpora/student_code/__init__.py
# says what each means).
NON_TEXTBOOK = {
    ("grad_cache_step", "gradients_chunked_by_count"),  # sizes that do not divide
    ("grad_cache_step", "slice_offset_from_chunk_length"),  # sizes that do not divide
    ("grad_cache_step", "last_partial_micro_batch_dropped"),  # partial window
    ("grad_cache_step", "second_pass_detached"),  # detach misuse
    ("grad_cache_step", "float32_cache"),  # dtype slip
    ("grad_cache_step", "zero_grad_between_passes"),  # state cleared between passes
}
# Only the grader's fixed spec (10 pairs, micro-batches of 6) catches this one.
HIDDEN_ONLY = {("grad_cache_step", "gradients_chunked_by_count")}
# No name fits these (the message says what differs, where).
UNNAMED = {
    ("grad_cache_step", "gradients_chunked_by_count"),
    ("grad_cache_step", "slice_offset_from_chunk_length"),
    ("grad_cache_step", "last_partial_micro_batch_dropped"),
    ("grad_cache_step", "float32_cache"),
}


# Side-effect mutants (tests/corpora/student_code/side_effects.py): the answer right, the
# caller's inputs or model, or torch's switches, left changed.
GRAD_CACHE_STEP.update(
    side_effects.variants(
        GRAD_CACHE_STEP["correct"],
        "grad_cache_step",
        eval_mode_left=side_effects.EVAL_MODE_LEFT,
        inputs_changed_in_place="args[1].mul_(2)",
    )
)
NON_TEXTBOOK = NON_TEXTBOOK | {
    ("grad_cache_step", "eval_mode_left"),
    ("grad_cache_step", "inputs_changed_in_place"),
}
NAMED_AS = {
    **NAMED_AS,
    "eval_mode_left": side_effects.NAMED["eval_mode_left"],
    "inputs_changed_in_place": side_effects.NAMED["inputs_changed_in_place"],
}

# What feedback must say to name the mistake of an UNNAMED mutant (a crash names it by
# its own error and line).
DESCRIBED = {
    ("grad_cache_step", "float32_cache"): r"a float32 step",
    ("grad_cache_step", "gradients_chunked_by_count"): r"RuntimeError",
    ("grad_cache_step", "slice_offset_from_chunk_length"): r"the last micro-batch is shorter",
    ("grad_cache_step", "last_partial_micro_batch_dropped"): r"the last micro-batch is shorter",
}
