"""How well does the two-batch estimator find the noise scale? Against per-sample truth.

For 3 seeds: a 2-layer MLP on 512 regression samples (float64). The truth is
``true_noise_scale`` over all 512 per-sample gradients. Then 4000 accumulation windows of
k = 4 micro-batches of b = 8 samples, drawn with replacement: each gives one two-batch
estimate (computed from the per-sample gradients of its samples, which equals the
accumulated one, as tests/test_noise_scale.py checks). Printed: the estimates' mean and
spread, the average of per-window ratios (biased), the ratio of the averages, a
NoiseScaleMeter (decay 0.99) fed the same windows, and a meter fed 200 windows measured by
real accumulation (``estimate_from_micro_batches``). Takes well under a minute on a CPU.

    .venv/bin/python benchmarks/noise_scale.py
"""

from __future__ import annotations

import math
import statistics
import time

import torch
from torch import nn

from coursekit.data import make_regression
from coursekit.models import tiny_mlp
from coursekit.noise_scale import (
    NoiseScaleMeter,
    estimate_from_micro_batches,
    per_sample_gradients,
    true_noise_scale,
    two_batch_estimate,
)

SAMPLES, K, B = 512, 4, 8
DRAWS, ACCUMULATED_DRAWS = 4000, 200


def measure(seed: int) -> dict:
    inputs, targets = make_regression(SAMPLES, 8, noise=0.5, seed=seed, dtype=torch.float64)
    model = tiny_mlp(8, 16, 1, depth=2, seed=seed, dtype=torch.float64)
    loss_fn = nn.MSELoss()
    truth = true_noise_scale(model, loss_fn, inputs, targets)
    rows = per_sample_gradients(model, loss_fn, inputs, targets)
    generator = torch.Generator().manual_seed(seed)
    index = torch.randint(SAMPLES, (DRAWS, K, B), generator=generator)
    micro = rows[index].mean(dim=2)
    small = micro.pow(2).sum(dim=2).mean(dim=1).tolist()
    big = micro.mean(dim=1).pow(2).sum(dim=1).tolist()
    meter = NoiseScaleMeter(decay=0.99)
    estimates = []
    for s, g in zip(small, big, strict=True):
        estimates.append(two_batch_estimate(s, g, B, K * B))
        meter.update(s, g, B, K * B)
    norms = [e.gradient_sq_norm for e in estimates]
    traces = [e.trace for e in estimates]
    accumulated = NoiseScaleMeter(decay=0.99)
    for draw in range(ACCUMULATED_DRAWS):
        window = [(inputs[i], targets[i]) for i in index[draw]]
        estimate = estimate_from_micro_batches(model, loss_fn, window)
        # back to squared norms: the meter takes what a training loop measures
        accumulated.update(
            estimate.gradient_sq_norm + estimate.trace / B,
            estimate.gradient_sq_norm + estimate.trace / (K * B),
            B,
            K * B,
        )
    return {
        "truth": truth,
        "norm_mean": statistics.fmean(norms),
        "norm_sd": statistics.stdev(norms),
        "trace_mean": statistics.fmean(traces),
        "trace_sd": statistics.stdev(traces),
        "mean_of_ratios": statistics.fmean(e.b_simple for e in estimates),
        "median_ratio": statistics.median(e.b_simple for e in estimates),
        "ratio_of_means": statistics.fmean(traces) / statistics.fmean(norms),
        "meter": meter.b_simple,
        "accumulated_meter": accumulated.b_simple,
        "negative_norms": sum(n < 0 for n in norms) / len(norms),
    }


def main() -> None:
    started = time.perf_counter()
    print(f"{SAMPLES} samples; windows of k = {K} micro-batches of b = {B} (B = {K * B})")
    print(f"{DRAWS} windows per seed, drawn with replacement; +- is one standard deviation\n")
    header = (
        f"{'seed':>4} | {'|G|^2 true':>10} {'estimate':>18} | {'tr(S) true':>10} "
        f"{'estimate':>18} | {'neg |G|^2':>9}"
    )
    print(header)
    print("-" * len(header))
    results = {seed: measure(seed) for seed in range(3)}
    for seed, r in results.items():
        error = math.sqrt(DRAWS)
        print(
            f"{seed:>4} | {r['truth'].gradient_sq_norm:>10.4g} "
            f"{r['norm_mean']:>9.4g} +- {r['norm_sd']:<6.3g} | {r['truth'].trace:>10.4g} "
            f"{r['trace_mean']:>9.4g} +- {r['trace_sd']:<6.3g} | {r['negative_norms']:>8.1%}"
        )
        print(
            f"     | standard errors of the means: {r['norm_sd'] / error:.3g}, "
            f"{r['trace_sd'] / error:.3g}"
        )
    print()
    header = (
        f"{'seed':>4} | {'B_simple true':>13} {'ratio of means':>14} {'meter':>8} "
        f"{'meter (accum.)':>14} | {'mean of ratios':>14} {'median ratio':>12}"
    )
    print(header)
    print("-" * len(header))
    for seed, r in results.items():
        print(
            f"{seed:>4} | {r['truth'].b_simple:>13.4g} {r['ratio_of_means']:>14.4g} "
            f"{r['meter']:>8.4g} {r['accumulated_meter']:>14.4g} | "
            f"{r['mean_of_ratios']:>14.4g} {r['median_ratio']:>12.4g}"
        )
    print(
        "\nmeter: NoiseScaleMeter(decay=0.99) over the same windows; meter (accum.): over the "
        f"first {ACCUMULATED_DRAWS}, measured by accumulation"
    )
    print(f"{time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
