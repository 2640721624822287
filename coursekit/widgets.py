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


_NORMALISATION_LABELS = {
    "tokens": "sum / window's tokens (right)",
    "mean_of_means": "mean of micro-batch means",
    "sequence_mean": "mean of sequence means",
    "padding_counted": "sum / positions (padding counted)",
    "not_divided": "micro-batch means, not divided",
}


def scaling_html(errors: dict[str, float]) -> str:
    """A bar per normalisation: its relative error against the window's true mean per token.

    Bars are drawn to a 50% scale (longer ones are cut and say so); the number is exact.
    """
    rows = []
    for name, label in _NORMALISATION_LABELS.items():
        error = errors[name]
        width = min(abs(error), 0.5) / 0.5 * 100
        colour = "#55a868" if abs(error) < 1e-12 else "#c44e52"
        cut = " &#8614;" if abs(error) > 0.5 else ""
        rows.append(
            f"<tr><td style='padding-right:8px'>{label}</td>"
            f"<td style='width:260px'><div style='width:{width:.1f}%;background:{colour};"
            f"height:14px'></div></td><td>{error:+.2%}{cut}</td></tr>"
        )
    return (
        "<p>Relative error of the window's loss against the true mean per real token (a "
        "normalisation that gets this number wrong weights the tokens' gradients wrongly "
        "too):</p><table>" + "".join(rows) + "</table>"
    )


def loss_scaling_explorer():
    """Sliders for accum_steps, padding and micro-batch sizes; the errors update as they move.

    ``micro-batch`` is the number of sequences per micro-batch, ``size spread`` how much it
    varies from one micro-batch to the next, ``draw`` another random window.
    """
    import ipywidgets as widgets

    from coursekit.loss_scaling import normalisation_errors

    accum = widgets.IntSlider(value=4, min=1, max=32, description="accum_steps")
    padding = widgets.FloatSlider(value=0.5, min=0.0, max=0.9, step=0.05, description="padding")
    size = widgets.IntSlider(value=2, min=1, max=16, description="micro-batch")
    spread = widgets.FloatSlider(value=0.5, min=0.0, max=1.0, step=0.1, description="size spread")
    seed = widgets.IntSlider(value=0, min=0, max=20, description="draw")
    view = widgets.HTML()

    def update(_change=None):
        errors = normalisation_errors(
            accum.value, padding.value, size.value, spread.value, seed.value
        )
        view.value = scaling_html(errors)

    for control in (accum, padding, size, spread, seed):
        control.observe(update, names="value")
    update()
    return widgets.VBox([accum, padding, size, spread, seed, view])


def batchnorm_html(report) -> str:
    """The BatchNorm explorer's view of one :class:`coursekit.batch_norm.BatchNormReport`."""
    gap = report.gap
    exact = gap.relative_error < 1e-12
    colour = "#55a868" if exact else "#c44e52"
    lines = [
        f"<p><b>gradient</b>: relative error <span style='color:{colour}'>"
        f"{gap.relative_error:.2e}</span>, cosine similarity {gap.cosine:.4f} "
        f"({'the same gradient' if exact else 'a different gradient'})</p>"
    ]
    if report.window_weight is None:
        lines.append("<p><b>running statistics</b>: none (this norm keeps no batch statistics)</p>")
    else:
        lines.append(
            f"<p><b>running statistics</b>: the newest window weighs "
            f"{report.window_weight:.3f} (one update of a single batch: 0.100); running mean "
            f"differs from the single batch's by {report.running_mean_gap:.1%}</p>"
        )
    return "".join(lines)


def batchnorm_explorer():
    """Micro-batch size, accum_steps, norm layer and momentum correction; the gap updates."""
    import ipywidgets as widgets

    from coursekit.batch_norm import batchnorm_report

    micro = widgets.SelectionSlider(
        options=[2, 4, 8, 16, 32, 64], value=4, description="micro-batch"
    )
    accum = widgets.IntSlider(value=4, min=1, max=16, description="accum_steps")
    norm = widgets.Dropdown(options=["batch", "group", "layer"], value="batch", description="norm")
    corrected = widgets.Checkbox(value=False, description="corrected momentum")
    view = widgets.HTML()

    def update(_change=None):
        report = batchnorm_report(micro.value, accum.value, norm.value, corrected.value)
        view.value = batchnorm_html(report)

    for control in (micro, accum, norm, corrected):
        control.observe(update, names="value")
    update()
    return widgets.VBox([micro, accum, norm, corrected, view])


def zero_html(
    n_parameters: float,
    stage: int,
    world_size: int,
    accum_steps: int,
    micro_batch_size: int = 8,
    accounting: str = "paper",
) -> str:
    """The ZeRO calculator's view: the effective batch, model-state memory per device, and
    communication per optimizer step. (Activations come on top, per micro-batch: module 1.)"""
    from coursekit.zero import (
        ACCOUNTINGS,
        COMMUNICATION,
        communication_per_step,
        zero_bytes_per_device,
    )

    if accounting == "deepspeed" and stage < 2:
        states = (
            "<p><b>model states per device</b>: DeepSpeed's estimators cover stages 2 and 3 "
            "only; pick one of those, or another accounting.</p>"
        )
    else:
        memory = zero_bytes_per_device(n_parameters, stage, world_size, accounting=accounting)
        states = (
            f"<p><b>model states per device</b> ({ACCOUNTINGS[accounting]}): "
            f"{memory / 1e9:,.1f} GB</p>"
        )
    setup = {0: "ddp_no_sync", 1: "zero1", 2: "zero2", 3: "fsdp"}[stage]
    volume = communication_per_step(setup, accum_steps) if world_size > 1 else 0.0
    effective = micro_batch_size * accum_steps * world_size
    return (
        f"<p><b>effective batch</b> = {micro_batch_size} x {accum_steps} x {world_size} = "
        f"{effective:,} samples per optimizer step</p>"
        f"{states}"
        f"<p><b>communication per optimizer step</b>: {volume:g} x the model "
        f"({volume * 2 * n_parameters / 1e9:,.1f} GB in fp16): {COMMUNICATION[setup][2]}</p>"
    )


def zero_calculator():
    """Model size, ZeRO stage, devices, accum_steps and micro-batch; the effective batch,
    memory and traffic update live."""
    import ipywidgets as widgets

    sizes = {"125M": 1.25e8, "1.3B": 1.3e9, "7.5B": 7.5e9, "13B": 1.3e10, "70B": 7e10}
    parameters = widgets.SelectionSlider(options=list(sizes), value="7.5B", description="model")
    stage = widgets.IntSlider(value=0, min=0, max=3, description="ZeRO stage")
    world = widgets.SelectionSlider(
        options=[1, 2, 4, 8, 16, 32, 64, 128, 256, 1024], value=64, description="devices"
    )
    accum = widgets.IntSlider(value=4, min=1, max=32, description="accum_steps")
    micro = widgets.SelectionSlider(
        options=[1, 2, 4, 8, 16, 32], value=8, description="micro-batch"
    )
    accounting = widgets.Dropdown(
        options=[("the paper", "paper"), ("DeepSpeed", "deepspeed"), ("fp32 (AMP, FSDP2)", "fp32")],
        value="paper",
        description="bytes as",
    )
    view = widgets.HTML()

    def update(_change=None):
        view.value = zero_html(
            sizes[parameters.value],
            stage.value,
            world.value,
            accum.value,
            micro.value,
            accounting.value,
        )

    for control in (parameters, stage, world, accum, micro, accounting):
        control.observe(update, names="value")
    update()
    return widgets.VBox([parameters, stage, world, accum, micro, accounting, view])


def pipeline_html(stages: int, micro_batches: int, schedule: str = "gpipe") -> str:
    """A pipeline schedule as a grid (a row per stage, a column per time slot), its bubble,
    and the micro-batches each stage holds in flight (its activation memory)."""
    from coursekit.arguments import choice
    from coursekit.pipeline import (
        bubble_fraction,
        gpipe_schedule,
        in_flight,
        measured_bubble,
        one_f_one_b_schedule,
    )

    schedule = choice("schedule", schedule, ("gpipe", "1f1b"))
    build = gpipe_schedule if schedule == "gpipe" else one_f_one_b_schedule
    slots = build(stages, micro_batches)
    length = max(slot.time for slot in slots) + 1
    grid = {(slot.stage, slot.time): slot for slot in slots}
    rows = []
    for stage in range(stages):
        cells = []
        for time in range(length):
            slot = grid.get((stage, time))
            if slot is None:
                cells.append("<td style='background:#eee;width:18px'></td>")
            else:
                colour = "#4c72b0" if slot.kind == "F" else "#dd8452"
                cells.append(
                    f"<td style='background:{colour};color:white;width:18px;text-align:center;"
                    f"font-size:10px'>{slot.kind}{slot.micro_batch}</td>"
                )
        held = in_flight(slots, stage)
        rows.append(
            f"<tr><td>stage {stage}&nbsp;</td>{''.join(cells)}<td>&nbsp;{held} in flight</td></tr>"
        )
    return (
        f"<table style='border-collapse:separate;border-spacing:1px'>{''.join(rows)}</table>"
        f"<p>idle (grey): {measured_bubble(slots, stages):.1%} of the device time; "
        f"(p - 1) / (m + p - 1) = {bubble_fraction(stages, micro_batches):.1%}. "
        f"Most micro-batches held at once: {max(in_flight(slots, s) for s in range(stages))}"
        f" (GPipe: m; 1F1B: at most p).</p>"
    )


def pipeline_view():
    """Stages, micro-batches and schedule; the grid, its bubble and memory update live."""
    import ipywidgets as widgets

    stages = widgets.IntSlider(value=4, min=1, max=8, description="stages p")
    micro = widgets.IntSlider(value=4, min=1, max=16, description="micro-batches m")
    schedule = widgets.Dropdown(
        options=[("GPipe", "gpipe"), ("1F1B", "1f1b")], value="gpipe", description="schedule"
    )
    view = widgets.HTML()

    def update(_change=None):
        view.value = pipeline_html(stages.value, micro.value, schedule.value)

    for control in (stages, micro, schedule):
        control.observe(update, names="value")
    update()
    return widgets.VBox([stages, micro, schedule, view])


def advisor_html(
    memory_micro_batch: int,
    throughput: dict[int, float],
    critical_batch: float,
    target_batch: int,
    devices: int = 1,
    more_devices_available: int = 0,
) -> str:
    """The accumulation advisor's view: the advice, its reasons, and a bar per option of the
    time one optimizer step takes (accumulating on the devices in use, or with all of them)."""
    import html

    from coursekit.critical_batch import should_accumulate

    advice = should_accumulate(
        memory_micro_batch,
        throughput,
        critical_batch,
        target_batch,
        devices,
        more_devices_available,
    )
    options = {f"{devices} device(s)": devices}
    if more_devices_available:
        options[f"{devices + more_devices_available} device(s)"] = devices + more_devices_available
    micro = advice.micro_batch_size
    seconds_per_sample = advice.step_time_s / (micro * advice.accum_steps)
    times = {
        label: -(-advice.effective_batch // (micro * d)) * micro * seconds_per_sample
        for label, d in options.items()
    }
    longest = max(times.values())
    bars = "".join(
        f"<tr><td style='padding-right:8px'>{label}</td><td style='width:260px'>"
        f"<div style='width:{100 * t / longest:.1f}%;background:#4c72b0;height:14px'></div>"
        f"</td><td>{t * 1e3:.1f} ms</td></tr>"
        for label, t in times.items()
    )
    reasons = "".join(f"<li>{html.escape(reason)}</li>" for reason in advice.reasons)
    return (
        f"<p><b>advice: {advice.action}</b>: effective batch {advice.effective_batch} = "
        f"{micro} x {advice.accum_steps} x {advice.devices} device(s); steps to the target "
        f"about {advice.relative_steps:.2f} x S_min</p><ul>{reasons}</ul>"
        f"<p>time per optimizer step (compute only):</p><table>{bars}</table>"
    )


def accumulation_advisor(throughput: dict[int, float] | None = None):
    """Sliders for the memory budget (largest micro-batch), target batch, critical batch and
    devices; the advice and the time per optimizer step update as they move.

    ``throughput`` (samples/s by micro-batch size, from
    :func:`coursekit.critical_batch.measure_throughput`) defaults to 1000 samples/s at every
    size: the time bars then count samples, not a machine.
    """
    import ipywidgets as widgets

    powers = [2**k for k in range(13)]
    if throughput is None:
        throughput = {size: 1000.0 for size in powers}
    wide = {"style": {"description_width": "8em"}, "layout": widgets.Layout(width="32em")}
    memory = widgets.SelectionSlider(
        options=[s for s in powers if s >= min(throughput)],
        value=32,
        description="fits in memory",
        **wide,
    )
    target = widgets.SelectionSlider(options=powers, value=512, description="target batch", **wide)
    critical = widgets.SelectionSlider(
        options=powers, value=256, description="critical batch", **wide
    )
    devices = widgets.SelectionSlider(options=[1, 2, 4, 8], value=1, description="devices", **wide)
    more = widgets.SelectionSlider(
        options=[0, 1, 2, 4, 8], value=0, description="free devices", **wide
    )
    view = widgets.HTML()

    def update(_change=None):
        view.value = advisor_html(
            memory.value, throughput, critical.value, target.value, devices.value, more.value
        )

    for control in (memory, target, critical, devices, more):
        control.observe(update, names="value")
    update()
    return widgets.VBox([memory, target, critical, devices, more, view])
