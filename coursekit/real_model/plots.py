"""Module 7's pictures: memory against the micro-batch with the card's budget drawn in."""

from __future__ import annotations

import matplotlib.pyplot as plt

MIB = 2**20


def plot_memory_sweep(rows, budget_bytes: int, margin: float, seq_len: int):
    """Peak memory of a training step against the micro-batch, one line per mode, at
    ``seq_len`` tokens; the budget and the budget less its margin as horizontal lines."""
    figure, axes = plt.subplots(figsize=(6.5, 3.8))
    for mode in dict.fromkeys(r.mode for r in rows):
        points = sorted(
            (r.micro_batch, r.peak_bytes) for r in rows if (r.mode, r.seq_len) == (mode, seq_len)
        )
        if points:
            axes.plot([b for b, _ in points], [m / MIB for _, m in points], "o-", label=mode, ms=4)
    axes.axhline(budget_bytes / MIB, color="#c44e52", lw=1.2, label="the card's budget")
    axes.axhline(
        budget_bytes * (1 - margin) / MIB,
        color="#c44e52",
        lw=1,
        ls="--",
        label=f"less a {margin:.0%} margin",
    )
    axes.set_xscale("log", base=2)
    axes.set_xlabel(f"micro-batch (sequences of {seq_len} tokens)")
    axes.set_ylabel("peak memory of a step (MiB)")
    axes.legend(fontsize=8)
    figure.tight_layout()
    return figure
