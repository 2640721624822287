"""What a warm-up is for, on a task where it is needed: a small tanh network fitting a teacher.

Its loss is sharpest at the start, and gradual rises of the rate make SGD flatten it (Gilmer
et al. 2021, arXiv:2110.04369; Kalra and Barkeshli 2024, arXiv:2406.09405). With 8x the batch
at 8x the rate, the run without warm-up diverges within its first 40 steps on every seed the
benchmark tries, and a linear warm-up over half the samples trains, close to the base batch's
loss. The network runs in float32, on a CPU in seconds. (On the logistic task of
:mod:`coursekit.critical_batch.task` a warm-up does not help.)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from coursekit.arguments import real, whole
from coursekit.critical_batch.task import Task
from coursekit.critical_batch.training import LossCurve, loss_curve


def make_warmup_task(
    seed: int = 0,
    in_features: int = 8,
    hidden: int = 32,
    depth: int = 3,
    init_gain: float = 1.25,
    noise: float = 0.1,
    n_eval: int = 1024,
) -> Task:
    """Regression on a random one-hidden-layer tanh teacher, by a deeper tanh student.

    The student is ``depth`` Linear layers with Tanh between them, weights drawn with standard
    deviation ``init_gain / sqrt(fan_in)`` (between LeCun's 1 and PyTorch's tanh gain 5/3)
    and zero biases. Unlike the logistic task, its curvature depends on the path: the
    sharpness (the largest Hessian eigenvalue; defaults, seeds 0-4) is 8 to 11 at the start, so
    SGD's stability limit ``2 / sharpness`` is crossed at rates near 0.2, and a small rate
    leaves the network nearly as sharp (6 to 9), but a rate that grows slowly pushes it to
    flatter ground, down to about ``2 / lr`` (the benchmark measures this). Targets carry
    Gaussian noise of standard deviation ``noise``; ``evaluate`` is the expected squared
    error on a fixed set of inputs, ``floor_loss = noise**2``. Float32.

    Example:
        >>> task = make_warmup_task(seed=0)
        >>> task.floor_loss
        0.010000000000000002
    """
    seed, in_features = whole("seed", seed, minimum=None), whole("in_features", in_features)
    hidden, depth = whole("hidden", hidden), whole("depth", depth, minimum=2)
    init_gain = real("init_gain", init_gain, 0, low_open=True)
    noise, n_eval = real("noise", noise, 0), whole("n_eval", n_eval)
    generator = torch.Generator().manual_seed(seed)

    def layers(widths: Sequence[int], gain: float, g: torch.Generator) -> nn.Sequential:
        modules: list[nn.Module] = []
        for fan_in, fan_out in zip(widths[:-1], widths[1:], strict=True):
            linear = nn.Linear(fan_in, fan_out)
            with torch.no_grad():
                linear.weight.copy_(gain * torch.randn(fan_out, fan_in, generator=g) / fan_in**0.5)
                linear.bias.zero_()
            modules += [linear, nn.Tanh()]
        return nn.Sequential(*modules[:-1])  # no Tanh after the output layer

    teacher = layers([in_features, 16, 1], 1.0, generator).requires_grad_(False)
    eval_inputs = torch.randn(n_eval, in_features, generator=generator)
    eval_targets = teacher(eval_inputs)

    def sample(step: int, batch_size: int, stream: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(hash((seed, stream, step, batch_size)) % 2**62)
        inputs = torch.randn(batch_size, in_features, generator=g)
        return inputs, teacher(inputs) + noise * torch.randn(batch_size, 1, generator=g)

    def evaluate(model: nn.Module) -> float:
        with torch.no_grad():  # the squared error to the noisy targets, averaged over the noise
            error = nn.functional.mse_loss(model(eval_inputs), eval_targets).item()
        return error + noise**2

    def make_model() -> nn.Module:
        g = torch.Generator().manual_seed(seed + 1000)
        return layers([in_features] + [hidden] * (depth - 1) + [1], init_gain, g)

    return Task(
        make_model=make_model,
        loss_fn=nn.functional.mse_loss,
        sample=sample,
        evaluate=evaluate,
        floor_loss=noise**2,
        initial_loss=evaluate(make_model()),
    )


def diverged(curve: LossCurve, factor: float = 10.0) -> bool:
    """Whether a run blew up: its last loss is not finite (training stopped there) or is
    above ``factor`` times its first. A run that spikes and recovers has not diverged."""
    factor = real("factor", factor, 1)
    last = curve.losses[-1]
    return not math.isfinite(last) or last > factor * curve.losses[0]


def warmup_runs(
    seed: int = 0,
    base_batch: int = 16,
    new_batch: int = 128,
    base_lr: float = 0.06,
    samples: int = 16384,
    warmup_samples: int = 8192,
    task: Task | None = None,
) -> dict[str, LossCurve]:
    """What breaks without warm-up at a large batch: four SGD runs, loss against samples seen.

    The base batch at ``base_lr``, and ``k = new_batch / base_batch`` times the batch at
    ``k * base_lr`` (Goyal et al.'s linear rule), each with and without a linear warm-up
    over the first ``warmup_samples`` samples (the same samples, so ``k`` times fewer steps
    at the large batch). On :func:`make_warmup_task` (the default ``task``, from ``seed``)
    the scaled rate is above what the sharp start allows and below what the flatter
    trained network allows: without warm-up the large batch diverges in its first steps
    (check with :func:`diverged`; the curve ends where the loss stopped being finite),
    while under the warm-up each rise of the rate flattens the network enough for the
    next, so it arrives at the full rate on ground flat enough for it (Gilmer et al. 2021,
    arXiv:2110.04369; Kalra and Barkeshli 2024, arXiv:2406.09405). At the base batch the
    warm-up costs a little and saves nothing: its rate was stable from the start.
    """
    base_batch, new_batch = whole("base_batch", base_batch), whole("new_batch", new_batch)
    if new_batch <= base_batch:
        raise ValueError(
            f"new_batch ({new_batch}) must be larger than base_batch ({base_batch}): the runs "
            "show what a bigger batch with a linearly scaled learning rate needs."
        )
    base_lr = real("base_lr", base_lr, 0, low_open=True)
    samples, warmup_samples = whole("samples", samples), whole("warmup_samples", warmup_samples)
    if not new_batch <= warmup_samples <= samples:
        raise ValueError(
            f"warmup_samples ({warmup_samples}) must lie between new_batch ({new_batch}) and "
            f"samples ({samples}): the warm-up needs at least one large-batch step and must "
            "end within the run."
        )
    task = make_warmup_task(seed) if task is None else task
    k = new_batch / base_batch
    runs = {}
    for batch, lr in ((base_batch, base_lr), (new_batch, k * base_lr)):
        runs[f"B={batch}, lr={lr:g}, no warm-up"] = loss_curve(task, batch, lr, samples)
        runs[f"B={batch}, lr={lr:g}, warm-up {warmup_samples} samples"] = loss_curve(
            task, batch, lr, samples, warmup_steps=warmup_samples // batch
        )
    return runs
