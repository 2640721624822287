"""Pipeline parallelism cuts the batch into micro-batches too: the GPipe schedule.

The model is split into ``p`` stages on ``p`` devices. GPipe (Huang et al. 2019) runs all
``m`` micro-batches forward through the stages, then all backward, and steps once: the
gradients accumulate over the micro-batches, exactly as in the course's loop. A stage waits
until the micro-batch reaches it, so each device idles for ``p - 1`` slots on the way in and
again on the way out: the bubble, a fraction ``(p - 1) / (m + p - 1)`` of the time.
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
