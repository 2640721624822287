"""Module 7's explorer: move a card's memory and the effective batch you want, and see the
micro-batch the auto-tuner would pick and the window that reaches the batch.

It uses a line fitted to the sweep's measurements (memory = fixed + per sample x micro-batch)
as a simulated card, and the same :func:`coursekit.real_model.tune` the notebook runs, so what
it shows is what the tuner would do on a card of that size, without running the model.
Display only: grading never depends on it.
"""

from __future__ import annotations

import html

from coursekit.budget import NothingFits
from coursekit.real_model.simulated_device import SimulatedDevice
from coursekit.real_model.tuning import GIB, tune
from coursekit.units import format_bytes


def explorer_html(
    base_bytes: int,
    per_sample_bytes: int,
    max_memory_gb: float,
    target_batch: int,
    world_size: int = 1,
    margin: float = 0.1,
) -> str:
    """The tuner's choice on a simulated card of ``max_memory_gb`` whose steps need
    ``base_bytes + per_sample_bytes x micro-batch``, as a sentence and a bar."""
    card = SimulatedDevice(int(max_memory_gb * GIB), int(base_bytes), int(per_sample_bytes))
    try:
        tuning = tune(
            card.try_step,
            target_batch,
            max_memory_gb,
            world_size,
            margin,
            card.free_memory,
            progress=False,
        )
    except (NothingFits, ValueError) as error:
        return f"<p><b>No plan:</b> {html.escape(str(error))}</p>"
    peak = card.needs(tuning.largest_fit)
    budget = max_memory_gb * GIB
    used, kept = 100 * peak / budget, 100 * margin
    bar = (
        f'<div style="display:flex;width:100%;border:1px solid #888;height:22px">'
        f'<div title="peak at micro-batch {tuning.largest_fit}" '
        f'style="width:{used:.1f}%;background:#4c72b0"></div>'
        f'<div style="flex:1"></div>'
        f'<div title="safety margin" style="width:{kept:.1f}%;background:#e8c9c9"></div></div>'
    )
    lines = html.escape(str(tuning)).replace("\n", "<br>")
    return (
        f"<p>{lines}</p>{bar}<p>peak {format_bytes(peak)} of a {format_bytes(budget)} card "
        f"(blue); the margin kept free is pink.</p>"
    )


def autotune_explorer(base_bytes: int, per_sample_bytes: int, card_gb: float = 1.0):
    """Sliders for the card's memory, the target effective batch, the devices and the
    margin; the plan updates as they move."""
    import ipywidgets as widgets

    memory = widgets.FloatLogSlider(
        value=card_gb, base=2, min=-10, max=8, step=0.25, description="card GiB"
    )
    target = widgets.IntSlider(value=256, min=8, max=2048, step=8, description="target batch")
    devices = widgets.Dropdown(options=[1, 2, 4, 8], value=1, description="devices")
    margin = widgets.FloatSlider(value=0.1, min=0.0, max=0.3, step=0.05, description="margin")
    view = widgets.HTML()

    def update(_change=None):
        view.value = explorer_html(
            base_bytes, per_sample_bytes, memory.value, target.value, devices.value, margin.value
        )

    for control in (memory, target, devices, margin):
        control.observe(update, names="value")
    update()
    return widgets.VBox([memory, target, devices, margin, view])
