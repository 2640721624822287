"""``accumulation_momentum``: correct every BatchNorm's momentum for a window of micro-batches.

After ``accum_steps`` updates with the corrected momentum m', the window must weigh what one
update with the layer's own momentum m weighs: (1 - m')**n = 1 - m. The student's function
changes, in place, a model of BatchNorms of several kinds and momenta (one nested, one two
levels down, one with momentum=None, which keeps a cumulative average and must be left
alone) and a GroupNorm that has no momentum. The check reads each layer's momentum
afterwards, so a verdict names exactly which layer is wrong; the usual slips (m / n, the
power instead of the root, the default 0.1 assumed, float32 arithmetic, layers missed) are
named by the momenta they leave.
"""

from __future__ import annotations

from torch import nn

from coursekit.batch_norm import set_accumulation_momentum
from coursekit.checks.module03.common import MODULE
from coursekit.checks.question import Failure, Question, Rule
from coursekit.checks.registry import register
from coursekit.checks.side_effects import Kept, judge_left_behind


def _norm_zoo(spec) -> nn.Module:
    """BatchNorms of several kinds and momenta, one nested, one with momentum=None, and a
    GroupNorm that has no momentum. Only read, never run: the layers need not chain."""
    momenta = spec["momenta"]
    return nn.Sequential(
        nn.Linear(4, 6),
        nn.BatchNorm1d(6, momentum=momenta[0]),
        nn.Sequential(nn.Conv2d(3, 5, 1), nn.BatchNorm2d(5, momentum=momenta[1])),
        nn.GroupNorm(2, 4),
        nn.Sequential(nn.Sequential(nn.BatchNorm2d(7, momentum=momenta[2]))),
        nn.BatchNorm1d(3, momentum=None),
    )


def _momenta(model: nn.Module) -> list:
    return [m.momentum for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]


MOMENTUM_PLACES = [
    "the first BatchNorm1d",
    "the BatchNorm2d inside a nested Sequential",
    "the BatchNorm2d two levels down",
    "the BatchNorm1d with momentum=None",
]


@register
class AccumulationMomentum(Question):
    name = "accumulation_momentum"
    module = MODULE
    points = 2
    rules = (
        Rule(
            "m' = 1 - (1-m)^{1/N}.",
            "every spec (momenta 0.05 to 0.5, accum_steps 1 to 8)",
            (
                "divided_by_n",
                "power_not_root",
                "default_momentum_assumed",
                "root_of_momentum",
                "float32_momentum",
                "integer_exponent",
                "off_by_one_steps",
                "nothing_changed",
            ),
        ),
        Rule(
            "set the momentum of every BatchNorm layer in `model` (1d, 2d, nested ones too;",
            "every spec: BatchNorm1d, BatchNorm2d, one nested",
            ("layer_missed", "children_only", "stops_after_first_layer"),
        ),
        Rule(
            "A layer with `momentum=None` keeps a cumulative average with no momentum: leave "
            "it alone.",
            "every spec: each model has a BatchNorm1d with momentum=None",
            ("none_momentum_not_skipped", "none_momentum_changed"),
        ),
    )

    def public_specs(self):
        return [
            {"momenta": [0.1, 0.1, 0.1], "accum_steps": 4},
            {"momenta": [0.1, 0.3, 0.05], "accum_steps": 8},
            {"momenta": [0.1, 0.2, 0.5], "accum_steps": 1},
        ]

    def hidden_specs(self, rng):
        drawn = [
            {
                "momenta": [round(rng.uniform(0.01, 0.6), 4) for _ in range(3)],
                "accum_steps": rng.randint(2, 32),
            }
            for _ in range(2)
        ]
        # Fixed: the smallest window that needs a correction, with three different momenta.
        return drawn + [{"momenta": [0.2, 0.05, 0.4], "accum_steps": 2}]

    def run(self, fn, spec):
        model = _norm_zoo(spec)
        kept = Kept((model,))  # the momenta are the answer; modes, hooks, switches are not
        try:
            fn(model, spec["accum_steps"])
        except TypeError as exc:
            if "NoneType" not in str(exc):
                raise
            return {**kept.report(), "raised": "none_momentum"}
        momenta = _momenta(model)
        return {**kept.report(), "momenta": [None if m is None else float(m) for m in momenta]}

    def reference(self):
        return set_accumulation_momentum

    def judge(self, spec, outputs, expected):
        n = spec["accum_steps"]
        judge_left_behind(outputs, f"(accum_steps = {n})")
        if outputs.get("raised") == "none_momentum":
            raise Failure(
                "Your function failed on a BatchNorm with momentum=None: that layer keeps a "
                "cumulative average over all batches, with no momentum to correct. Leave it "
                "alone (skip layers whose momentum is None).",
                "none_momentum_not_skipped",
            )
        momenta = outputs.get("momenta")
        if not isinstance(momenta, list) or len(momenta) != len(expected["momenta"]):
            raise Failure("Change the momenta of the model's own BatchNorm layers, in place.")
        if momenta[-1] is not None:
            raise Failure(
                f"The BatchNorm with momentum=None now has momentum {momenta[-1]}: None means a "
                "cumulative average, which needs no correction. Leave it as it is.",
                "none_momentum_changed",
            )
        original = spec["momenta"]
        patterns = {
            "divided_by_n": [m / n for m in original],
            "power_not_root": [1 - (1 - m) ** n for m in original],
            "default_momentum_assumed": [1 - (1 - 0.1) ** (1 / n)] * len(original),
            "root_of_momentum": [m ** (1 / n) for m in original],
            "integer_exponent": [0.0 for m in original],  # 1 - (1 - m) ** (1 // n)
        }
        for steps in (n - 1, n + 1):
            if steps > 1:
                patterns[f"off_by_one_steps {steps}"] = [
                    1 - (1 - m) ** (1 / steps) for m in original
                ]
        wrong = [
            i
            for i, (got, want) in enumerate(
                zip(momenta[:-1], expected["momenta"][:-1], strict=True)
            )
            if not (isinstance(got, float) and abs(got - want) <= 1e-12)
        ]
        if not wrong:
            return
        setting = f"(accum_steps = {n}, original momenta {original})"
        for mistake, pattern in patterns.items():
            if n > 1 and all(
                isinstance(g, float) and abs(g - p) <= 1e-12
                for g, p in zip(momenta[:-1], pattern, strict=True)
            ):
                mistake, _, steps = mistake.partition(" ")
                said = MOMENTUM_MESSAGES[mistake].format(n=n, steps=steps)
                raise Failure(f"{said} {setting}", mistake)
        if all(
            isinstance(g, float) and abs(g - w) <= 1e-6
            for g, w in zip(momenta[:-1], expected["momenta"][:-1], strict=True)
        ):  # every layer off by float32 rounding only (some by more than 1e-12)
            i = wrong[0]
            raise Failure(
                f"Your momenta are right to about 6 decimal places only: "
                f"{MOMENTUM_PLACES[i]} has {momenta[i]!r}, expected "
                f"{expected['momenta'][i]!r}. They were computed in float32 (a torch.tensor "
                "without dtype is float32). Compute the momentum with Python floats "
                f"{setting}.",
                "float32_momentum",
            )
        unchanged = [i for i in wrong if momenta[i] == original[i]]
        if len(unchanged) == 3 and n > 1:
            raise Failure(
                "No BatchNorm's momentum changed. Change the layers of the model you were "
                "given, in place (a copy's layers do not count), for every BatchNorm whose "
                f"momentum is not None {setting}.",
                "nothing_changed",
            )
        if unchanged and unchanged == wrong:  # the layers that did change are right
            places = ", ".join(MOMENTUM_PLACES[i] for i in unchanged)
            raise Failure(
                f"Some BatchNorm layers kept their momentum: {places}. Walk every module "
                "(model.modules()) and every kind of BatchNorm (1d and 2d), nested ones too "
                f"{setting}.",
                "layer_missed",
            )
        i = wrong[0]
        raise Failure(
            f"{MOMENTUM_PLACES[i][0].upper()}{MOMENTUM_PLACES[i][1:]} has momentum {momenta[i]}, "
            f"expected "
            f"{expected['momenta'][i]:.6g} = 1 - (1 - {original[i]}) ** (1 / {n}) {setting}."
        )


MOMENTUM_MESSAGES = {
    "default_momentum_assumed": (
        "Every BatchNorm got 1 - (1 - 0.1)**(1 / {n}): the default momentum 0.1, not the "
        "layer's own. Read each layer's module.momentum."
    ),
    "divided_by_n": (
        "You divided each momentum by {n}. That is close for small momenta but not right: "
        "after {n} updates with m/{n}, the newest window weighs 1 - (1 - m/{n})**{n}, not m. "
        "Solve (1 - m')**{n} = 1 - m for m'."
    ),
    "root_of_momentum": (
        "Every BatchNorm got m ** (1 / {n}), the root of the momentum itself. The root belongs "
        "to 1 - m, what one update keeps of the old estimate: 1 - (1 - m) ** (1 / {n})."
    ),
    "integer_exponent": (
        "Every BatchNorm got momentum 0.0, what 1 - (1 - m) ** (1 // {n}) gives: in integer "
        "division 1 // {n} is 0. The exponent is 1 / {n}."
    ),
    "off_by_one_steps": (
        "Every BatchNorm got 1 - (1 - m) ** (1 / {steps}), the correction for {steps} updates "
        "per optimizer step; a window of {n} micro-batches makes {n}: 1 - (1 - m) ** (1 / {n})."
    ),
    "power_not_root": (
        "You used 1 - (1 - m)**{n}: that is the weight the window gets with the original "
        "momentum, {n} updates in a row. The corrected momentum inverts it: "
        "1 - (1 - m)**(1 / {n})."
    ),
}
