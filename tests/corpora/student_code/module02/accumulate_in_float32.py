"""``accumulate_in_float32`` hand-ins: the right float32 sums and each known mistake, as source."""

from tests.corpora.student_code import side_effects

_FLOAT32 = """
import torch
def accumulate_in_float32(model, loss_fn, micro_batches):
{body}
"""


def _float32(body):
    return _FLOAT32.format(body=body)


ACCUMULATE_IN_FLOAT32 = {
    "correct": _float32(
        "    sums = [torch.zeros_like(p, dtype=torch.float32) for p in model.parameters()]\n"
        "    for inputs, targets in micro_batches:\n"
        "        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()\n"
        "        for total, p in zip(sums, model.parameters()):\n"
        "            if p.grad is not None:  # a frozen parameter has none\n"
        "                total += p.grad.float()\n"
        "                p.grad = None\n"
        "    return sums"
    ),
    # the micro-batch gradients kept and summed at the end, in float32, in another order
    "correct_summed_at_the_end": _float32(
        "    parts = []\n"
        "    for inputs, targets in micro_batches:\n"
        "        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()\n"
        "        parts.append([torch.zeros(p.shape) if p.grad is None else p.grad.float()\n"
        "                      for p in model.parameters()])\n"
        "        model.zero_grad(set_to_none=True)\n"
        "    return [torch.stack(column).sum(0) for column in zip(*parts)]"
    ),
    # add_ with an explicit conversion, and zero_grad() to clear
    "correct_with_add_": _float32(
        "    sums = [torch.zeros(p.shape, dtype=torch.float32) for p in model.parameters()]\n"
        "    for inputs, targets in micro_batches:\n"
        "        loss = loss_fn(model(inputs), targets) / len(micro_batches)\n"
        "        loss.backward()\n"
        "        for i, p in enumerate(model.parameters()):\n"
        "            if p.requires_grad:\n"
        "                sums[i].add_(p.grad.to(torch.float32))\n"
        "        model.zero_grad()\n"
        "    return sums"
    ),
    # float64 sums: finer than asked, and accepted
    "correct_in_float64": _float32(
        "    sums = [torch.zeros_like(p, dtype=torch.float64) for p in model.parameters()]\n"
        "    for inputs, targets in micro_batches:\n"
        "        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()\n"
        "        for total, p in zip(sums, model.parameters()):\n"
        "            if p.grad is not None:\n"
        "                total += p.grad.double()\n"
        "                p.grad = None\n"
        "    return sums"
    ),
    # the loss computed in float32: its bf16 gradients round a little differently
    "correct_loss_in_float32": _float32(
        "    sums = [torch.zeros_like(p, dtype=torch.float32) for p in model.parameters()]\n"
        "    for inputs, targets in micro_batches:\n"
        "        loss = loss_fn(model(inputs).float(), targets.float()) / len(micro_batches)\n"
        "        loss.backward()\n"
        "        for total, p in zip(sums, model.parameters()):\n"
        "            if p.grad is not None:  # a frozen parameter has none\n"
        "                total += p.grad.float()\n"
        "                p.grad = None\n"
        "    return sums"
    ),
    # the undivided losses' gradients summed, the sums divided at the end
    "correct_divided_at_the_end": _float32(
        "    sums = [torch.zeros_like(p, dtype=torch.float32) for p in model.parameters()]\n"
        "    for inputs, targets in micro_batches:\n"
        "        loss_fn(model(inputs), targets).backward()\n"
        "        for total, p in zip(sums, model.parameters()):\n"
        "            if p.grad is not None:\n"
        "                total += p.grad\n"
        "                p.grad = None\n"
        "    return [total / len(micro_batches) for total in sums]"
    ),
    # forward and loss under autocast
    "correct_under_autocast": _float32(
        "    sums = [torch.zeros_like(p, dtype=torch.float32) for p in model.parameters()]\n"
        "    for inputs, targets in micro_batches:\n"
        "        with torch.autocast('cpu', dtype=torch.bfloat16):\n"
        "            loss = loss_fn(model(inputs), targets) / len(micro_batches)\n"
        "        loss.backward()\n"
        "        for total, p in zip(sums, model.parameters()):\n"
        "            if p.grad is not None:\n"
        "                total += p.grad\n"
        "                p.grad = None\n"
        "    return sums"
    ),
    # .grad left to add up in bf16, converted at the end: the pitfall itself
    "accumulated_in_bf16": _float32(
        "    for inputs, targets in micro_batches:\n"
        "        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()\n"
        "    return [p.grad.float() for p in model.parameters()]"
    ),
    # a bf16 buffer, returned as it is
    "bf16_buffer_returned": _float32(
        "    sums = [torch.zeros_like(p) for p in model.parameters()]\n"
        "    for inputs, targets in micro_batches:\n"
        "        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()\n"
        "        for total, p in zip(sums, model.parameters()):\n"
        "            total += p.grad\n"
        "            p.grad = None\n"
        "    return sums"
    ),
    # a bf16 buffer, converted at the end
    "bf16_buffer_converted": _float32(
        "    sums = [torch.zeros_like(p) for p in model.parameters()]\n"
        "    for inputs, targets in micro_batches:\n"
        "        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()\n"
        "        for total, p in zip(sums, model.parameters()):\n"
        "            total += p.grad\n"
        "            p.grad = None\n"
        "    return [total.float() for total in sums]"
    ),
    "loss_not_divided": _float32(
        "    sums = [torch.zeros_like(p, dtype=torch.float32) for p in model.parameters()]\n"
        "    for inputs, targets in micro_batches:\n"
        "        loss_fn(model(inputs), targets).backward()\n"
        "        for total, p in zip(sums, model.parameters()):\n"
        "            total += p.grad.float()\n"
        "            p.grad = None\n"
        "    return sums"
    ),
    # .grad never cleared: every micro-batch adds the running .grad again
    "grad_not_cleared": _float32(
        "    sums = [torch.zeros_like(p, dtype=torch.float32) for p in model.parameters()]\n"
        "    for inputs, targets in micro_batches:\n"
        "        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()\n"
        "        for total, p in zip(sums, model.parameters()):\n"
        "            total += p.grad.float()\n"
        "    return sums"
    ),
    # the model cast to float32 for the backward: more accurate, and the memory is gone
    "model_cast": _float32(
        "    model.float()\n"
        "    for inputs, targets in micro_batches:\n"
        "        loss = loss_fn(model(inputs.float()), targets.float()) / len(micro_batches)\n"
        "        loss.backward()\n"
        "    return [p.grad for p in model.parameters()]"
    ),
    # float16 sums: 11 significant bits, and a range too small for tiny gradients
    "sums_in_float16": _float32(
        "    sums = [torch.zeros_like(p, dtype=torch.float16) for p in model.parameters()]\n"
        "    for inputs, targets in micro_batches:\n"
        "        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()\n"
        "        for total, p in zip(sums, model.parameters()):\n"
        "            total += p.grad\n"
        "            p.grad = None\n"
        "    return sums"
    ),
    # non-textbook: the loss divided twice
    "divided_twice": _float32(
        "    n = len(micro_batches)\n"
        "    sums = [torch.zeros_like(p, dtype=torch.float32) for p in model.parameters()]\n"
        "    for inputs, targets in micro_batches:\n"
        "        (loss_fn(model(inputs), targets) / n / n).backward()\n"
        "        for total, p in zip(sums, model.parameters()):\n"
        "            total += p.grad\n"
        "            p.grad = None\n"
        "    return sums"
    ),
    # non-textbook: the sums returned after the first micro-batch
    "first_micro_batch_only": _float32(
        "    sums = [torch.zeros_like(p, dtype=torch.float32) for p in model.parameters()]\n"
        "    for inputs, targets in micro_batches:\n"
        "        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()\n"
        "        for total, p in zip(sums, model.parameters()):\n"
        "            total += p.grad\n"
        "            p.grad = None\n"
        "        return sums"
    ),
    # one backward for the summed losses: every micro-batch's graph alive at once
    "single_backward": _float32(
        "    total = sum(loss_fn(model(x), y) for x, y in micro_batches) / len(micro_batches)\n"
        "    total.backward()\n"
        "    return [p.grad.float() for p in model.parameters()]"
    ),
    # the model cast to float32 for the window and back to bf16 afterwards
    "model_cast_and_back": _float32(
        "    model.float()\n"
        "    for inputs, targets in micro_batches:\n"
        "        loss = loss_fn(model(inputs.float()), targets.float()) / len(micro_batches)\n"
        "        loss.backward()\n"
        "    sums = [p.grad.clone() for p in model.parameters()]\n"
        "    model.zero_grad(set_to_none=True)\n"
        "    model.to(torch.bfloat16)\n"
        "    return sums"
    ),
    # a float32 copy of the model does the work
    "float32_copy": _float32(
        "    import copy\n"
        "    twin = copy.deepcopy(model).float()\n"
        "    for inputs, targets in micro_batches:\n"
        "        loss = loss_fn(twin(inputs.float()), targets.float()) / len(micro_batches)\n"
        "        loss.backward()\n"
        "    return [p.grad for p in twin.parameters()]"
    ),
    # the last micro-batch left out of the sums
    "micro_batch_skipped": _float32(
        "    sums = [torch.zeros_like(p, dtype=torch.float32) for p in model.parameters()]\n"
        "    for inputs, targets in micro_batches[:-1]:\n"
        "        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()\n"
        "        for total, p in zip(sums, model.parameters()):\n"
        "            total += p.grad\n"
        "            p.grad = None\n"
        "    return sums"
    ),
    # the whole window in one forward: no accumulation at all
    "whole_window_at_once": _float32(
        "    inputs = torch.cat([x for x, _ in micro_batches])\n"
        "    targets = torch.cat([y for _, y in micro_batches])\n"
        "    loss_fn(model(inputs), targets).backward()\n"
        "    return [p.grad.float() for p in model.parameters()]"
    ),
}

ACCUMULATE_IN_FLOAT32.update(
    {
        # float32 buffers kept per model between calls and never zeroed: the next window adds
        # onto this one's sums
        "buffers_kept_between_calls": _float32(
            "    sums = _SUMS.setdefault(id(model), [torch.zeros_like(p, dtype=torch.float32)\n"
            "                                        for p in model.parameters()])\n"
            "    for inputs, targets in micro_batches:\n"
            "        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()\n"
            "        for total, p in zip(sums, model.parameters()):\n"
            "            if p.grad is not None:\n"
            "                total += p.grad.float()\n"
            "                p.grad = None\n"
            "    return sums"
        ).replace("import torch\n", "import torch\n_SUMS = {}\n", 1),
        # each loss divided by the micro-batch size instead of the number of micro-batches
        "divided_by_micro_batch_size": _float32(
            "    sums = [torch.zeros_like(p, dtype=torch.float32) for p in model.parameters()]\n"
            "    for inputs, targets in micro_batches:\n"
            "        (loss_fn(model(inputs), targets) / len(inputs)).backward()\n"
            "        for total, p in zip(sums, model.parameters()):\n"
            "            if p.grad is not None:\n"
            "                total += p.grad.float()\n"
            "                p.grad = None\n"
            "    return sums"
        ),
        # sums only for the parameters that require grad: 3 tensors for 4 parameters
        "frozen_parameter_skipped": _float32(
            "    trainable = [p for p in model.parameters() if p.requires_grad]\n"
            "    sums = [torch.zeros_like(p, dtype=torch.float32) for p in trainable]\n"
            "    for inputs, targets in micro_batches:\n"
            "        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()\n"
            "        for total, p in zip(sums, trainable):\n"
            "            total += p.grad.float()\n"
            "            p.grad = None\n"
            "    return sums"
        ),
        # every .grad read as if it were there: a frozen parameter's None raises
        "frozen_parameter_crashes": _float32(
            "    sums = [torch.zeros_like(p, dtype=torch.float32) for p in model.parameters()]\n"
            "    for inputs, targets in micro_batches:\n"
            "        (loss_fn(model(inputs), targets) / len(micro_batches)).backward()\n"
            "        for total, p in zip(sums, model.parameters()):\n"
            "            total += p.grad.float()\n"
            "            p.grad = None\n"
            "    return sums"
        ),
        **side_effects.variants(
            ACCUMULATE_IN_FLOAT32["correct"],
            "accumulate_in_float32",
            eval_mode_left=side_effects.EVAL_MODE_LEFT,
            inputs_popped="args[2].pop()",
        ),
    }
)

# For tests/helpers/mutation.py (see tests/corpora/student_code/__init__.py).
NON_TEXTBOOK = {
    ("accumulate_in_float32", "buffers_kept_between_calls"),
    ("accumulate_in_float32", "frozen_parameter_skipped"),
    ("accumulate_in_float32", "frozen_parameter_crashes"),
    ("accumulate_in_float32", "eval_mode_left"),
    ("accumulate_in_float32", "inputs_popped"),
    ("accumulate_in_float32", "divided_twice"),
    ("accumulate_in_float32", "first_micro_batch_only"),
}
# only the grader's draw holds a frozen parameter (the notebook's public check has none)
HIDDEN_ONLY = {
    ("accumulate_in_float32", "frozen_parameter_skipped"),
    ("accumulate_in_float32", "frozen_parameter_crashes"),
}
UNNAMED = {
    # it raises: the verdict reports the exception, and no name is true of that
    ("accumulate_in_float32", "frozen_parameter_crashes"),
    ("accumulate_in_float32", "divided_twice"),
    ("accumulate_in_float32", "first_micro_batch_only"),
}
ALSO_NAMED = {
    # With a window of one micro-batch, leaving out the last leaves no backward at all.
    ("accumulate_in_float32", "micro_batch_skipped"): {"no_backward"},
}
# Variants named after the mistake the checks name (one that shows first, or the same
# mistake seen from outside).
NAMED_AS = {
    **side_effects.NAMED,
    "buffers_kept_between_calls": "state_across_calls",
    "bf16_buffer_returned": "accumulated_in_bf16",
    "bf16_buffer_converted": "accumulated_in_bf16",
    "whole_window_at_once": "whole_batch_forward",
    "sums_in_float16": "sums_not_float32",
    "model_cast_and_back": "model_cast",
    "float32_copy": "model_cast",
}

# What feedback must say to name the mistake of an UNNAMED mutant (a crash names it by
# its own error and line).
DESCRIBED = {
    ("accumulate_in_float32", "divided_twice"): r"times the window's mean gradient",
    ("accumulate_in_float32", "frozen_parameter_crashes"): r"AttributeError",
}
