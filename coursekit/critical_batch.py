"""How big should the effective batch be? Steps against samples, and the critical batch.

Training to a fixed target loss at batch ``B`` takes ``S`` optimizer steps and ``E = B * S``
samples. McCandlish et al. (2018, arXiv:1812.06162) found that, with the learning rate tuned
for each batch size, the pairs follow ``(S / S_min - 1) (E / E_min - 1) = 1``: small batches
are noise-limited (doubling ``B`` halves ``S``, ``E`` stays put), large ones are
curvature-limited (doubling ``B`` leaves ``S`` near ``S_min`` and doubles ``E``). The turn,
the critical batch ``B_crit = E_min / S_min``, is where accumulating a bigger batch stops
saving steps and starts wasting samples.

The toy task here is logistic regression on a teacher's noisy labels: the labels' own noise
makes the gradient noisy however good the model is (so small batches are noise-limited
near the target), and an ill-conditioned input covariance keeps large batches from
converging in a few steps (so they are curvature-limited). Its curvature is largest at the
start, where every prediction is 0.5, but it shrinks only modestly by the target, so a
warm-up (Goyal et al. 2017, arXiv:1706.02677) does not help there: at the linearly scaled
rate, the large batch without warm-up does as well or better.

What a warm-up is for shows on a second task, a small tanh network fitting a teacher
(:func:`make_warmup_task`, :func:`warmup_runs`). Its loss is sharpest at the start, and
gradual rises of the rate make SGD flatten it (Gilmer et al. 2021, arXiv:2110.04369;
Kalra and Barkeshli 2024, arXiv:2406.09405). With 8x the batch at 8x the rate, the run
without warm-up diverges within its first 40 steps on every seed the benchmark tries,
and a linear warm-up over half the samples trains, close to the base batch's loss. The
logistic task runs in float64, the network in float32, each on a CPU in seconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn

from coursekit.arguments import choice, real, whole
from coursekit.progress import Progress

OPTIMIZERS = ("sgd", "adam")


@dataclass(frozen=True)
class Task:
    """A training problem with a fresh i.i.d. batch at every step and an exact-enough loss.

    ``sample(step, batch_size)`` is deterministic in ``(step, batch_size)``: two runs that ask
    for the same step's batch get the same samples, so accumulating micro-batches of it and
    taking it whole give the same step. ``evaluate(model)`` is the expected loss over the
    teacher's label noise on a fixed set of inputs (no label sampling noise in the curve).
    ``floor_loss`` is the teacher's own loss there: the best any model can do.
    """

    make_model: Callable[[], nn.Module]
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    sample: Callable[..., tuple[torch.Tensor, torch.Tensor]]
    evaluate: Callable[[nn.Module], float]
    floor_loss: float
    initial_loss: float


def make_task(
    seed: int = 0,
    in_features: int = 16,
    teacher_norm: float = 4.0,
    condition: float = 100.0,
    n_eval: int = 2048,
) -> Task:
    """Logistic regression on labels drawn from a teacher ``p(y=1|x) = sigmoid(w* . x)``.

    Inputs are Gaussian with variances spread evenly on a log scale from 1 down to
    ``1 / condition`` (an ill-conditioned Hessian, as real ones are); ``teacher_norm`` sets
    how confident the teacher is (larger: less label noise). The student is a
    ``nn.Linear(in_features, 1)`` starting at zero, so the initial loss is ``log 2``.

    Example:
        >>> task = make_task(seed=0)
        >>> round(task.initial_loss, 4)
        0.6931
    """
    seed, in_features = whole("seed", seed, minimum=None), whole("in_features", in_features)
    teacher_norm = real("teacher_norm", teacher_norm, 0, low_open=True)
    condition = real("condition", condition, 1)
    n_eval = whole("n_eval", n_eval)
    dtype = torch.float64
    generator = torch.Generator().manual_seed(seed)
    scales = condition ** (-0.5 * torch.linspace(0, 1, in_features, dtype=dtype))
    teacher = torch.randn(in_features, generator=generator, dtype=dtype)
    teacher = teacher_norm * teacher / teacher.norm()
    eval_inputs = torch.randn(n_eval, in_features, generator=generator, dtype=dtype) * scales
    eval_probs = torch.sigmoid(eval_inputs @ teacher)

    def sample(step: int, batch_size: int, stream: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(hash((seed, stream, step, batch_size)) % 2**62)
        inputs = torch.randn(batch_size, in_features, generator=g, dtype=dtype) * scales
        labels = torch.bernoulli(torch.sigmoid(inputs @ teacher).unsqueeze(1), generator=g)
        return inputs, labels

    def expected_loss(logits: torch.Tensor) -> float:
        # cross-entropy against the teacher's probabilities: the label-noise average, exactly
        return nn.functional.binary_cross_entropy_with_logits(logits, eval_probs).item()

    def evaluate(model: nn.Module) -> float:
        with torch.no_grad():
            return expected_loss(model(eval_inputs).squeeze(1))

    def make_model() -> nn.Module:
        model = nn.Linear(in_features, 1).to(dtype)
        nn.init.zeros_(model.weight)
        nn.init.zeros_(model.bias)
        return model

    return Task(
        make_model=make_model,
        loss_fn=nn.functional.binary_cross_entropy_with_logits,
        sample=sample,
        evaluate=evaluate,
        floor_loss=expected_loss(eval_inputs @ teacher),
        initial_loss=math.log(2.0),
    )


def _lr_at(step: int, lr: float, warmup_steps: int) -> float:
    """Linear warm-up from ``lr / warmup_steps`` to ``lr`` over ``warmup_steps`` steps."""
    return lr if step >= warmup_steps else lr * (step + 1) / warmup_steps


def _optimizer(name: str, model: nn.Module, lr: float) -> torch.optim.Optimizer:
    if name == "adam":
        return torch.optim.Adam(model.parameters(), lr=lr)
    return torch.optim.SGD(model.parameters(), lr=lr)


def _train(
    task: Task,
    batch_size: int,
    lr: float,
    max_steps: int,
    target_loss: float | None = None,
    micro_batch_size: int | None = None,
    warmup_steps: int = 0,
    optimizer: str = "sgd",
    stream: int = 0,
) -> list[float]:
    """The loss after 0, 1, ... steps; stops at ``target_loss``, at ``max_steps``, or when the
    loss stops being finite. A step larger than ``micro_batch_size`` is accumulated."""
    batch_size, max_steps = whole("batch_size", batch_size), whole("max_steps", max_steps)
    lr = real("lr", lr, 0, low_open=True)
    micro = batch_size if micro_batch_size is None else whole("micro_batch_size", micro_batch_size)
    warmup_steps = whole("warmup_steps", warmup_steps, minimum=0)
    optimizer = choice("optimizer", optimizer, OPTIMIZERS)
    model = task.make_model()
    opt = _optimizer(optimizer, model, lr)
    losses = [task.evaluate(model)]
    for step in range(max_steps):
        if target_loss is not None and losses[-1] <= target_loss:
            break
        for group in opt.param_groups:
            group["lr"] = _lr_at(step, lr, warmup_steps)
        inputs, targets = task.sample(step, batch_size, stream)
        opt.zero_grad(set_to_none=True)
        for start in range(0, batch_size, micro):
            x, y = inputs[start : start + micro], targets[start : start + micro]
            # each micro-batch's mean loss weighted by its share: the sum is the batch's mean
            (task.loss_fn(model(x), y) * (len(x) / batch_size)).backward()
        opt.step()
        losses.append(task.evaluate(model))
        if not math.isfinite(losses[-1]):
            break
    return losses


def steps_to_target(
    task: Task,
    batch_size: int,
    lr: float,
    target_loss: float,
    micro_batch_size: int | None = None,
    max_steps: int = 4000,
    warmup_steps: int = 0,
    optimizer: str = "sgd",
    stream: int = 0,
) -> int | None:
    """Optimizer steps until ``task.evaluate`` reaches ``target_loss``; ``None`` if it does not
    within ``max_steps`` (or the run diverges).

    A ``batch_size`` above ``micro_batch_size`` (default: the batch itself) is reached by
    accumulation: the step's batch is cut into micro-batches, each loss divided by its share,
    one optimizer step. The step count does not depend on the cut, which is the course's
    point: any effective batch fits in the memory of one micro-batch. ``stream`` picks
    another sequence of batches, for repeats.

    Example:
        >>> task = make_task()
        >>> steps_to_target(task, 256, 2.0, task.floor_loss + 0.05, micro_batch_size=64)
        6
    """
    target_loss = real("target_loss", target_loss)
    losses = _train(
        task,
        batch_size,
        lr,
        max_steps,
        target_loss,
        micro_batch_size,
        warmup_steps,
        optimizer,
        stream,
    )
    return len(losses) - 1 if losses[-1] <= target_loss else None


class SweepPoint(NamedTuple):
    """One batch size's result: its best learning rate, steps ``S`` and samples ``E = B * S``
    to the target (``None`` when no learning rate of the grid reached it)."""

    batch_size: int
    lr: float
    steps: int | None
    samples: int | None


def batch_size_sweep(
    task: Task,
    batch_sizes: Sequence[int],
    lrs: Sequence[float],
    target_loss: float,
    max_steps: int = 2000,
    progress: bool = True,
) -> list[SweepPoint]:
    """For each batch size, the learning rate of ``lrs`` that reaches ``target_loss`` in the
    fewest steps, as McCandlish et al. tune it for each batch size (with one learning rate
    for all, large batches would look worse than they are, and small ones might not converge).

    Every rate of the grid is tried; a run stops once it has taken as many steps as the best
    so far, since it can no longer win. Rates are tried nearest first to the previous batch
    size's best, so the best is usually found early and the other runs are cut short. Each
    count is one run on one sample stream: at small batches, where the loss fluctuates near
    the target, it carries some luck, and taking the best of a grid picks the lucky ones.

    Example:
        >>> task = make_task()
        >>> sweep = batch_size_sweep(task, [64, 1024], [1, 4, 16], task.floor_loss + 0.01,
        ...                          progress=False)
        >>> [(p.batch_size, p.lr) for p in sweep]
        [(64, 4), (1024, 4)]
    """
    if not lrs:
        raise ValueError("lrs is empty: give at least one learning rate to try.")
    target_loss = real("target_loss", target_loss)
    sizes = [whole("batch_size", b) for b in batch_sizes]
    points, previous = [], float(sorted(lrs)[len(lrs) // 2])
    with Progress(len(sizes), "batch-size sweep", enabled=progress) as bar:
        for batch_size in sizes:
            best_lr, best_steps = None, None
            for lr in sorted(lrs, key=lambda rate: abs(math.log(rate / previous))):
                cap = max_steps if best_steps is None else best_steps - 1
                steps = steps_to_target(task, batch_size, lr, target_loss, max_steps=cap)
                if steps is not None:
                    best_lr, best_steps = lr, steps
            previous = previous if best_lr is None else best_lr
            samples = None if best_steps is None else batch_size * best_steps
            points.append(SweepPoint(batch_size, best_lr, best_steps, samples))
            bar.step(f"B={batch_size}: {best_steps} steps")
    return points


class HyperbolaFit(NamedTuple):
    """``S = min_steps * (1 + critical_batch / B)``, the same as
    ``(S / S_min - 1)(E / E_min - 1) = 1`` with ``E_min = min_samples``.

    ``rms_log_error`` is the root-mean-square of ``ln(S_fit / S)`` over the points: 0.1
    means the fit misses a typical point by about 10%.
    """

    min_steps: float
    min_samples: float
    critical_batch: float
    rms_log_error: float

    def steps(self, batch_size: float) -> float:
        """Steps to the target at ``batch_size`` on the fitted curve."""
        return self.min_steps * (1 + self.critical_batch / batch_size)

    def samples(self, batch_size: float) -> float:
        """Samples to the target at ``batch_size`` on the fitted curve."""
        return self.min_samples * (1 + batch_size / self.critical_batch)


def fit_hyperbola(steps: Sequence[float], samples: Sequence[float]) -> HyperbolaFit:
    """Fit McCandlish et al.'s ``S = S_min + E_min / B`` to measured steps and samples.

    The model is linear in ``S_min`` and ``E_min`` against ``1 / B`` (with ``B = E / S``),
    the paper's own form. It is fitted by least squares on relative errors (each point
    weighted by ``1 / S**2``): step counts span orders of magnitude, and plain least
    squares would let the small-batch points, with thousands of steps, decide alone and
    ignore the flat end where ``S_min`` shows. ``critical_batch = E_min / S_min``.

    Example:
        >>> fit = fit_hyperbola([110, 20, 11], [1100, 2000, 11000])
        >>> round(fit.min_steps), round(fit.min_samples), round(fit.critical_batch)
        (10, 1000, 100)
    """
    if len(steps) != len(samples):
        raise ValueError(f"steps and samples differ in length ({len(steps)} vs {len(samples)}).")
    if len(steps) < 3:
        raise ValueError(
            f"fit_hyperbola needs at least 3 (steps, samples) points, got {len(steps)}: "
            "two unknowns and a residual to judge the fit by."
        )
    s = torch.tensor([real("steps", v, 0, low_open=True) for v in steps], dtype=torch.float64)
    e = torch.tensor([real("samples", v, 0, low_open=True) for v in samples], dtype=torch.float64)
    design = torch.stack([torch.ones_like(s), s / e], dim=1) / s.unsqueeze(1)  # [1, 1/B] / S
    solution = torch.linalg.lstsq(design, torch.ones_like(s).unsqueeze(1)).solution.squeeze(1)
    min_steps, min_samples = solution.tolist()
    if min_steps <= 0 or min_samples <= 0:
        raise ValueError(
            f"the points do not bend like the hyperbola (S_min = {min_steps:.3g}, E_min = "
            f"{min_samples:.3g}): include batch sizes on both sides of the critical batch."
        )
    fitted = min_steps + min_samples * s / e
    rms = torch.log(fitted / s).pow(2).mean().sqrt().item()
    return HyperbolaFit(min_steps, min_samples, min_samples / min_steps, rms)


class LossCurve(NamedTuple):
    """A run's loss after each step, against the samples it has seen by then."""

    samples: list[int]
    losses: list[float]
    batch_size: int
    lr: float
    warmup_steps: int
    optimizer: str


def loss_curve(
    task: Task,
    batch_size: int,
    lr: float,
    samples: int,
    warmup_steps: int = 0,
    optimizer: str = "sgd",
) -> LossCurve:
    """Train on ``samples`` samples (``samples // batch_size`` steps) and keep every loss."""
    steps = whole("samples", samples) // whole("batch_size", batch_size)
    losses = _train(task, batch_size, lr, steps, warmup_steps=warmup_steps, optimizer=optimizer)
    seen = [batch_size * step for step in range(len(losses))]
    return LossCurve(seen, losses, batch_size, lr, warmup_steps, optimizer)


def lr_scaling_runs(
    task: Task,
    base_batch: int = 16,
    new_batch: int = 128,
    base_lr: float = 1.0,
    samples: int = 4096,
    warmup_steps: int = 8,
    adam_base_lr: float = 0.05,
) -> dict[str, LossCurve]:
    """The learning-rate scaling rules side by side, each run's loss against samples seen.

    With the batch ``k = new_batch / base_batch`` times larger, SGD runs: the base batch at
    ``base_lr``; the large batch at the same rate (each step as careful as before, so ``k``
    times the samples for the same progress); at ``k * base_lr`` straight away (Goyal et
    al.'s linear rule without warm-up); and at ``k * base_lr`` reached by a linear warm-up
    over ``warmup_steps`` steps (their fix). Adam runs the large batch at ``k`` and ``sqrt(k)``
    times ``adam_base_lr`` (Malladi et al. 2022, arXiv:2205.10287: square-root scaling for
    adaptive optimizers), against the base batch at ``adam_base_lr``.
    """
    base_batch, new_batch = whole("base_batch", base_batch), whole("new_batch", new_batch)
    if new_batch <= base_batch:
        raise ValueError(
            f"new_batch ({new_batch}) must be larger than base_batch ({base_batch}): the runs "
            "compare scaling rules for a bigger batch."
        )
    k = new_batch / base_batch
    runs = {
        f"SGD B={base_batch}, lr={base_lr:g}": (base_batch, base_lr, 0, "sgd"),
        f"SGD B={new_batch}, same lr": (new_batch, base_lr, 0, "sgd"),
        f"SGD B={new_batch}, linear lr={k * base_lr:g}, no warm-up": (
            new_batch,
            k * base_lr,
            0,
            "sgd",
        ),
        f"SGD B={new_batch}, linear lr={k * base_lr:g}, warm-up {warmup_steps} steps": (
            new_batch,
            k * base_lr,
            warmup_steps,
            "sgd",
        ),
        f"Adam B={base_batch}, lr={adam_base_lr:g}": (base_batch, adam_base_lr, 0, "adam"),
        f"Adam B={new_batch}, linear lr={k * adam_base_lr:g}": (
            new_batch,
            k * adam_base_lr,
            0,
            "adam",
        ),
        f"Adam B={new_batch}, sqrt lr={math.sqrt(k) * adam_base_lr:.3g} (lr only)": (
            new_batch,
            math.sqrt(k) * adam_base_lr,
            0,
            "adam",
        ),
    }
    return {
        label: loss_curve(task, batch, lr, samples, warmup, optimizer)
        for label, (batch, lr, warmup, optimizer) in runs.items()
    }


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


def linear_scaling_sweep(
    task: Task,
    base_batch: int,
    base_lr: float,
    batch_sizes: Sequence[int],
    target_loss: float,
    warmup_steps: int = 0,
    max_steps: int = 2000,
    progress: bool = True,
) -> list[SweepPoint]:
    """Steps and samples to ``target_loss`` when the learning rate follows the linear rule,
    ``lr = base_lr * B / base_batch``, from one rate tuned at ``base_batch``.

    Below the critical batch the samples stay about constant (the rule works); past it they
    grow: the rate the rule asks for is more than the curvature allows, and no rate could
    save the steps anyway, since ``S`` cannot fall below ``S_min``.
    """
    points = []
    with Progress(len(batch_sizes), "linear-scaling sweep", enabled=progress) as bar:
        for batch_size in batch_sizes:
            lr = base_lr * batch_size / base_batch
            steps = steps_to_target(
                task, batch_size, lr, target_loss, max_steps=max_steps, warmup_steps=warmup_steps
            )
            samples = None if steps is None else batch_size * steps
            points.append(SweepPoint(batch_size, lr, steps, samples))
            bar.step(f"B={batch_size}: {steps} steps")
    return points


class Advice(NamedTuple):
    """What :func:`should_accumulate` recommends, with the numbers behind it.

    ``action`` is ``"as is"`` (one pass of micro-batches is the whole batch),
    ``"accumulate"`` or ``"add devices"``; ``step_time_s`` is the time of one optimizer step
    from the measured throughput (compute only: communication and the optimizer come on
    top); ``relative_steps`` is ``S / S_min = 1 + B_crit / B`` on the paper's hyperbola.
    """

    action: str
    effective_batch: int
    micro_batch_size: int
    accum_steps: int
    devices: int
    step_time_s: float
    relative_steps: float
    reasons: tuple[str, ...]


def should_accumulate(
    memory_micro_batch: int,
    throughput: dict[int, float],
    critical_batch: float,
    target_batch: int,
    devices: int = 1,
    more_devices_available: int = 0,
) -> Advice:
    """Whether to reach ``target_batch`` by accumulation, and when that buys nothing.

    Args:
        memory_micro_batch: the largest micro-batch that fits in one device's memory.
        throughput: measured samples per second by micro-batch size
            (:func:`measure_throughput`); the largest measured size that fits is used.
        critical_batch: ``B_crit``, from a sweep's :func:`fit_hyperbola` or a noise scale.
        target_batch: the effective batch someone wants.
        devices: data-parallel devices in use; ``more_devices_available``: how many more
            could be added.

    A batch past ``B_crit`` is cut back to it (or to one pass of micro-batches, if that is
    already past it): more samples per step would no longer save steps. Accumulation does
    not make a step faster, it makes it ``accum_steps`` times longer; more devices split a
    step's work, so when they are free they beat accumulation.

    Example:
        >>> should_accumulate(32, {32: 1000.0}, critical_batch=512, target_batch=256).accum_steps
        8
    """
    memory_micro_batch = whole("memory_micro_batch", memory_micro_batch)
    target_batch, devices = whole("target_batch", target_batch), whole("devices", devices)
    more = whole("more_devices_available", more_devices_available, minimum=0)
    critical_batch = real("critical_batch", critical_batch, 0, low_open=True)
    fitting = [size for size in throughput if size <= memory_micro_batch]
    if not fitting:
        raise ValueError(
            f"throughput has no micro-batch size that fits in memory ({memory_micro_batch}); "
            f"measure at least one size up to it (measured: {sorted(throughput)})."
        )
    micro = max(fitting)
    samples_per_s = real("throughput", throughput[micro], 0, low_open=True)
    seconds_per_micro = micro / samples_per_s
    reasons = []
    batch = target_batch
    one_pass = micro * devices
    if target_batch > critical_batch:
        batch = max(math.ceil(critical_batch), min(one_pass, target_batch))
        reasons.append(
            f"The target batch {target_batch} is past the critical batch {critical_batch:.0f}: "
            f"steps to the target would fall only from {1 + critical_batch / batch:.2f} to "
            f"{1 + critical_batch / target_batch:.2f} x S_min, for "
            f"{target_batch / batch:.1f}x the samples per step. Use {batch} instead."
        )
        if one_pass >= critical_batch:
            reasons.append(
                f"One pass of micro-batches ({micro} x {devices} devices = {one_pass}) is already "
                "at or past the critical batch: accumulating more buys no steps."
            )
    accum = math.ceil(batch / one_pass)
    if accum == 1:
        micro = min(micro, math.ceil(batch / devices))
        action = "as is"
        reasons.append(f"A batch of {batch} fits in one pass: no accumulation needed.")
    else:
        action = "accumulate"
        reasons.append(
            f"{batch} samples do not fit in one pass of {one_pass}: accumulate "
            f"{accum} micro-batches of {micro} (effective batch {micro * accum * devices})."
        )
    if accum > 1 and more > 0:
        wider = devices + more
        wider_accum = math.ceil(batch / (micro * wider))
        reasons.append(
            f"Accumulation does not speed up a step: on {devices} device(s) it takes {accum} x "
            f"{seconds_per_micro * 1e3:.1f} ms, on {wider} devices {wider_accum} x "
            f"{seconds_per_micro * 1e3:.1f} ms. Add the free devices first."
        )
        action, devices, accum = "add devices", wider, wider_accum
        if accum == 1:
            micro = min(micro, math.ceil(batch / devices))
    effective = micro * accum * devices
    return Advice(
        action,
        effective,
        micro,
        accum,
        devices,
        accum * micro / throughput.get(micro, samples_per_s),
        1 + critical_batch / effective,
        tuple(reasons),
    )


def measure_throughput(
    model: nn.Module,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    make_batch: Callable[[int], tuple[torch.Tensor, torch.Tensor]],
    sizes: Sequence[int],
    repeats: int = 5,
) -> dict[int, float]:
    """Samples per second of one forward and backward pass, by micro-batch size.

    Each size is timed ``repeats`` times after one untimed warm-up pass, and the best is
    kept: the slower repeats measure whatever else the machine was doing. On a GPU (the
    model and ``make_batch``'s tensors on it) the clock waits for the queued kernels.
    """
    import time

    repeats = whole("repeats", repeats)
    result = {}
    for size in sizes:
        inputs, targets = make_batch(whole("size", size))
        times = []
        for _ in range(repeats + 1):
            model.zero_grad(set_to_none=True)
            _synchronize(inputs.device)
            start = time.perf_counter()
            loss_fn(model(inputs), targets).backward()
            _synchronize(inputs.device)
            times.append(time.perf_counter() - start)
        result[size] = size / min(times[1:])
    model.zero_grad(set_to_none=True)
    return result


def _synchronize(device: torch.device) -> None:
    """Wait for ``device``'s queued work: CUDA kernels run asynchronously, so without this a
    clock around ``backward()`` would time only their launch."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
