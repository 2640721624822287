"""Pipeline parallelism cuts the batch into micro-batches too: GPipe and 1F1B schedules.

The model is split into ``p`` stages on ``p`` devices. GPipe (Huang et al. 2019) runs all
``m`` micro-batches forward through the stages, then all backward, and steps once: the
gradients accumulate over the micro-batches, exactly as in the course's loop. A stage waits
until the micro-batch reaches it, so each device idles for ``p - 1`` slots on the way in and
again on the way out: the bubble, a fraction ``(p - 1) / (m + p - 1)`` of the time.

GPipe holds every micro-batch's activations until its backward: ``m`` in flight on the first
stage. The 1F1B schedule (PipeDream-Flush, Narayanan et al. 2021, arXiv:2104.04473) starts
each micro-batch's backward as soon as it can, so stage ``s`` holds at most ``p - s``: the
same bubble, with memory bounded by the number of stages, not of micro-batches. Interleaving
``v`` model chunks per device (same paper) divides the idle time by ``v``:
``(p - 1) / (v m + p - 1)`` of the time.
"""

from __future__ import annotations

from dataclasses import dataclass

from coursekit.arguments import whole


@dataclass(frozen=True)
class Slot:
    """One unit of work: ``stage`` runs ``kind`` ("F" or "B") of ``micro_batch`` at ``time``."""

    time: int
    stage: int
    kind: str
    micro_batch: int


def gpipe_schedule(stages: int, micro_batches: int) -> list[Slot]:
    """Every forward and backward slot of one GPipe step (each takes one time unit).

    Forward of micro-batch ``j`` on stage ``s`` runs at ``s + j``; the backward pass starts
    when the last forward leaves the last stage and runs the stages in reverse.
    """
    stages, micro_batches = whole("stages", stages), whole("micro_batches", micro_batches)
    slots = [Slot(s + j, s, "F", j) for j in range(micro_batches) for s in range(stages)]
    start = stages + micro_batches - 1  # all forwards are done
    slots += [
        Slot(start + (stages - 1 - s) + j, s, "B", j)
        for j in range(micro_batches)
        for s in range(stages)
    ]
    return sorted(slots, key=lambda slot: (slot.time, slot.stage))


def bubble_fraction(stages: int, micro_batches: int) -> float:
    """The share of device time spent idle in GPipe: ``(p - 1) / (m + p - 1)``.

    Example:
        >>> bubble_fraction(4, 4), bubble_fraction(4, 32)
        (0.42857142857142855, 0.08571428571428572)
    """
    stages, micro_batches = whole("stages", stages), whole("micro_batches", micro_batches)
    return (stages - 1) / (micro_batches + stages - 1)


def measured_bubble(slots: list[Slot], stages: int) -> float:
    """Idle share of a schedule: empty (stage, time) cells over all cells."""
    stages = whole("stages", stages)
    slots = list(slots)
    if not slots:
        raise ValueError("slots is empty: give the slots of a schedule, e.g. gpipe_schedule(4, 8).")
    if not all(isinstance(slot, Slot) for slot in slots):
        raise TypeError("slots must be Slot objects, as gpipe_schedule returns them.")
    if any(not 0 <= slot.stage < stages for slot in slots):
        raise ValueError(f"A slot's stage is outside 0..{stages - 1}: is stages={stages} right?")
    length = max(slot.time for slot in slots) + 1
    return 1 - len(slots) / (stages * length)


def one_f_one_b_schedule(stages: int, micro_batches: int) -> list[Slot]:
    """Every slot of one 1F1B (PipeDream-Flush) step, each forward and backward one time unit.

    Stage ``s`` runs ``min(p - s - 1, m)`` forwards to fill the pipe, then alternates one
    forward and one backward, then drains the remaining backwards. Each slot runs as soon as
    its inputs are there: the forward of micro-batch ``j`` on stage ``s`` after it on stage
    ``s - 1``, its backward after the backward on stage ``s + 1`` (the last stage's after its
    own forward).
    """
    stages, micro_batches = whole("stages", stages), whole("micro_batches", micro_batches)
    orders = []
    for stage in range(stages):
        warmup = min(stages - stage - 1, micro_batches)
        order = [("F", j) for j in range(warmup)]
        for j in range(micro_batches - warmup):
            order += [("F", warmup + j), ("B", j)]
        order += [("B", j) for j in range(micro_batches - warmup, micro_batches)]
        orders.append(order)
    done: dict[tuple[str, int, int], int] = {}  # (kind, stage, micro-batch) -> its time slot
    slots, position, time = [], [0] * stages, 0
    while any(position[s] < len(orders[s]) for s in range(stages)):
        ready = []
        for stage in range(stages):
            if position[stage] == len(orders[stage]):
                continue
            kind, j = orders[stage][position[stage]]
            if kind == "F":
                needs = [("F", stage - 1, j)] if stage > 0 else []
            else:
                needs = [("B", stage + 1, j)] if stage < stages - 1 else [("F", stage, j)]
            if all(done.get(n, time) < time for n in needs):
                ready.append((stage, kind, j))
        for stage, kind, j in ready:
            slots.append(Slot(time, stage, kind, j))
            done[(kind, stage, j)] = time
            position[stage] += 1
        time += 1
        if time > 2 * (stages + micro_batches) * stages:  # every slot is ready long before
            raise AssertionError("1F1B schedule did not finish: a dependency is wrong")
    return sorted(slots, key=lambda slot: (slot.time, slot.stage))


def in_flight(slots: list[Slot], stage: int) -> int:
    """The most micro-batches ``stage`` holds activations for at once: forwards run whose
    backward has not (what its activation memory must fit)."""
    stage = whole("stage", stage, minimum=0)
    held = most = 0
    for slot in sorted(slots, key=lambda slot: slot.time):
        if slot.stage == stage:
            held += 1 if slot.kind == "F" else -1
            most = max(most, held)
    return most


def interleaved_bubble_fraction(stages: int, micro_batches: int, chunks: int) -> float:
    """The idle share with ``chunks`` model chunks per device: ``(p - 1) / (v m + p - 1)``.

    Each chunk's forward takes ``1 / v`` of a stage's, so the fill and drain cost
    ``(p - 1) / v`` units against ``m`` units of work (Narayanan et al. 2021, section 2.2).

    Example:
        >>> interleaved_bubble_fraction(4, 8, 1) == bubble_fraction(4, 8)
        True
    """
    stages, micro_batches = whole("stages", stages), whole("micro_batches", micro_batches)
    chunks = whole("chunks", chunks)
    return (stages - 1) / (chunks * micro_batches + stages - 1)
