"""Whether to reach a target batch by accumulation, and when that buys nothing.

The advice puts the two measurements of module 6 together: the critical batch (past it, more
samples per step no longer save steps) and the measured throughput (accumulation makes a step
longer, not faster, so free devices beat it).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from coursekit.arguments import real, whole


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
