"""The course's plots: one function per picture, returning the matplotlib Figure."""

from __future__ import annotations

import matplotlib.pyplot as plt

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
