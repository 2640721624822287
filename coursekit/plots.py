"""The course's plots: one function per picture, returning the matplotlib Figure."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator, NullLocator

from coursekit.memory import LinearFit
from coursekit.units import format_bytes


def plot_activation_memory(
    measured: dict[int, int], fit: LinearFit | None = None, budget_bytes: int | None = None
):
    """Measured activation bytes against micro-batch size, with the fitted line and a budget."""
    figure, axes = plt.subplots(figsize=(6, 3.5))
    sizes = list(measured)
    axes.plot(sizes, [b / 2**10 for b in measured.values()], "o", label="measured")
    if fit is not None:
        axes.plot(
            sizes,
            [fit.predict(s) / 2**10 for s in sizes],
            "-",
            alpha=0.6,
            label=f"fit: {format_bytes(fit.bytes_per_sample)} per sample",
        )
    if budget_bytes is not None:
        axes.axhline(budget_bytes / 2**10, color="red", linestyle="--", label="budget")
    axes.set_xlabel("micro-batch size (samples)")
    axes.set_ylabel("activations saved for backward (KiB)")
    axes.set_title("Activation memory grows linearly with the micro-batch")
    axes.legend()
    figure.tight_layout()
    return figure


def plot_losses(curves: dict[str, tuple[list[float], list[float]]], xlabel: str):
    """Loss curves: ``{label: (xs, losses)}``. Dashed lines show runs that coincide."""
    figure, axes = plt.subplots(figsize=(6, 3.5))
    styles = ["-", "--", ":", "-."]
    for index, (label, (xs, losses)) in enumerate(curves.items()):
        axes.plot(xs, losses, styles[index % 4], label=label, lw=2)
    axes.set_xlabel(xlabel)
    axes.set_ylabel("training loss")
    axes.set_yscale("log")
    axes.legend()
    figure.tight_layout()
    return figure


def plot_throughput(samples_per_second: dict[str, float]):
    """Horizontal bars of samples per second, one per configuration."""
    figure, axes = plt.subplots(figsize=(6, 0.5 + 0.5 * len(samples_per_second)))
    labels = list(samples_per_second)
    axes.barh(labels, list(samples_per_second.values()))
    axes.invert_yaxis()
    axes.set_xlabel("samples per second (higher is faster)")
    figure.tight_layout()
    return figure


def plot_loss_panels(panels: dict[str, dict[str, tuple[list, list]]], xlabel: str):
    """Side-by-side loss curves sharing the y axis: ``{panel title: {label: (xs, losses)}}``."""
    figure, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.5), sharey=True)
    axes = [axes] if len(panels) == 1 else list(axes)
    for ax, (title, curves) in zip(axes, panels.items(), strict=True):
        for label, (xs, losses) in curves.items():
            ax.plot(xs, losses, label=label, lw=1.5, alpha=0.85)
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.legend()
    axes[0].set_ylabel("logged training loss")
    figure.tight_layout()
    return figure


def plot_lines(
    series: dict[str, tuple[list, list]],
    xlabel: str,
    ylabel: str,
    title: str = "",
    logx: bool = False,
    logy: bool = False,
    xticks: list | None = None,
):
    """A few labelled lines with markers: ``{label: (xs, ys)}``; ``xticks`` labels those x."""
    figure, axes = plt.subplots(figsize=(6, 3.5))
    for label, (xs, ys) in series.items():
        axes.plot(xs, ys, "o-", label=label, lw=1.5, ms=4)
    axes.set_xscale("log" if logx else "linear")
    axes.set_yscale("log" if logy else "linear")
    if xticks is not None:
        axes.set_xticks(xticks, [str(x) for x in xticks])
        axes.xaxis.set_minor_locator(NullLocator())
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    if title:
        axes.set_title(title)
    axes.legend()
    figure.tight_layout()
    return figure


def plot_gradient_histogram(magnitudes: dict):
    """Histograms of log2 |gradient| with fp16's limits marked: what fp16 can hold.

    Values under 2**-25 (half fp16's smallest subnormal, 2**-24) round to zero; under the
    smallest normal, 2**-14, they keep fewer significant bits; over 65504 they overflow.
    """
    import torch

    figure, axes = plt.subplots(figsize=(7, 3.5))
    for label, values in magnitudes.items():
        values = values[values > 0].double().log2()
        axes.hist(values.numpy(), bins=80, alpha=0.55, label=label)
    top = axes.get_ylim()[1]
    limits = (
        (-25, "rounds to 0", "red", 0.92),
        (-14, "fewer bits", "orange", 0.80),
        (float(torch.tensor(65504.0).log2()), "overflow", "red", 0.92),
    )
    for exponent, text, colour, height in limits:
        axes.axvline(exponent, color=colour, linestyle="--", lw=1)
        axes.text(exponent, top * height, f" {text}", color=colour, fontsize=8)
    axes.set_xlabel("log2 |gradient|")
    axes.set_ylabel("entries")
    axes.legend(loc="upper left")
    figure.tight_layout()
    return figure


def plot_scale_history(scales: list[float], skipped: list[bool]):
    """The GradScaler's scale per window, skipped steps marked in red."""
    import math

    figure, axes = plt.subplots(figsize=(7, 3))
    steps = list(range(len(scales)))
    exponents = [math.log2(s) for s in scales]
    axes.step(steps, exponents, where="post", lw=1.5, label="scale (log2)")
    axes.plot(
        [i for i in steps if skipped[i]],
        [exponents[i] for i in steps if skipped[i]],
        "rx",
        label="step skipped (inf or NaN)",
    )
    axes.set_xlabel("window")
    axes.set_ylabel("log2 scale")
    axes.legend()
    figure.tight_layout()
    return figure


def plot_training_runs(runs: dict):
    """Training loss per optimizer step and test accuracy per epoch, one line per run.

    ``runs`` maps a label to a :class:`coursekit.vision.ClassifierRun`.
    """
    figure, (loss_axes, accuracy_axes) = plt.subplots(1, 2, figsize=(11, 3.5))
    for label, run in runs.items():
        loss_axes.plot(range(1, len(run.step_losses) + 1), run.step_losses, label=label, lw=1.2)
        epochs = range(1, len(run.test_accuracy) + 1)
        accuracy_axes.plot(epochs, [100 * a for a in run.test_accuracy], "o-", label=label)
    loss_axes.set_xlabel("optimizer step")
    loss_axes.set_ylabel("training loss")
    loss_axes.set_yscale("log")
    longest = max((len(run.test_accuracy) for run in runs.values()), default=1)
    accuracy_axes.set_xticks(range(1, longest + 1))
    accuracy_axes.set_xlabel("epoch")
    accuracy_axes.set_ylabel("test accuracy (%)")
    accuracy_axes.set_ylim(0, 100)
    accuracy_axes.axhline(25, color="grey", linestyle=":", lw=1)
    accuracy_axes.text(longest, 21, "chance (4 classes) ", color="grey", fontsize=8, ha="right")
    accuracy_axes.legend()
    figure.tight_layout()
    return figure


def plot_run_comparison(losses: dict[str, list[float]], reference: str):
    """Loss per optimizer step of each run (left), and each run's gap to ``reference`` (right).

    The right panel is on a log scale: float32 rounding shows as ~1e-7, a real difference in
    what was trained as anything from 1e-3 up.
    """
    figure, (curves, gaps) = plt.subplots(1, 2, figsize=(11, 3.5))
    base = losses[reference]
    for label, values in losses.items():
        steps = range(1, len(values) + 1)
        curves.plot(steps, values, label=label, lw=1.2)
        if label != reference:
            gap = [max(abs(a - b), 1e-9) for a, b in zip(values, base, strict=False)]
            gaps.plot(steps[: len(gap)], gap, label=label, lw=1.2)
    curves.set_xlabel("optimizer step")
    curves.set_ylabel("loss per token")
    curves.legend()
    gaps.set_yscale("log")
    gaps.set_xlabel("optimizer step")
    gaps.set_ylabel(f"|loss - {reference}|")
    gaps.legend()
    figure.tight_layout()
    return figure


def plot_noise_scale_history(history: list[dict]):
    """The loss (left) and the noise scale B_simple (right) against the optimizer step.

    ``history`` is what :func:`coursekit.noise_scale.noise_scale_along_training` returns:
    the averaged ``b_simple`` is the line, each window's own ``raw_b_simple`` the faint dots
    (only the positive ones: a log scale cannot show the rest). As the loss falls, the
    gradient's signal shrinks faster than its noise, so B_simple grows.
    """
    figure, (loss_axes, noise_axes) = plt.subplots(1, 2, figsize=(11, 3.5))
    steps = [row["step"] for row in history]
    loss_axes.plot(steps, [row["loss"] for row in history], lw=1.2)
    loss_axes.set_yscale("log")
    loss_axes.set_xlabel("optimizer step")
    loss_axes.set_ylabel("window loss")
    raw = [(row["step"], row["raw_b_simple"]) for row in history if row["raw_b_simple"] > 0]
    if raw:
        noise_axes.plot(*zip(*raw, strict=True), ".", alpha=0.3, label="one window")
    smoothed = [(row["step"], row["b_simple"]) for row in history if row["b_simple"] > 0]
    if smoothed:
        noise_axes.plot(*zip(*smoothed, strict=True), "-", lw=1.5, label="averaged")
    noise_axes.set_yscale("log")
    noise_axes.set_xlabel("optimizer step")
    noise_axes.set_ylabel("B_simple (samples)")
    noise_axes.legend()
    figure.tight_layout()
    return figure


def plot_noise_estimate_check(rows: list[dict]):
    """The two-batch estimator against the per-sample truth, one group of bars per row.

    Each row has ``label``, ``truth`` (B_simple from every sample's gradient), ``meter``
    (the ratio of averaged estimates) and ``mean_of_ratios`` (the average of per-draw
    ratios, biased: the reason to average before dividing).
    """
    figure, axes = plt.subplots(figsize=(6, 3.5))
    keys = [
        ("truth", "per-sample truth"),
        ("meter", "ratio of averages"),
        ("mean_of_ratios", "average of ratios"),
    ]
    width = 0.8 / len(keys)
    for offset, (key, label) in enumerate(keys):
        xs = [i + (offset - (len(keys) - 1) / 2) * width for i in range(len(rows))]
        axes.bar(xs, [row[key] for row in rows], width, label=label)
    axes.set_xticks(range(len(rows)), [row["label"] for row in rows])
    axes.set_ylabel("B_simple (samples)")
    axes.set_title("The noise scale: estimate against per-sample truth")
    axes.legend()
    figure.tight_layout()
    return figure


def plot_steps_vs_samples(sweep, fit):
    """Steps against samples to the target, log-log: each batch size's point, the fitted
    hyperbola, its asymptotes ``S_min`` and ``E_min``, and the critical batch on the curve.

    ``sweep`` is a list of :class:`coursekit.critical_batch.SweepPoint`, ``fit`` a
    :class:`coursekit.critical_batch.HyperbolaFit`.
    """
    import numpy as np

    reached = [p for p in sweep if p.steps is not None]
    figure, axes = plt.subplots(figsize=(6.5, 4.5))
    axes.plot([p.samples for p in reached], [p.steps for p in reached], "o", label="measured")
    for p in reached:
        axes.annotate(
            f"B={p.batch_size}",
            (p.samples, p.steps),
            fontsize=7,
            xytext=(4, 3),
            textcoords="offset points",
        )
    sizes = np.geomspace(
        min(p.batch_size for p in reached) / 2, 2 * max(p.batch_size for p in reached), 200
    )
    axes.plot(
        [fit.samples(b) for b in sizes],
        [fit.steps(b) for b in sizes],
        "-",
        alpha=0.7,
        label=f"fit: (S/S_min - 1)(E/E_min - 1) = 1, rms error {fit.rms_log_error:.0%}",
    )
    axes.axhline(fit.min_steps, color="grey", linestyle="--", lw=1)
    axes.axvline(fit.min_samples, color="grey", linestyle="--", lw=1)
    axes.text(
        axes.get_xlim()[1],
        fit.min_steps,
        f"S_min = {fit.min_steps:.1f} ",
        ha="right",
        va="bottom",
        color="grey",
        fontsize=8,
    )
    axes.text(
        fit.min_samples,
        axes.get_ylim()[1],
        f" E_min = {fit.min_samples:.0f}",
        va="top",
        color="grey",
        fontsize=8,
    )
    critical = fit.critical_batch
    axes.plot(
        [fit.samples(critical)],
        [fit.steps(critical)],
        "r*",
        ms=12,
        label=f"B_crit = E_min / S_min = {critical:.0f} (2 S_min, 2 E_min)",
    )
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("samples to the target, E = B x S")
    axes.set_ylabel("optimizer steps to the target, S")
    axes.legend(fontsize=8)
    figure.tight_layout()
    return figure


def plot_lr_scaling(runs: dict):
    """Loss against samples seen for each learning-rate scaling run, SGD left, Adam right.

    ``runs`` maps a label to a :class:`coursekit.critical_batch.LossCurve`.
    """
    figure, (sgd_axes, adam_axes) = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    for label, curve in runs.items():
        axes = adam_axes if curve.optimizer == "adam" else sgd_axes
        axes.plot(curve.samples, curve.losses, label=label, lw=1.2)
    for axes, title in ((sgd_axes, "SGD"), (adam_axes, "Adam")):
        axes.set_title(title)
        axes.set_xlabel("samples seen")
        axes.legend(fontsize=7)
    sgd_axes.set_ylabel("loss")
    figure.tight_layout()
    return figure


def plot_ramp_runs(runs: dict[str, dict[str, list[float]]]):
    """Runs whose effective batch may change, against samples seen: the batch, the learning
    rate and the logged loss per window, one panel each.

    ``runs`` maps a label to ``{"samples": ..., "batch": ..., "lr": ..., "loss": ...}``,
    one value per window (optimizer step). A schedule sized in the wrong unit shows in the
    middle panel: its learning rate stops short of its floor when the data runs out.
    """
    figure, axes = plt.subplots(1, 3, figsize=(14, 3.5))
    panels = (("batch", "effective batch"), ("lr", "learning rate"), ("loss", "logged loss"))
    for ax, (key, title) in zip(axes, panels, strict=True):
        for (label, run), style in zip(runs.items(), ["-", "--", "-.", ":"] * 4, strict=False):
            ax.plot(run["samples"], run[key], style, label=label, lw=1.5, alpha=0.85)
        ax.set_title(title)
        ax.set_xlabel("samples seen")
        ax.xaxis.set_major_locator(MaxNLocator(5))
    axes[2].set_yscale("log")
    handles, labels = axes[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=len(runs), frameon=False)
    figure.tight_layout(rect=(0, 0.08, 1, 1))
    return figure


def plot_warmup_runs(runs: dict):
    """Loss against samples seen for runs with and without warm-up, on a log scale.

    ``runs`` maps a label to a :class:`coursekit.critical_batch.LossCurve`. A diverged run's
    curve ends where its loss stopped being finite, and climbs by many orders of magnitude
    before: the y axis stops at 100 times the largest starting loss, and such a run is
    marked with an x where it leaves the plot.
    """
    figure, axes = plt.subplots(figsize=(7, 3.8))
    top = 100 * max(curve.losses[0] for curve in runs.values())
    for (label, curve), style in zip(runs.items(), ["-", "--", "-.", ":"] * 4, strict=False):
        shown = [(s, v) for s, v in zip(curve.samples, curve.losses, strict=True) if v <= top]
        (line,) = axes.plot(*zip(*shown, strict=True), style, label=label, lw=1.5, alpha=0.85)
        if len(shown) < len(curve.losses):
            axes.plot(shown[-1][0], shown[-1][1], "x", color=line.get_color(), markersize=9)
    axes.set_yscale("log")
    axes.set_ylim(top=top)
    axes.set_xlabel("samples seen")
    axes.set_ylabel("loss")
    axes.set_title("Linear scaling at 8x the batch: with and without warm-up")
    axes.legend(fontsize=8)
    figure.tight_layout()
    return figure
