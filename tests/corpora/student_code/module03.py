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
    "correct_with_log1p": """
import math
from torch import nn
def accumulation_momentum(model, accum_steps):
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm) and module.momentum is not None:
            module.momentum = -math.expm1(math.log1p(-module.momentum) / accum_steps)
    return model
""",
    "children_only": _momentum(walk="children"),
    "stops_after_first_layer": _momentum(
        formula="1 - (1 - module.momentum) ** (1 / accum_steps)\n            return"
    ),
    "default_momentum_assumed": _momentum(formula="1 - (1 - 0.1) ** (1 / accum_steps)"),
    "root_of_momentum": _momentum(formula="module.momentum ** (1 / accum_steps)"),
    "float32_momentum": _momentum(
        formula="1 - (1 - torch.tensor(module.momentum)) ** (1 / accum_steps)"
    ),
    "integer_exponent": _momentum(formula="1 - (1 - module.momentum) ** (1 // accum_steps)"),
    "off_by_one_steps": _momentum(formula="1 - (1 - module.momentum) ** (1 / (accum_steps - 1))"),
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
    "correct_with_load_state_dict": """
from torch import nn
def to_group_norm(model, num_groups):
    for name, child in list(model.named_children()):
        if isinstance(child, nn.modules.batchnorm._BatchNorm):
            group_norm = nn.GroupNorm(num_groups, child.num_features, dtype=child.weight.dtype)
            group_norm.load_state_dict({"weight": child.weight, "bias": child.bias})
            setattr(model, name, group_norm)
        else:
            to_group_norm(child, num_groups)
    return model
""",
    "correct_with_new_parameters": """
from torch import nn
def to_group_norm(model, num_groups):
    for name, child in model._modules.items():
        if type(child) in (nn.BatchNorm1d, nn.BatchNorm2d):
            norm = nn.GroupNorm(num_groups, child.num_features)
            norm.weight = nn.Parameter(child.weight.detach().clone())
            norm.bias = nn.Parameter(child.bias.detach().clone())
            model._modules[name] = norm
        elif child is not None:
            to_group_norm(child, num_groups)
    return model
""",
    "affine_rounded_to_float32": _convert(
        copy="group_norm.weight.data.copy_(child.weight.data.float()); "
        "group_norm.bias.data.copy_(child.bias.data.float())"
    ),
    "built_in_float32_then_converted": """
from torch import nn
def to_group_norm(model, num_groups):
    for name, child in model.named_children():
        if isinstance(child, (nn.BatchNorm1d, nn.BatchNorm2d)):
            group_norm = nn.GroupNorm(num_groups, child.num_features)
            group_norm.weight.data.copy_(child.weight.data)
            group_norm.bias.data.copy_(child.bias.data)
            setattr(model, name, group_norm.to(child.weight.dtype))
        else:
            to_group_norm(child, num_groups)
    return model
""",
    "bias_not_copied": _convert(copy="group_norm.weight.data.copy_(child.weight.data)"),
    "affine_disabled": _convert(groups="num_groups, affine=False", copy="pass").replace(
        ", affine=False, child.num_features)", ", child.num_features, affine=False)"
    ),
    "only_2d_converted": _convert().replace("(nn.BatchNorm1d, nn.BatchNorm2d)", "nn.BatchNorm2d"),
    "groups_and_group_size_swapped": _convert(groups="child.num_features // num_groups"),
    "dotted_name_set_on_the_root": """
import torch
from torch import nn
def to_group_norm(model, num_groups):
    for name, module in list(model.named_modules()):
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            group_norm = nn.GroupNorm(num_groups, module.num_features, dtype=module.weight.dtype)
            with torch.no_grad():
                group_norm.weight.copy_(module.weight)
                group_norm.bias.copy_(module.bias)
            setattr(model, name, group_norm)
    return model
""",
    "copy_at_each_level": """
import copy
from torch import nn
def to_group_norm(model, num_groups):
    model = copy.deepcopy(model)
    for name, child in model.named_children():
        if isinstance(child, (nn.BatchNorm1d, nn.BatchNorm2d)):
            group_norm = nn.GroupNorm(num_groups, child.num_features).to(child.weight.dtype)
            group_norm.weight.data.copy_(child.weight.data)
            group_norm.bias.data.copy_(child.bias.data)
            setattr(model, name, group_norm)
        else:
            to_group_norm(child, num_groups)
    return model
""",
    "layer_norm_for_one_group": """
from torch import nn
def to_group_norm(model, num_groups):
    for name, child in model.named_children():
        if isinstance(child, (nn.BatchNorm1d, nn.BatchNorm2d)):
            if num_groups == 1:  # one group: normalise over all channels
                norm = nn.LayerNorm(child.num_features, dtype=child.weight.dtype)
            else:
                norm = nn.GroupNorm(num_groups, child.num_features, dtype=child.weight.dtype)
            norm.weight.data.copy_(child.weight.data)
            norm.bias.data.copy_(child.bias.data)
            setattr(model, name, norm)
        else:
            to_group_norm(child, num_groups)
    return model
""",
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

BY_QUESTION = {
    "accumulation_momentum": ACCUMULATION_MOMENTUM,
    "to_group_norm": TO_GROUP_NORM,
    "grad_cache_step": GRAD_CACHE_STEP,
}

# Variants whose mistake is named after another one that shows first.
NAMED_AS = {
    "all_graphs_then_one_backward": "graph_kept_for_all_micro_batches",
    "keys_with_graph": "graph_kept_for_all_micro_batches",
    "children_only": "layer_missed",
    "stops_after_first_layer": "layer_missed",
    "built_in_float32_then_converted": "affine_rounded_to_float32",
    "bias_not_copied": "affine_not_copied",
    "affine_disabled": "affine_not_copied",
    "only_2d_converted": "batchnorm_left",
    "groups_and_group_size_swapped": "wrong_groups",
    "dotted_name_set_on_the_root": "batchnorm_left",
    "copy_at_each_level": "batchnorm_left",
    "layer_norm_for_one_group": "wrong_layer",
    "second_pass_detached": "no_backward",
}

# Mutation-testing sets (tests/helpers/mutation.py; tests/corpora/student_code/__init__.py
# says what each means).
NON_TEXTBOOK = {
    ("accumulation_momentum", "float32_momentum"),  # dtype slip
    ("accumulation_momentum", "off_by_one_steps"),  # boundary: 1 / (n - 1)
    ("accumulation_momentum", "integer_exponent"),  # 1 // n: a dtype (int) slip
    ("accumulation_momentum", "stops_after_first_layer"),  # a return inside the loop
    ("to_group_norm", "affine_rounded_to_float32"),  # precision slip
    ("to_group_norm", "built_in_float32_then_converted"),  # precision slip
    ("to_group_norm", "layer_norm_for_one_group"),  # boundary: num_groups = 1
    ("to_group_norm", "dotted_name_set_on_the_root"),  # setattr with "3.1"
    ("to_group_norm", "copy_at_each_level"),  # changes a copy, not the model in place
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
    ("accumulation_momentum", "root_of_momentum"),
    ("accumulation_momentum", "integer_exponent"),
    ("accumulation_momentum", "off_by_one_steps"),
    ("grad_cache_step", "gradients_chunked_by_count"),
    ("grad_cache_step", "slice_offset_from_chunk_length"),
    ("grad_cache_step", "last_partial_micro_batch_dropped"),
    ("grad_cache_step", "float32_cache"),
    ("grad_cache_step", "zero_grad_between_passes"),
}
ALSO_NAMED: dict[tuple[str, str], set[str]] = {}
