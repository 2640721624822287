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
    params = {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}
    frozen = {n: p.detach() for n, p in model.named_parameters() if not p.requires_grad}

    def one(params, xi, yi):
        return loss_fn(functional_call(model, {**frozen, **params}, (xi[None],)), yi[None])

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
    # float64 as torch's default for the arithmetic, never given back: every tensor the
    # caller makes next is float64
    "default_dtype_left": """
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
    # correct too: float64 as torch's default for the arithmetic, given back afterwards
    "correct_with_float64_default": """
import torch

def noise_scale(model, loss_fn, micro_batches):
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        return _estimate(model, loss_fn, micro_batches)
    finally:
        torch.set_default_dtype(before)


def _estimate(model, loss_fn, micro_batches):
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
    # the gradient of every parameter, the frozen one too (torch.func differentiates what
    # it is given)
    "frozen_parameter_included": """
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
    # every .grad read as if it were there: a frozen parameter's None raises
    "frozen_parameter_crashes": "",  # filled in below, from correct_autograd_grad
    # |G_b|^2 as a sum over k - 1 micro-batches, as if for an unbiased variance
    "mean_over_k_minus_1": _increments(record="small += g{square}.item() / (k - 1)"),
    # b taken as len() of a micro-batch: the (inputs, targets) pair, always 2
    "batch_size_from_pair": _increments().replace(
        "b = len(micro_batches[0][0])", "b = len(micro_batches[0])"
    ),
    # the model switched to eval mode for the measurement, and left there
    "eval_mode_left": _increments(cleanup="model.zero_grad(set_to_none=True)\n    model.eval()"),
    # the previous .grad kept on the function between calls, never reset: the second call
    # measures increments against the first call's last gradient
    "state_across_calls": _increments()
    .replace(
        "    previous = flat_grad()\n",
        "    previous = getattr(noise_scale, 'last', None)\n"
        "    if previous is None:\n"
        "        previous = flat_grad()\n",
    )
    .replace(
        "    big = previous",
        "    noise_scale.last = previous * 0 + flat_grad()\n    big = previous",
    ),
}

# autograd.grad asked for every parameter's gradient: a frozen one has none, and it raises
NOISE_SCALE["frozen_parameter_crashes"] = NOISE_SCALE["correct_autograd_grad"].replace(
    "p for p in model.parameters() if p.requires_grad]", "p for p in model.parameters()]"
)
assert NOISE_SCALE["frozen_parameter_crashes"] != NOISE_SCALE["correct_autograd_grad"]

# correct too: eval mode for the measurement, the caller's mode given back at the end
NOISE_SCALE["correct_eval_restored"] = _increments(
    cleanup="model.zero_grad(set_to_none=True)\n    model.train(was_training)"
).replace(
    "    k = len(micro_batches)\n",
    "    k = len(micro_batches)\n    was_training = model.training\n    model.eval()\n",
)
assert "model.eval()" in NOISE_SCALE["correct_eval_restored"]

BY_QUESTION = {"noise_scale": NOISE_SCALE}
NAMED_AS = {
    "micro_batches_changed": "inputs_changed",
    "model_left_changed": "state_left_changed",
    "default_dtype_left": "state_left_changed",
    "eval_mode_left": "state_left_changed",
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
    (_N, "default_dtype_left"),
    (_N, "frozen_parameter_included"),
    (_N, "frozen_parameter_crashes"),
    (_N, "eval_mode_left"),
    (_N, "state_across_calls"),
}
HIDDEN_ONLY: set[tuple[str, str]] = set()
# it raises on the frozen parameter: the verdict reports the exception
UNNAMED: set[tuple[str, str]] = {(_N, "frozen_parameter_crashes")}
ALSO_NAMED: dict[tuple[str, str], set[str]] = {}

# What feedback must say to name the mistake of an UNNAMED mutant (a crash names it by
# its own error and line).
DESCRIBED = {
    ("noise_scale", "frozen_parameter_crashes"): r"does not require grad",
}
