"""Module 6's numbers: the batch-size sweep, the fitted critical batch, the noise scale.

Run: .venv/bin/python benchmarks/critical_batch.py
For three task seeds: each batch size's best learning rate, steps S and samples E to the
target; the fitted S_min, E_min and B_crit = E_min / S_min; and the simple noise scale
B_simple = tr(Sigma) / |G|^2 of the task at the start and near the target, from per-sample
gradients (torch.func). Then the learning-rate scaling runs and the linear-scaling sweep.
Last, the warm-up runs on the tanh-network task for five seeds (final loss, or where the run
diverged), and the sharpness along a small-rate run and along the large batch's warm-up.
"""

from __future__ import annotations

import torch
from torch.func import functional_call, grad, vmap

from coursekit.critical_batch import (
    _lr_at,
    batch_size_sweep,
    diverged,
    fit_hyperbola,
    linear_scaling_sweep,
    lr_scaling_runs,
    make_task,
    make_warmup_task,
    steps_to_target,
    warmup_runs,
)

BATCH_SIZES = [8, 16, 32, 64, 128, 256, 512, 1024, 2048]
LRS = [0.5, 1, 2, 4, 8, 16]
EXCESS = 0.01  # target: the teacher's loss plus this


def b_simple(task, model, n_samples: int = 65536) -> float:
    """tr(Sigma) / |G|^2 from per-sample gradients of one large fresh batch."""
    inputs, targets = task.sample(10**6, n_samples, stream=99)
    params = {name: p.detach() for name, p in model.named_parameters()}

    def loss_of(parameters, x, y):
        return task.loss_fn(functional_call(model, parameters, (x.unsqueeze(0),)), y.unsqueeze(0))

    per_sample = vmap(grad(loss_of), in_dims=(None, 0, 0))(params, inputs, targets)
    flat = torch.cat([g.reshape(n_samples, -1) for g in per_sample.values()], dim=1)
    mean = flat.mean(0)
    trace = flat.var(0, unbiased=True).sum()
    return (trace / (mean.pow(2).sum() - trace / n_samples)).item()  # unbiased |G|^2


def model_near_target(task, target):
    """The model of a large-batch run stopped at the target (for the noise scale there)."""
    model = task.make_model()
    opt = torch.optim.SGD(model.parameters(), lr=4.0)
    for step in range(2000):
        if task.evaluate(model) <= target:
            break
        x, y = task.sample(step, 2048, stream=7)
        opt.zero_grad()
        task.loss_fn(model(x), y).backward()
        opt.step()
    return model


def sharpness(task, model, iterations: int = 30) -> float:
    """The loss's largest Hessian eigenvalue on one fresh batch, by power iteration."""
    inputs, targets = task.sample(10**6, 4096, stream=99)
    params = list(model.parameters())
    grads = torch.autograd.grad(task.loss_fn(model(inputs), targets), params, create_graph=True)
    vector, value = [torch.randn_like(p) for p in params], 0.0
    for _ in range(iterations):
        norm = torch.sqrt(sum((v * v).sum() for v in vector))
        vector = [v / norm for v in vector]
        product = torch.autograd.grad(grads, params, grad_outputs=vector, retain_graph=True)
        value = sum((h * v).sum() for h, v in zip(product, vector, strict=True)).item()
        vector = [h.detach() for h in product]
    return value


def sharpness_along(task, batch_size, lr, steps, warmup_steps, at):
    """SGD on the task; the sharpness before the first step and after each step in ``at``."""
    model = task.make_model()
    found = [sharpness(task, model)]
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = _lr_at(step, lr, warmup_steps)
        inputs, targets = task.sample(step, batch_size)
        opt.zero_grad()
        task.loss_fn(model(inputs), targets).backward()
        opt.step()
        if step + 1 in at:
            found.append(sharpness(task, model))
    return found


def main() -> None:
    for seed in (0, 1, 2):
        task = make_task(seed=seed)
        target = task.floor_loss + EXCESS
        print(f"seed {seed}: floor {task.floor_loss:.4f}, target {target:.4f}")
        sweep = batch_size_sweep(task, BATCH_SIZES, LRS, target, progress=False)
        print("      B     lr      S        E")
        for p in sweep:
            print(f"  {p.batch_size:5d} {p.lr:6g} {p.steps!s:>6} {p.samples!s:>8}")
        fit = fit_hyperbola([p.steps for p in sweep], [p.samples for p in sweep])
        print(
            f"  fit: S_min {fit.min_steps:.1f}, E_min {fit.min_samples:.0f}, "
            f"B_crit {fit.critical_batch:.0f}, rms log error {fit.rms_log_error:.2f}"
        )
        start, near = task.make_model(), model_near_target(task, target)
        print(
            f"  B_simple at the start {b_simple(task, start):.1f}, near the target "
            f"{b_simple(task, near):.1f}"
        )
    task = make_task(seed=0)
    target = task.floor_loss + EXCESS
    print("learning-rate scaling runs (seed 0): loss at 512, 1024, 4096 samples; samples to target")
    for label, curve in lr_scaling_runs(task).items():
        at = dict(zip(curve.samples, curve.losses, strict=True))
        first = next((s for s, loss in at.items() if loss <= target), None)
        print(
            f"  {label:50s} {at.get(512, float('nan')):.4f} {at.get(1024, float('nan')):.4f} "
            f"{curve.losses[-1]:.4f}  {first}"
        )
    for lr in (8.0, 16.0):
        for warmup in (0, 8):
            steps = [
                steps_to_target(task, 128, lr, target, warmup_steps=warmup, stream=s)
                for s in range(5)
            ]
            print(f"  B=128 lr {lr:g} warm-up {warmup}: steps to target over 5 streams {steps}")
    print("linear scaling from B=16, lr=1 (samples to target):")
    for p in linear_scaling_sweep(task, 16, 1.0, BATCH_SIZES[1:], target, progress=False):
        print(f"  B {p.batch_size:5d}  lr {p.lr:6g}  S {p.steps!s:>5}  E {p.samples}")

    warmup_report()


def warmup_report() -> None:
    """Module 6's warm-up numbers: what breaks without warm-up, and the sharpness behind it."""
    print("warm-up runs (tanh network; 8x the batch at 8x the rate): loss after 16384 samples")
    for seed in range(5):
        runs = warmup_runs(seed)
        cells = [
            f"diverged at {run.samples[-1]}" if diverged(run) else f"{run.losses[-1]:.4f}"
            for run in runs.values()
        ]
        print(f"  seed {seed}, initial {runs[next(iter(runs))].losses[0]:.3f}:")
        for label, cell in zip(runs, cells, strict=True):
            print(f"    {label:40s} {cell}")
    print("sharpness (2 / lr: 33.3 at lr 0.06, 4.17 at lr 0.48)")
    for seed in range(3):
        task = make_warmup_task(seed)
        small = sharpness_along(task, 16, 0.06, 1024, 0, {64, 256, 1024})
        warm = sharpness_along(task, 128, 0.48, 128, 64, {16, 32, 64, 128})
        small, warm = [round(v, 2) for v in small], [round(v, 2) for v in warm]
        print(f"  seed {seed}: B=16 lr 0.06 after 0/1k/4k/16k samples {small}")
        print(f"          B=128 warm-up to 0.48 after 0/2k/4k/8k/16k samples {warm}")


if __name__ == "__main__":
    main()
