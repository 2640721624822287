"""``zero_memory``: the bytes each device holds when training with ZeRO at stage 0 to 3.

Mixed-precision Adam keeps 2 + 2 + K bytes per parameter (fp16 weights, fp16 gradients and
K = 12 bytes of fp32 optimizer state with master weights); each stage shards one more part
over the devices, and everything the stages below it shard. The answer must match the
reference to 1e-9. An answer in gigabytes or gibibytes is named, and so is each usual slip
(nothing sharded, everything sharded, K = 8, the next stage's number, stages that shard
only their own part) when it alone gives the student's number.
"""

from __future__ import annotations

from coursekit.checks.module04.common import MODULE
from coursekit.checks.question import Failure, Question, Rule
from coursekit.checks.registry import register
from coursekit.checks.side_effects import judge_repeated, repeated
from coursekit.zero import zero_bytes_per_device


def _zero_patterns(psi: float, stage: int, nd: int) -> dict[str, float]:
    """What the usual slips compute, to name them."""
    return {
        "world_size_ignored": 16 * psi,
        "everything_sharded": 16 * psi / nd if stage else 16 * psi,
        "fp32_master_weights_forgotten": zero_bytes_per_device(psi, stage, nd, k=8),
        "stages_shifted": zero_bytes_per_device(psi, min(stage + 1, 3), nd),
        "stages_not_cumulative": _one_part_sharded(psi, stage, nd),
        "fp32_gradients": zero_bytes_per_device(psi, stage, nd)
        + 2 * psi / (nd if stage >= 2 else 1),
    }


def _one_part_sharded(psi: float, stage: int, nd: int) -> float:
    """Stage s sharding only its own part (`if stage == s`), not the earlier stages' too."""
    weights, gradients, states = 2 * psi, 2 * psi, 12 * psi
    if stage == 1:
        states /= nd
    elif stage == 2:
        gradients /= nd
    elif stage == 3:
        weights /= nd
    return weights + gradients + states


ZERO_MESSAGES = {
    "world_size_ignored": (
        "You returned 16 bytes per parameter whatever the stage: nothing is divided by the "
        "world size. Each stage shards more of the 2 + 2 + K bytes over the devices."
    ),
    "everything_sharded": (
        "You divided all 16 bytes per parameter by the world size: that is stage 3. Stage 1 "
        "shards only the K = 12 optimizer bytes, stage 2 the gradients too."
    ),
    "fp32_master_weights_forgotten": (
        "You used K = 8 (Adam's momentum and variance). Mixed-precision Adam also keeps an "
        "fp32 copy of the weights: K = 4 + 4 + 4 = 12 bytes per parameter."
    ),
    "fp32_gradients": (
        "Your number counts 4 bytes (fp32) per gradient. In the table's accounting the "
        "gradients are fp16, 2 bytes per parameter; the fp32 copy is of the weights, in K."
    ),
    "stages_shifted": (
        "Your numbers are the next stage's: stage 1 shards the optimizer state only, stage 2 "
        "adds the gradients, stage 3 the fp16 weights."
    ),
    "stages_not_cumulative": (
        "Each stage shards everything the stages below it shard, and one part more: stage 2 "
        "shards the optimizer state AND the gradients, stage 3 those AND the fp16 weights. "
        "You sharded only the stage's own new part."
    ),
}


@register
class ZeroMemory(Question):
    name = "zero_memory"
    module = MODULE
    points = 2
    rules = (
        Rule(
            r"| 0 (plain data parallel) | nothing | $(2 + 2 + K)\,\psi$ |",
            "the specs of stage 0",
            ("fp32_master_weights_forgotten", "stage_0_shards_the_state", "fp32_gradients"),
            lambda spec: spec["stage"] == 0,
        ),
        Rule(
            r"| 1 | optimizer state | $4\psi + K\psi / N_d$ |",
            "the specs of stage 1",
            ("stages_shifted", "gradients_sharded_from_stage_1", "everything_sharded"),
            lambda spec: spec["stage"] == 1,
        ),
        Rule(
            r"| 2 | + gradients | $2\psi + (2 + K)\psi / N_d$ |",
            "the specs of stage 2",
            ("stages_not_cumulative",),
            lambda spec: spec["stage"] == 2,
        ),
        Rule(
            r"| 3 | + weights | $(2 + 2 + K)\psi / N_d$ |",
            "the specs of stage 3",
            ("weights_never_sharded",),
            lambda spec: spec["stage"] == 3,
        ),
        Rule(
            "the bytes of model states per device.",
            "every spec",
            (
                "not_bytes",
                "not_bytes_but_rounded_gibibytes",
                "returns_a_string",
                "world_size_ignored",
            ),
        ),
    )

    def public_specs(self):
        return [{"n_parameters": 7.5e9, "stage": stage, "world_size": 64} for stage in range(4)] + [
            {"n_parameters": 1e9, "stage": 2, "world_size": 1}
        ]

    def hidden_specs(self, rng):
        psi = rng.choice([1.3e8, 3.5e9, 7e10])
        world = rng.choice([2, 8, 32, 256])
        return [{"n_parameters": psi, "stage": stage, "world_size": world} for stage in (1, 2, 3)]

    def run(self, fn, spec):
        return repeated(lambda spec: self._answer(fn, spec), spec)

    @staticmethod
    def _answer(fn, spec):
        answer = fn(spec["n_parameters"], spec["stage"], spec["world_size"])
        try:
            return {"bytes": float(answer)}
        except (TypeError, ValueError):
            return {"bytes": repr(answer)[:100]}

    def reference(self):
        return zero_bytes_per_device

    def judge(self, spec, outputs, expected):
        psi, stage, nd = spec["n_parameters"], spec["stage"], spec["world_size"]
        setting = f"({psi:.3g} parameters, stage {stage}, {nd} device{'s' if nd != 1 else ''})"
        judge_repeated(outputs, setting)
        answer, wanted = outputs.get("bytes"), expected["bytes"]
        if not isinstance(answer, float):
            raise Failure(f"Return the number of bytes as a number; got {answer} {setting}.")
        if abs(answer - wanted) <= 1e-9 * wanted:
            return
        for unit, size in (("gigabytes", 1e9), ("gibibytes", 2**30)):
            if abs(answer * size - wanted) <= 0.05 * wanted:
                raise Failure(
                    f"You returned {answer:.4g}: {unit}, it seems. Return bytes {setting}.",
                    "not_bytes",
                )
        matches = [
            mistake
            for mistake, pattern in _zero_patterns(psi, stage, nd).items()
            if abs(pattern - wanted) > 1e-9 * wanted and abs(answer - pattern) <= 1e-9 * pattern
        ]
        if any(  # fp32 gradients give another stage's number here: not a name to give
            abs(answer - zero_bytes_per_device(psi, s, nd)) <= 1e-9 * answer for s in range(4)
        ):
            matches = [m for m in matches if m != "fp32_gradients"]
        if len(matches) == 1:  # two slips give this number here: naming one could be untrue
            raise Failure(f"{ZERO_MESSAGES[matches[0]]} {setting}", matches[0])
        other_stages = [
            s
            for s in range(4)
            if s != stage and abs(answer - zero_bytes_per_device(psi, s, nd)) <= 1e-9 * abs(answer)
        ]
        hint = ""
        if other_stages:
            hint = f" That is stage {other_stages[0]}'s number for this model and world size."
        if len(matches) > 1:
            hint += (
                " Two different slips give exactly this number here; the other settings "
                "tell them apart."
            )
        raise Failure(
            f"Expected {wanted / 1e9:.4g} GB ({wanted:.6g} bytes); got {answer:.6g} "
            f"{setting}.{hint}"
        )
