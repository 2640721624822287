"""Public checks for module 1 (01_accumulation): one window, the loop, and memory.

Each case builds its own small problem, runs the student's function on it, and compares
with an oracle: the full-batch gradient, the reference loop, or measured activation bytes.
On a mismatch it tries the known mistakes before giving a generic message.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from coursekit.checks.gradients import scale_factor
from coursekit.checks.loop_variants import MISTAKES, run_loop
from coursekit.checks.registry import Failure, question
from coursekit.data import make_regression, split_micro_batches
from coursekit.gradients import flat_gradient, full_batch_gradient, relative_error
from coursekit.memory import activation_bytes
from coursekit.models import tiny_mlp

MODULE = "01_accumulation"

# Summing N float64 micro-batch gradients in another order than the full batch does changes
# only the last bits: ~1e-16 relative. float32 keeps 24 bits (~6e-8): after a few hundred
# multiply-adds per element, 1e-5 leaves a wide margin over the rounding seen in practice.
FLOAT64_TOLERANCE = 1e-10
FLOAT32_TOLERANCE = 1e-5


# ---------------------------------------------------------------- accumulate_window


def _window_problem(accum_steps: int, dtype: torch.dtype, seed: int):
    model = tiny_mlp(in_features=5, hidden=7, depth=2, seed=seed, dtype=dtype)
    inputs, targets = make_regression(6 * accum_steps, in_features=5, seed=seed, dtype=dtype)
    return model, inputs, targets, split_micro_batches(inputs, targets, 6)


def _largest_forward_batch(model: nn.Module) -> list[int]:
    sizes: list[int] = []
    model.register_forward_pre_hook(lambda _module, args: sizes.append(len(args[0])))
    return sizes


def _window_case(accum_steps: int, dtype: torch.dtype, tolerance: float, seed: int):
    def case(accumulate_window):
        model, inputs, targets, micro_batches = _window_problem(accum_steps, dtype, seed)
        expected = full_batch_gradient(model, nn.MSELoss(), inputs, targets)
        student_model = copy.deepcopy(model)
        forward_sizes = _largest_forward_batch(student_model)
        accumulate_window(student_model, nn.MSELoss(), micro_batches)
        if forward_sizes and max(forward_sizes) > len(micro_batches[0][0]):
            raise Failure(
                f"A forward pass ran on {max(forward_sizes)} samples at once, but a micro-batch "
                f"has {len(micro_batches[0][0])}. Accumulation runs one micro-batch at a time: "
                "that is what keeps the memory small.",
                "whole_batch_forward",
            )
        actual = flat_gradient(student_model.parameters())
        if actual is None:
            raise Failure(
                "No parameter has a gradient after your function: call backward() on each "
                "micro-batch's loss, and do not zero the gradients at the end.",
                "no_backward",
            )
        error = relative_error(actual, expected)
        if error <= tolerance:
            return
        _diagnose_window(actual, expected, model, micro_batches, accum_steps, error, dtype)

    return case


def _diagnose_window(actual, expected, model, micro_batches, accum_steps, error, dtype):
    first = full_batch_gradient(model, nn.MSELoss(), *micro_batches[0])
    last = full_batch_gradient(model, nn.MSELoss(), *micro_batches[-1])
    n = accum_steps
    candidates = [
        ("loss_not_divided", expected * n),
        ("zero_grad_inside_loop", last / n),
        ("zero_grad_inside_loop", last),
        ("first_micro_batch_only", first / n),
        ("first_micro_batch_only", first),
        ("divided_twice", expected / n),
    ]
    messages = {
        "loss_not_divided": (
            f"Your gradient is exactly {n} times the full-batch gradient "
            f"(accum_steps = {n}): " + MISTAKES["loss_not_divided"]
        ),
        "zero_grad_inside_loop": (
            "Your gradient is the last micro-batch's alone: something zeroes the gradients "
            "inside the loop, so earlier micro-batches are wiped. Let them add up."
        ),
        "first_micro_batch_only": (
            "Your gradient is the first micro-batch's alone: the loop stops (or returns) "
            "after one micro-batch. Run forward and backward on every micro-batch."
        ),
        "divided_twice": (
            f"Your gradient is {n} times too small: the loss was divided by accum_steps twice "
            "(or the gradients were divided again after backward)."
        ),
    }
    for name, pattern in candidates:
        if relative_error(actual, pattern) <= 1e-6:
            raise Failure(messages[name], name)
    k = scale_factor(actual, expected)
    if k is not None:
        raise Failure(
            f"Your gradient points the right way but is {k:.3g} times the full-batch "
            f"gradient: check what you divide the loss by (it should be {n}).",
            "wrong_scale",
        )
    tolerance = FLOAT64_TOLERANCE if dtype == torch.float64 else FLOAT32_TOLERANCE
    raise Failure(
        f"Your gradient differs from the full-batch gradient by {error:.2e} (relative), "
        f"more than the {dtype} tolerance of {tolerance:.0e}."
    )


@question("accumulate_window", MODULE, points=3)
def _accumulate_window_cases():
    return [
        _window_case(4, torch.float64, FLOAT64_TOLERANCE, seed=1),
        _window_case(3, torch.float64, FLOAT64_TOLERANCE, seed=2),
        _window_case(1, torch.float64, FLOAT64_TOLERANCE, seed=3),
        _window_case(4, torch.float32, FLOAT32_TOLERANCE, seed=4),
    ]


# ---------------------------------------------------------------- train_accumulated


class _Counter:
    """Counts optimizer.step() and zero_grad() calls (optimizer's or model's)."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer):
        self.steps = 0
        self.zero_grads = 0
        optimizer.register_step_pre_hook(self._count_step)
        for owner in (optimizer, model):
            original = owner.zero_grad

            def counted(*args, _original=original, **kwargs):
                self.zero_grads += 1
                return _original(*args, **kwargs)

            owner.zero_grad = counted

    def _count_step(self, *_args) -> None:
        self.steps += 1


def _fresh_run(seed: int, n_micro: int):
    model = tiny_mlp(in_features=5, hidden=7, depth=2, seed=seed, dtype=torch.float64)
    inputs, targets = make_regression(4 * n_micro, in_features=5, seed=seed, dtype=torch.float64)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    return model, optimizer, split_micro_batches(inputs, targets, 4)


def _parameters(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _variant_result(seed: int, n_micro: int, accum_steps: int, mistake: str | None):
    """Final weights, logged window losses and every micro-batch's loss of one variant."""
    model, optimizer, micro_batches = _fresh_run(seed, n_micro)
    micro_losses: list[float] = []
    logged = run_loop(
        model, optimizer, nn.MSELoss(), micro_batches, accum_steps, mistake, micro_losses
    )
    return _parameters(model), logged, micro_losses


def _loop_case(n_micro: int, accum_steps: int, seed: int):
    expected_steps = -(-n_micro // accum_steps)

    def case(train_accumulated):
        model, optimizer, micro_batches = _fresh_run(seed, n_micro)
        counter = _Counter(model, optimizer)
        logged = train_accumulated(model, optimizer, nn.MSELoss(), micro_batches, accum_steps)
        actual = _parameters(model)
        expected, expected_logged, micro_losses = _variant_result(seed, n_micro, accum_steps, None)
        setting = (
            f"({n_micro} micro-batches, accum_steps = {accum_steps}: "
            f"{expected_steps} optimizer steps expected)"
        )
        if relative_error(actual, expected) > FLOAT64_TOLERANCE:
            for mistake in MISTAKES:
                candidate, _, _ = _variant_result(seed, n_micro, accum_steps, mistake)
                if relative_error(actual, candidate) <= 1e-9:
                    raise Failure(f"{MISTAKES[mistake]} {setting}", mistake)
            raise Failure(
                f"The final weights differ from the reference loop's {setting}. You called "
                f"optimizer.step() {counter.steps} times and zero_grad() "
                f"{counter.zero_grads} times."
            )
        last_losses = [
            micro_losses[min(end, n_micro) - 1]
            for end in range(accum_steps, n_micro + accum_steps, accum_steps)
        ]
        _check_logged(logged, expected_logged, last_losses, accum_steps, setting)

    return case


def _check_logged(logged, expected, last_losses, accum_steps, setting):
    try:
        values = [float(v) for v in logged]
    except TypeError:
        raise Failure(
            "The weights are right, but return a list with one float per optimizer step: the "
            f"mean loss over that window's samples. Got {type(logged).__name__}.",
            "logged_loss_wrong",
        ) from None
    if len(values) != len(expected):
        raise Failure(
            f"The weights are right, but you returned {len(values)} losses: return one per "
            f"optimizer step {setting}.",
            "logged_loss_wrong",
        )
    actual = torch.tensor(values, dtype=torch.float64)
    wanted = torch.tensor(expected, dtype=torch.float64)
    if relative_error(actual, wanted) <= 1e-9:
        return
    k = scale_factor(actual, wanted)
    if k is not None and abs(k * accum_steps - 1) < 1e-6:
        raise Failure(
            f"The weights are right, but the logged loss is {accum_steps} times too small: "
            "you logged the loss after dividing it by accum_steps. Log the window's mean loss.",
            "logged_scaled_loss",
        )
    last = torch.tensor(last_losses, dtype=torch.float64)
    if relative_error(actual, last) <= 1e-9 or relative_error(actual * accum_steps, last) <= 1e-9:
        raise Failure(
            "The weights are right, but you logged only the last micro-batch's loss of each "
            "window. Log the mean over the whole window: add up loss / window size for each "
            "micro-batch.",
            "logged_last_micro_batch",
        )
    raise Failure(
        "The weights are right, but the returned losses are not each window's mean loss "
        f"(expected {[round(v, 4) for v in expected]}, got {[round(v, 4) for v in values]}).",
        "logged_loss_wrong",
    )


@question("train_accumulated", MODULE, points=4)
def _train_accumulated_cases():
    return [
        _loop_case(n_micro=8, accum_steps=4, seed=11),
        _loop_case(n_micro=10, accum_steps=4, seed=12),
        _loop_case(n_micro=5, accum_steps=1, seed=13),
        _loop_case(n_micro=3, accum_steps=5, seed=14),
    ]


# ---------------------------------------------------------------- plan_micro_batch


def _memory_problem():
    model = tiny_mlp(in_features=32, hidden=64, depth=3, seed=21)
    return model, lambda size: torch.zeros(size, 32)


def _plan_case(effective_batch_size: int, budget_of, label: str):
    """``budget_of(bytes_by_size)`` sets the budget from the measured bytes."""

    def case(plan_micro_batch):
        model, make_inputs = _memory_problem()
        sizes = [m for m in range(1, effective_batch_size + 1) if effective_batch_size % m == 0]
        measured = {m: activation_bytes(model, make_inputs(m)) for m in sizes}
        budget = budget_of(measured)
        fitting = [m for m in sizes if measured[m] <= budget]
        if not fitting:
            try:
                answer = plan_micro_batch(model, make_inputs, budget, effective_batch_size)
            except ValueError:
                return
            raise Failure(
                f"With a budget of {budget} bytes even a micro-batch of 1 needs "
                f"{measured[1]} bytes, so nothing fits; you returned {answer!r}. Raise "
                "ValueError with a message that says so.",
                "nothing_fits_not_raised",
            )
        best = max(fitting)
        answer = plan_micro_batch(model, make_inputs, budget, effective_batch_size)
        if not (isinstance(answer, tuple) and len(answer) == 2):
            raise Failure(f"Return a tuple (micro_batch_size, accum_steps); got {answer!r}.")
        micro, accum = (int(v) for v in answer)
        where = f"({label}: budget {budget} bytes, effective batch {effective_batch_size})"
        if micro * accum != effective_batch_size:
            raise Failure(
                f"micro_batch_size x accum_steps = {micro} x {accum} = {micro * accum}, but the "
                f"effective batch must be {effective_batch_size} {where}.",
                "effective_batch_wrong",
            )
        if micro not in measured:
            raise Failure(f"{micro} does not divide {effective_batch_size} {where}.")
        if measured[micro] > budget:
            raise Failure(
                f"A micro-batch of {micro} needs {measured[micro]} bytes of activations, over "
                f"the budget {where}. Only sizes whose measured bytes are <= the budget fit.",
                "does_not_fit",
            )
        if micro < best:
            hint = (
                " A size whose bytes equal the budget exactly still fits: use <=, not <."
                if measured[best] == budget
                else ""
            )
            raise Failure(
                f"A larger micro-batch also fits: {best} needs {measured[best]} bytes "
                f"{where}. The largest that fits means the fewest accumulation steps.{hint}",
                "not_largest",
            )

    return case


@question("plan_micro_batch", MODULE, points=3)
def _plan_micro_batch_cases():
    return [
        _plan_case(32, lambda m: (m[8] + m[16]) // 2, "a budget between 8 and 16 samples"),
        _plan_case(32, lambda m: m[16], "a budget exactly equal to 16 samples' bytes"),
        _plan_case(24, lambda m: 10 * m[24], "a budget where everything fits"),
        _plan_case(32, lambda m: m[1] - 1, "a budget where nothing fits"),
    ]
