"""What module 7's question shares with its mistakes' messages: the notebook, the simulated
cards of its specs, and how to read one card's log."""

from __future__ import annotations

from coursekit.real_model.simulated_device import GIB, SimulatedDevice

MODULE = "07_real_model"
MIB = 2**20


def probe_budget(spec: dict) -> int:
    """The calls to ``try_step`` a card of the checks allows: ``2 * ceil(log2(share)) + 4``.

    Growing by doubling takes at most ``ceil(log2(share)) + 1`` calls and bisecting what is
    left at most ``ceil(log2(share))``, so a search as the exercise describes it always has
    room for a few more (a retry, a last confirming step); counting down one size at a time
    from the share does not."""
    share = max(1, spec["target"] // spec["world"])
    return 2 * max(1, (share - 1).bit_length()) + 4


def card(spec: dict) -> SimulatedDevice:
    """The simulated card a spec describes (sizes in GiB and MiB, as people say them)."""
    return SimulatedDevice(
        max_calls=probe_budget(spec),
        capacity_bytes=int(spec["capacity_gib"] * GIB),
        base_bytes=int(spec["base_gib"] * GIB),
        per_sample_bytes=int(spec["per_sample_mib"] * MIB),
        flaky_bytes=int(spec.get("flaky_mib", 0) * MIB),
        flaky_chance=spec.get("flaky_chance", 0.5),
        held_fraction=spec.get("held_fraction", 0.0),
        error_from=spec.get("error_from"),
        seed=spec.get("seed", 0),
    )


def limit_bytes(spec: dict) -> int:
    """A probe's peak must stay at or under this: the budget less the margin."""
    return int(spec["max_memory_gb"] * GIB * (1 - spec["margin"]))


def surely_fits(spec: dict) -> int:
    """The largest micro-batch that fits on every call: under the budget less its margin, and
    below the card's flaky edge. 0 when none does."""
    device = card(spec)
    ceiling = min(limit_bytes(spec), device.capacity_bytes - device.flaky_bytes)
    if device.base_bytes + device.per_sample_bytes > ceiling:
        return 0
    return (ceiling - device.base_bytes) // device.per_sample_bytes


def largest_possible(spec: dict) -> int:
    """The largest micro-batch that can fit on some call (the flaky edge included)."""
    device = card(spec)
    ceiling = min(limit_bytes(spec), device.capacity_bytes)
    return max(0, (ceiling - device.base_bytes) // device.per_sample_bytes)


def gib(n_bytes: float) -> str:
    return f"{n_bytes / GIB:.2f} GiB"
