"""``to_group_norm``: swap every BatchNorm of a model for a GroupNorm with its affine values.

The check gives a float64 model with BatchNorm 1d and 2d (one inside a nested Sequential)
whose weights, biases included, look trained, some with an ``eps`` other than the default
and one built with ``affine=False``, then reads the returned model's normalisation layers
(kind, groups, channels, eps, dtype, weight and bias), runs it on a batch of images and
compares its other weights. A verdict names the layer and the slip: a BatchNorm left, the
wrong layer or number of groups, eps not kept, the affine values not copied or rounded
through float32, a dtype other than the model's, the model not returned.
"""

from __future__ import annotations

import torch
from torch import nn

from coursekit.batch_norm import convert_batchnorm
from coursekit.checks.instruments import tensor_list
from coursekit.checks.module03.common import MODULE
from coursekit.checks.question import Failure, Question, Rule, number_list, relative_gap
from coursekit.checks.registry import register
from coursekit.checks.side_effects import Kept, judge_left_behind


def _float32(values: list) -> list:
    """``values`` rounded to float32 and back (a slip the judges recognise)."""
    return torch.tensor(values, dtype=torch.float32).double().tolist()


def _bn_model(spec) -> nn.Module:
    """BatchNorm 1d and 2d, nested, with non-trivial affine values (as after training), each
    with the spec's ``eps``; with ``plain``, the nested one is built with ``affine=False``."""
    generator = torch.Generator().manual_seed(spec["seed"])
    width, eps = spec["width"], spec.get("eps", 1e-5)
    nested = nn.BatchNorm2d(2 * width, eps=eps, affine=not spec.get("plain", False))
    model = nn.Sequential(
        nn.Conv2d(1, width, 3, padding=1),
        nn.BatchNorm2d(width, eps=eps),
        nn.ReLU(),
        nn.Sequential(nn.Conv2d(width, 2 * width, 3, padding=1), nested),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(2 * width, 4 * width),
        nn.BatchNorm1d(4 * width, eps=eps),
        nn.Tanh(),
        nn.Linear(4 * width, 3),
    ).double()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator, dtype=torch.float64))
    return model


NESTED_NORM = 1  # in _bn_model's module order, the BatchNorm inside a nested Sequential
_NORMS = (nn.modules.batchnorm._BatchNorm, nn.GroupNorm, nn.LayerNorm, nn.InstanceNorm1d)


def _other_weights(model: nn.Module) -> list[float]:
    """The weights of every layer but the normalisation ones, in order, as one list."""
    kept = [
        p.detach().flatten()
        for module in model.modules()
        if not isinstance(module, _NORMS)
        for p in module.parameters(recurse=False)
    ]
    return torch.cat(kept).tolist() if kept else []


def _describe(model: nn.Module) -> list:
    """Each normalisation layer, in order: its kind, groups, channels and affine values."""
    layers = []
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            layers.append({"kind": type(module).__name__, "channels": module.num_features})
        elif isinstance(module, nn.GroupNorm):
            layers.append(
                {
                    "kind": "GroupNorm",
                    "groups": module.num_groups,
                    "channels": module.num_channels,
                    "eps": module.eps,
                    "dtype": str(module.weight.dtype) if module.affine else None,
                    "weight": tensor_list(module.weight) if module.affine else None,
                    "bias": tensor_list(module.bias) if module.affine else None,
                }
            )
        elif isinstance(module, (nn.LayerNorm, nn.InstanceNorm1d, nn.InstanceNorm2d)):
            layers.append({"kind": type(module).__name__})
    return layers


def _rounded_copy(got: dict, want: dict) -> bool:
    """Whether a layer's affine values are the wanted ones rounded to float32 (not all equal)."""
    try:
        return got["weight"] == _float32(want["weight"]) and got["bias"] == _float32(want["bias"])
    except (TypeError, ValueError, KeyError):
        return False


def _first_difference(got: dict, want: dict) -> str:
    pairs = zip(got["weight"] + got["bias"], want["weight"] + want["bias"], strict=True)
    a, b = next((a, b) for a, b in pairs if a != b)
    return f"{a!r} instead of {b!r}"


@register
class ToGroupNorm(Question):
    name = "to_group_norm"
    module = MODULE
    points = 3
    rules = (
        Rule(
            "replace every BatchNorm layer (1d and 2d, nested ones too) by "
            "`nn.GroupNorm(num_groups, channels)`",
            "every spec: BatchNorm1d, BatchNorm2d, one in a nested Sequential; 1 to 4 groups",
            (
                "batchnorm_left",
                "only_2d_converted",
                "dotted_name_set_on_the_root",
                "copy_at_each_level",
                "wrong_groups",
                "groups_and_group_size_swapped",
                "layer_norm_for_one_group",
            ),
        ),
        Rule(
            "with the same dtype",
            "every spec: a float64 model",
            ("wrong_dtype",),
        ),
        Rule(
            "copying the BatchNorm's learned `weight` and `bias` into the GroupNorm's",
            "every spec: affine values drawn at random, as after training",
            (
                "affine_not_copied",
                "bias_not_copied",
                "affine_disabled",
                "affine_rounded_to_float32",
                "built_in_float32_then_converted",
            ),
        ),
        Rule("and return the model.", "every spec", ("model_not_returned",)),
        Rule(
            "Keep each BatchNorm's `eps` too.",
            "the specs whose BatchNorms have an eps other than the default",
            ("eps_not_kept",),
            lambda spec: spec.get("eps", 1e-5) != 1e-5,
        ),
        Rule(
            "A BatchNorm built with `affine=False` has no weight or bias to copy: leave its "
            "GroupNorm at weight 1 and bias 0.",
            "the specs whose nested BatchNorm is built with affine=False",
            ("affine_off_crashes", "affine_off_zeroed"),
            lambda spec: spec.get("plain", False),
        ),
    )

    def public_specs(self):
        return [
            {"seed": 1, "width": 4, "num_groups": 2},
            {"seed": 2, "width": 8, "num_groups": 4},
            {"seed": 3, "width": 6, "num_groups": 1, "eps": 1e-3},
            # the nested BatchNorm has no weight or bias: its GroupNorm is at weight 1, bias 0
            {"seed": 4, "width": 4, "num_groups": 2, "plain": True},
        ]

    def hidden_specs(self, rng):
        specs = []
        for _ in range(2):
            width = rng.choice([4, 6, 8, 12])
            groups = rng.choice([g for g in (2, 3, 4) if width % g == 0])
            specs.append({"seed": rng.randrange(10**6), "width": width, "num_groups": groups})
        specs[-1]["eps"] = rng.choice([1e-4, 1e-3, 0.01])
        specs[-1]["plain"] = rng.random() < 0.5
        return specs

    def run(self, fn, spec):
        model = _bn_model(spec)
        kept = Kept()  # converting in place is allowed: torch's switches are what is kept
        returned = fn(model, spec["num_groups"])
        left = kept.report()
        if not isinstance(returned, nn.Module):
            return {**left, "returned": type(returned).__name__}
        images = torch.randn(
            3, 1, 5, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64
        )
        try:
            out = returned(images)
            ran = list(out.shape) == [3, 3]
        except Exception:  # a layer of the wrong size: reported from the description below
            ran = False
        return {
            **left,
            "layers": _describe(returned),
            "runs": ran,
            "weights": _other_weights(returned),
        }

    def reference(self):
        return convert_batchnorm

    def judge(self, spec, outputs, expected):
        setting = f"(num_groups = {spec['num_groups']})"
        judge_left_behind(outputs, setting)
        if "returned" in outputs:
            raise Failure(
                f"Your function returned {outputs['returned']}: return the model (it may be "
                "the same object you changed in place).",
                "model_not_returned",
            )
        layers = outputs.get("layers")
        if not isinstance(layers, list) or not all(isinstance(x, dict) for x in layers):
            raise Failure("Your model's normalisation layers could not be read.")
        wanted = expected["layers"]
        left = [i for i, x in enumerate(layers) if str(x.get("kind", "")).startswith("BatchNorm")]
        if left:
            nested_only = left == [NESTED_NORM]
            raise Failure(
                f"{len(left)} BatchNorm layer(s) are still in the model"
                + (
                    ": the one inside a nested Sequential. Recurse into every child (or walk "
                    "model.named_modules() and replace through the parent)."
                    if nested_only
                    else ". Replace every BatchNorm1d and BatchNorm2d."
                ),
                "batchnorm_left",
            )
        if len(layers) != len(wanted) or not all(x.get("kind") == "GroupNorm" for x in layers):
            kinds = ", ".join(sorted({str(x.get("kind")) for x in layers})) or "none at all"
            raise Failure(
                f"Expected {len(wanted)} GroupNorm layers, one per BatchNorm; found these "
                f"normalisation layers: {kinds}. "
                "GroupNorm with num_groups groups works on (N, C) and (N, C, H, W) alike.",
                "wrong_layer",
            )
        for index, (got, want) in enumerate(zip(layers, wanted, strict=True)):
            if (got.get("groups"), got.get("channels")) != (want["groups"], want["channels"]):
                raise Failure(
                    f"A GroupNorm has {got.get('groups')} groups over {got.get('channels')} "
                    f"channels; it should be GroupNorm({want['groups']}, {want['channels']}) "
                    f"{setting}.",
                    "wrong_groups",
                )
            if got.get("eps") != want["eps"]:
                raise Failure(
                    f"A GroupNorm has eps {got.get('eps')!r}, but the BatchNorm it replaces "
                    f"has eps {want['eps']!r} {setting}: build it with eps=child.eps.",
                    "eps_not_kept",
                )
            if index == NESTED_NORM and spec.get("plain"):
                if got.get("weight") is None:
                    continue  # affine=False: the same as weight 1 and bias 0
                if got.get("weight") != want["weight"] or got.get("bias") != want["bias"]:
                    raise Failure(
                        "The BatchNorm inside the nested Sequential was built with "
                        "affine=False: it has no weight or bias to copy. Its GroupNorm must "
                        "normalise only: leave it at weight 1 and bias 0 (as built), "
                        f"{setting}.",
                        "affine_not_copied",
                    )
            if got.get("weight") is None and want["weight"] is not None:
                raise Failure(
                    "A GroupNorm has no weight and bias (affine=False): a trained model would "
                    "lose the BatchNorm's learned scale and shift. Keep affine=True (the "
                    "default) and copy them across.",
                    "affine_not_copied",
                )
            if got.get("dtype") != want["dtype"]:
                raise Failure(
                    f"A GroupNorm's parameters are {got.get('dtype')}, but the model is "
                    f"{want['dtype']}: build it with dtype=child.weight.dtype (or "
                    ".to(child.weight.dtype)), as the BatchNorm it replaces.",
                    "wrong_dtype",
                )
            if got.get("weight") != want["weight"] or got.get("bias") != want["bias"]:
                if _rounded_copy(got, want):
                    raise Failure(
                        "The GroupNorm layers carry the BatchNorms' weight and bias rounded to "
                        "float32 (right to about 7 digits, e.g. "
                        f"{_first_difference(got, want)}): the copy went through float32 "
                        "(a .float(), or a float32 layer converted afterwards). Copy the "
                        "float64 values directly into a float64 layer.",
                        "affine_rounded_to_float32",
                    )
                raise Failure(
                    "The GroupNorm layers do not carry the BatchNorms' learned weight and bias "
                    "(a trained model would lose its scale and shift). Copy them across.",
                    "affine_not_copied",
                )
        if outputs.get("runs") is not True:
            raise Failure("The converted model does not run on a batch of images.")
        weights = number_list(outputs, "weights", "the model's weights")
        if relative_gap(weights, expected["weights"]) > 0:
            raise Failure(
                "The norm layers are right, but other weights of the model changed: convert "
                "the norm layers only."
            )
