"""Module 6 hand-ins for ``noise_scale`` as students write them: right ones and known mistakes."""

_INCREMENTS = """
import torch

def noise_scale(model, loss_fn, micro_batches):
    k = len(micro_batches)
    b = len(micro_batches[0][0])
    small_batch, big_batch = {sizes}
    params = [p for p in model.parameters() if p.requires_grad]

    def flat_grad():
        return torch.cat(
            [(p.grad if p.grad is not None else torch.zeros_like(p)).flatten() for p in params]
        )

    previous = flat_grad()
    small = 0.0
    {loop}
        loss = loss_fn(model(inputs), targets){divide}
        loss.backward()
        current = flat_grad()
        g = {increment}
        {record}
        previous = current
    big = previous{square}.item()
    {cleanup}
    gradient_sq_norm = {gradient_sq_norm}
    trace = {trace}
    return {{"gradient_sq_norm": gradient_sq_norm, "trace": trace, "b_simple": {ratio}}}
"""


def _increments(
    sizes="b, k * b",
    loop="for inputs, targets in micro_batches:",
    divide=" / k",
    increment="(current - previous) * k",
    square=".pow(2).sum()",
    record="small += g{square}.item() / k",
    cleanup="model.zero_grad(set_to_none=True)",
    gradient_sq_norm="(big_batch * big - small_batch * small) / (big_batch - small_batch)",
    trace="(small - big) / (1 / small_batch - 1 / big_batch)",
    ratio="trace / gradient_sq_norm",
):
    return _INCREMENTS.format(
        sizes=sizes,
        loop=loop,
        divide=divide,
        increment=increment,
        square=square,
        record=record.format(square=square),
        cleanup=cleanup,
        gradient_sq_norm=gradient_sq_norm,
        trace=trace,
        ratio=ratio,
    )


_VARIANCE = """
import torch

def noise_scale(model, loss_fn, micro_batches):
    k, b = len(micro_batches), len(micro_batches[0][0])
    params = [p for p in model.parameters() if p.requires_grad]
    grads = []
    for inputs, targets in micro_batches:
        loss = loss_fn(model(inputs), targets)
        grads.append(torch.cat([g.flatten() for g in torch.autograd.grad(loss, params)]))
    grads = torch.stack(grads).double()
    # tr(Sigma) / b is the variance of one micro-batch's gradient around their mean
    trace = b * grads.var(dim=0, {correction}).sum().item()
    big = grads.mean(dim=0).pow(2).sum().item()
    gradient_sq_norm = big - trace / (k * b)
    return {{"gradient_sq_norm": gradient_sq_norm, "trace": trace,
            "b_simple": trace / gradient_sq_norm}}
"""

_ZEROED_COPIES = """
import torch

def noise_scale(model, loss_fn, micro_batches):
    k, b = len(micro_batches), len(micro_batches[0][0])
    params = [p for p in model.parameters() if p.requires_grad]
    copies = []
    for inputs, targets in micro_batches:
        model.zero_grad()
        (loss_fn(model(inputs), targets) / k).backward()
        copies.append(torch.cat([p.grad.flatten() for p in params]) * k)
    small = sum(g.pow(2).sum().item() for g in copies) / k
    big = {big}
    model.zero_grad()
    B = k * b
    gradient_sq_norm = (B * big - b * small) / (B - b)
    trace = (small - big) / (1 / b - 1 / B)
    return {{"gradient_sq_norm": gradient_sq_norm, "trace": trace,
            "b_simple": trace / gradient_sq_norm}}
"""

NOISE_SCALE = {
    # as the notebook teaches: the increment of .grad is each micro-batch's gradient / k
    "correct": _increments(),
    "correct_zeroed_copies": _ZEROED_COPIES.format(big="(sum(copies) / k).pow(2).sum().item()"),
    "correct_autograd_grad": """
import torch

def noise_scale(model, loss_fn, micro_batches):
    k, b = len(micro_batches), len(micro_batches[0][0])
    params = [p for p in model.parameters() if p.requires_grad]
    total, small = None, 0.0
    for inputs, targets in micro_batches:
        loss = loss_fn(model(inputs), targets)
        g = torch.cat([x.flatten() for x in torch.autograd.grad(loss, params)]).double()
        small += g.dot(g).item() / k
        total = g if total is None else total + g
    big = (total / k).pow(2).sum().item()
    B = k * b
    gradient_sq_norm = (B * big - b * small) / (B - b)
    trace = (small - big) / (1 / b - 1 / B)
    return dict(gradient_sq_norm=gradient_sq_norm, trace=trace, b_simple=trace / gradient_sq_norm)
""",
    "correct_torch_func": """
import torch
from torch.func import functional_call, grad, vmap

def noise_scale(model, loss_fn, micro_batches):
    k, b = len(micro_batches), len(micro_batches[0][0])
    x = torch.cat([inputs for inputs, _ in micro_batches])
    y = torch.cat([targets for _, targets in micro_batches])
    params = {n: p.detach() for n, p in model.named_parameters()}

    def one(params, xi, yi):
        return loss_fn(functional_call(model, params, (xi[None],)), yi[None])

    per_sample = vmap(grad(one), in_dims=(None, 0, 0))(params, x, y)
    rows = torch.cat([g.reshape(k * b, -1) for g in per_sample.values()], dim=1).double()
    micro = rows.reshape(k, b, -1).mean(dim=1)
    small = micro.pow(2).sum(dim=1).mean().item()
    big = rows.mean(dim=0).pow(2).sum().item()
    B = k * b
    g2 = (B * big - b * small) / (B - b)
    s = (small - big) / (1 / b - 1 / B)
    return {"gradient_sq_norm": g2, "trace": s, "b_simple": s / g2}
""",
    # the unbiased variance of the k micro-batch gradients is tr(Sigma) / b: the same estimate
    "correct_variance_of_micro_gradients": _VARIANCE.format(correction="correction=1"),
    "big_norm_as_true_norm": _increments(gradient_sq_norm="big", trace="small_batch * small"),
    "partial_sums_not_micro_batches": _increments(increment="current * k"),
    "big_gradient_not_averaged": _increments(divide="", increment="current - previous"),
    "norm_not_squared": _increments(square=".norm()"),
    "batch_sizes_swapped": _increments(sizes="k * b, b"),
    "counts_not_sizes": _increments(sizes="1, k"),
    # overwritten on every micro-batch: the last one's stays
    "one_micro_batch_only": _increments(record="small = g{square}.item()"),
    "ratio_inverted": _increments(ratio="gradient_sq_norm / trace"),
    "grads_left_behind": _increments(cleanup="pass"),
    # non-textbook: np.var's default, the biased variance (divided by k, not k - 1)
    "variance_not_unbiased": _VARIANCE.format(correction="correction=0"),
    # non-textbook: zeroing between micro-batches to read each gradient, then G_B from .grad
    "big_gradient_from_last_micro_batch": _ZEROED_COPIES.format(
        big="torch.cat([p.grad.flatten() for p in params]).pow(2).sum().item()"
    ),
    # non-textbook: the caller's list emptied by pop()
    "micro_batches_changed": _increments(
        loop="while micro_batches:\n        inputs, targets = micro_batches.pop(0)"
    ),
    # non-textbook: zero_grad(set_to_none=False) leaves zero tensors where None was
    "zero_grad_set_to_zero": _increments(cleanup="model.zero_grad(set_to_none=False)"),
    # the first micro-batch's norm only
    "first_micro_batch_norm_only": _increments(
        record="if small == 0.0:\n            small = g{square}.item()"
    ),
    # non-textbook: gradients captured by hooks that are never removed; the caller's next
    # backward runs them again
    "model_left_changed": """
import torch

def noise_scale(model, loss_fn, micro_batches):
    k, b = len(micro_batches), len(micro_batches[0][0])
    params = [p for p in model.parameters() if p.requires_grad]
    captured = []
    for p in params:
        p.register_hook(lambda g: captured.append(g.detach().flatten()) or g)
    grads = []
    for inputs, targets in micro_batches:
        captured.clear()
        loss_fn(model(inputs), targets).backward()
        grads.append(torch.cat(list(reversed(captured))))
    model.zero_grad(set_to_none=True)
    small = sum(g.pow(2).sum().item() for g in grads) / k
    big = torch.stack(grads).mean(0).pow(2).sum().item()
    g2 = (k * b * big - b * small) / (k * b - b)
    trace = (small - big) / (1 / b - 1 / (k * b))
    return {"gradient_sq_norm": g2, "trace": trace, "b_simple": trace / g2}
""",
    # correct too: float64 as torch's default for the arithmetic (the check builds its
    # problems in float32 whatever the default, and gives the default back afterwards)
    "correct_with_float64_default": """
import torch

def noise_scale(model, loss_fn, micro_batches):
    torch.set_default_dtype(torch.float64)
    k, b = len(micro_batches), len(micro_batches[0][0])
    params = [p for p in model.parameters() if p.requires_grad]
    grads = []
    for inputs, targets in micro_batches:
        loss = loss_fn(model(inputs), targets)
        grads.append(torch.cat([g.flatten().double() for g in torch.autograd.grad(loss, params)]))
    small = sum(g.pow(2).sum().item() for g in grads) / k
    big = torch.stack(grads).mean(0).pow(2).sum().item()
    g2 = (k * b * big - b * small) / (k * b - b)
    trace = (small - big) / (1 / b - 1 / (k * b))
    return {"gradient_sq_norm": g2, "trace": trace, "b_simple": trace / g2}
""",
}

BY_QUESTION = {"noise_scale": NOISE_SCALE}
NAMED_AS = {
    "zero_grad_set_to_zero": "grads_left_behind",
    "first_micro_batch_norm_only": "one_micro_batch_only",
}
_N = "noise_scale"
NON_TEXTBOOK: set[tuple[str, str]] = {
    (_N, "variance_not_unbiased"),
    (_N, "big_gradient_from_last_micro_batch"),
    (_N, "micro_batches_changed"),
    (_N, "zero_grad_set_to_zero"),
    (_N, "model_left_changed"),
}
HIDDEN_ONLY: set[tuple[str, str]] = set()
UNNAMED: set[tuple[str, str]] = set()
ALSO_NAMED: dict[tuple[str, str], set[str]] = {}
