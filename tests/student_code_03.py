"""Module 3 hand-ins as students write them: the right answer and each known mistake."""

_MOMENTUM = """
import torch
def accumulation_momentum(model, accum_steps):
    for module in model.{walk}():
        if isinstance(module, {kinds}) and module.momentum is not None:
            module.momentum = {formula}
"""


def _momentum(walk="modules", kinds="torch.nn.modules.batchnorm._BatchNorm", formula=None):
    formula = formula or "1 - (1 - module.momentum) ** (1 / accum_steps)"
    return _MOMENTUM.format(walk=walk, kinds=kinds, formula=formula)


ACCUMULATION_MOMENTUM = {
    "correct": _momentum(),
    "correct_with_explicit_classes": _momentum(
        kinds="(torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.BatchNorm3d)"
    ),
    "divided_by_n": _momentum(formula="module.momentum / accum_steps"),
    "power_not_root": _momentum(formula="1 - (1 - module.momentum) ** accum_steps"),
    "layer_missed": _momentum(kinds="torch.nn.BatchNorm1d"),
    "none_momentum_not_skipped": """
import torch
def accumulation_momentum(model, accum_steps):
    for module in model.modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            module.momentum = 1 - (1 - module.momentum) ** (1 / accum_steps)
""",
    "nothing_changed": """
import copy
import torch
def accumulation_momentum(model, accum_steps):
    model = copy.deepcopy(model)
    for module in model.modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm) and module.momentum:
            module.momentum = 1 - (1 - module.momentum) ** (1 / accum_steps)
    return model
""",
    "none_momentum_changed": """
import torch
def accumulation_momentum(model, accum_steps):
    for module in model.modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            m = 0.1 if module.momentum is None else module.momentum
            module.momentum = 1 - (1 - m) ** (1 / accum_steps)
""",
}

_CONVERT = """
import torch
from torch import nn
def to_group_norm(model, num_groups):
    for name, child in model.named_children():
        if isinstance(child, (nn.BatchNorm1d, nn.BatchNorm2d)):
            group_norm = nn.GroupNorm({groups}, child.num_features).to(child.weight.dtype)
            {copy}
            setattr(model, name, group_norm)
        else:
            {recurse}
    {ret}
"""
_COPY = (
    "group_norm.weight.data.copy_(child.weight.data); group_norm.bias.data.copy_(child.bias.data)"
)


def _convert(groups="num_groups", copy=_COPY, recurse="to_group_norm(child, num_groups)"):
    ret = "return model"
    return _CONVERT.format(groups=groups, copy=copy, recurse=recurse, ret=ret)


TO_GROUP_NORM = {
    "correct": _convert(),
    "correct_via_named_modules": """
import torch
from torch import nn
def to_group_norm(model, num_groups):
    for name, module in list(model.named_modules()):
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            parent = model.get_submodule(name.rpartition(".")[0]) if "." in name else model
            group_norm = nn.GroupNorm(num_groups, module.num_features, dtype=module.weight.dtype)
            with torch.no_grad():
                group_norm.weight.copy_(module.weight)
                group_norm.bias.copy_(module.bias)
            setattr(parent, name.rpartition(".")[2], group_norm)
    return model
""",
    "batchnorm_left": _convert(recurse="pass"),
    "wrong_dtype": _convert().replace(".to(child.weight.dtype)", ""),
    "affine_not_copied": _convert(copy="pass"),
    "wrong_groups": _convert(groups="child.num_features"),
    "model_not_returned": _convert().replace("    return model\n", "    return None\n"),
}

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

BY_QUESTION = {
    "accumulation_momentum": ACCUMULATION_MOMENTUM,
    "to_group_norm": TO_GROUP_NORM,
    "grad_cache_step": GRAD_CACHE_STEP,
}

# Variants whose mistake is named after another one that shows first.
NAMED_AS = {
    "all_graphs_then_one_backward": "graph_kept_for_all_micro_batches",
    "keys_with_graph": "graph_kept_for_all_micro_batches",
}
