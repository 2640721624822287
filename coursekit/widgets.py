"""Interactive views students play with. Display only: grading never depends on them."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from coursekit.memory import memory_breakdown
from coursekit.units import format_bytes

_COLOURS = {
    "parameters": "#4c72b0",
    "gradients": "#55a868",
    "optimizer state": "#c44e52",
    "activations": "#dd8452",
}


def planner_html(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    make_inputs: Callable[[int], torch.Tensor],
    micro_batch_size: int,
    accum_steps: int,
) -> str:
    """The memory planner's view for one setting: the effective batch and a stacked bar.

    Activations are measured for the chosen micro-batch (not estimated); the other parts
    do not depend on it, which is the point the picture makes.
    """
    breakdown = memory_breakdown(model, optimizer, make_inputs(micro_batch_size))
    total = breakdown.total_bytes
    bar = "".join(
        f'<div title="{name}: {format_bytes(n)}" style="width:{100 * n / total:.2f}%;'
        f'background:{_COLOURS[name]};height:22px"></div>'
        for name, n in breakdown.parts().items()
    )
    legend = " &nbsp; ".join(
        f'<span style="color:{_COLOURS[name]}">&#9632;</span> {name}: {format_bytes(n)}'
        for name, n in breakdown.parts().items()
    )
    effective = micro_batch_size * accum_steps
    return (
        f"<p><b>effective batch</b> = {micro_batch_size} x {accum_steps} = {effective} samples "
        f"per optimizer step; <b>memory for one micro-batch</b>: {format_bytes(total)}</p>"
        f'<div style="display:flex;width:100%;border:1px solid #888">{bar}</div>'
        f"<p>{legend}</p>"
    )


def memory_planner(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    make_inputs: Callable[[int], torch.Tensor],
    max_micro_batch: int = 512,
):
    """Sliders for micro-batch size and accum_steps; the memory bar updates as they move."""
    import ipywidgets as widgets

    sizes = [2**k for k in range(max_micro_batch.bit_length()) if 2**k <= max_micro_batch]
    micro = widgets.SelectionSlider(
        options=sizes, value=sizes[len(sizes) // 2], description="micro-batch"
    )
    accum = widgets.IntSlider(value=4, min=1, max=64, description="accum_steps")
    view = widgets.HTML()

    def update(_change=None):
        view.value = planner_html(model, optimizer, make_inputs, micro.value, accum.value)

    micro.observe(update, names="value")
    accum.observe(update, names="value")
    update()
    return widgets.VBox([micro, accum, view])
