"""Checks for module 3 (03_batch_dependence): BatchNorm momentum, GroupNorm, GradCache.

The first two read the model after the student's function has changed it (momenta, layer
types, affine values), so a verdict names exactly which layer is wrong. The third compares
gradients with the full batch's and watches forward passes, like module 1's window check.
"""

from __future__ import annotations

import weakref

import torch
from torch import nn

from coursekit.batch_norm import convert_batchnorm, set_accumulation_momentum
from coursekit.checks.instruments import (
    as_float,
    judge_micro_batches_and_weights,
    require_gradient,
    tensor_list,
    weights_of,
)
from coursekit.checks.question import Failure, Question, number_list, relative_gap, scale_of
from coursekit.checks.registry import register
from coursekit.contrastive import (
    grad_cache_step,
    info_nce,
    make_pairs,
    naive_accumulation,
)
from coursekit.gradients import flat_gradient

MODULE = "03_batch_dependence"
TOLERANCE = 1e-10  # float64

# ---------------------------------------------------------------- accumulation_momentum


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
        try:
            fn(model, spec["accum_steps"])
        except TypeError as exc:
            if "NoneType" not in str(exc):
                raise
            return {"raised": "none_momentum"}
        momenta = _momenta(model)
        return {"momenta": [None if m is None else float(m) for m in momenta]}

    def reference(self):
        return set_accumulation_momentum

    def judge(self, spec, outputs, expected):
        n = spec["accum_steps"]
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
        }
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
                raise Failure(f"{MOMENTUM_MESSAGES[mistake].format(n=n)} {setting}", mistake)
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


def _float32(values: list) -> list:
    """``values`` rounded to float32 and back (a slip the judges recognise)."""
    return torch.tensor(values, dtype=torch.float32).double().tolist()


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
    "power_not_root": (
        "You used 1 - (1 - m)**{n}: that is the weight the window gets with the original "
        "momentum, {n} updates in a row. The corrected momentum inverts it: "
        "1 - (1 - m)**(1 / {n})."
    ),
}


# ---------------------------------------------------------------- to_group_norm


def _bn_model(spec) -> nn.Module:
    """BatchNorm 1d and 2d, nested, with non-trivial affine values (as after training)."""
    generator = torch.Generator().manual_seed(spec["seed"])
    width = spec["width"]
    model = nn.Sequential(
        nn.Conv2d(1, width, 3, padding=1),
        nn.BatchNorm2d(width),
        nn.ReLU(),
        nn.Sequential(nn.Conv2d(width, 2 * width, 3, padding=1), nn.BatchNorm2d(2 * width)),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(2 * width, 4 * width),
        nn.BatchNorm1d(4 * width),
        nn.Tanh(),
        nn.Linear(4 * width, 3),
    ).double()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator, dtype=torch.float64))
    return model


NESTED_NORM = 1  # in _bn_model's module order, the BatchNorm inside a nested Sequential


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

    def public_specs(self):
        return [
            {"seed": 1, "width": 4, "num_groups": 2},
            {"seed": 2, "width": 8, "num_groups": 4},
            {"seed": 3, "width": 6, "num_groups": 1},
        ]

    def hidden_specs(self, rng):
        specs = []
        for _ in range(2):
            width = rng.choice([4, 6, 8, 12])
            groups = rng.choice([g for g in (2, 3, 4) if width % g == 0])
            specs.append({"seed": rng.randrange(10**6), "width": width, "num_groups": groups})
        return specs

    def run(self, fn, spec):
        model = _bn_model(spec)
        returned = fn(model, spec["num_groups"])
        if not isinstance(returned, nn.Module):
            return {"returned": type(returned).__name__}
        images = torch.randn(
            3, 1, 5, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64
        )
        try:
            out = returned(images)
            ran = list(out.shape) == [3, 3]
        except Exception:  # a layer of the wrong size: reported from the description below
            ran = False
        return {"layers": _describe(returned), "runs": ran, "weights": weights_of(returned)}

    def reference(self):
        return convert_batchnorm

    def judge(self, spec, outputs, expected):
        setting = f"(num_groups = {spec['num_groups']})"
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
        for got, want in zip(layers, wanted, strict=True):
            if (got.get("groups"), got.get("channels")) != (want["groups"], want["channels"]):
                raise Failure(
                    f"A GroupNorm has {got.get('groups')} groups over {got.get('channels')} "
                    f"channels; it should be GroupNorm({want['groups']}, {want['channels']}) "
                    f"{setting}.",
                    "wrong_groups",
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


# ---------------------------------------------------------------- grad_cache_step


def _encoder(seed: int) -> nn.Module:
    """``tiny_encoder(6, 4, seed, float64)``, seeding the CPU generator only (the checks run
    it hundreds of times; ``torch.manual_seed`` also queues every accelerator's seeding)."""
    generator = torch.default_generator
    state = generator.get_state()
    try:
        generator.manual_seed(seed)
        model = nn.Sequential(nn.Linear(6, 32), nn.Tanh(), nn.Linear(32, 4))
    finally:
        generator.set_state(state)
    return model.to(torch.float64)


def _pairs_problem(spec):
    encoder = _encoder(spec["seed"])
    queries, keys = make_pairs(
        spec["n_pairs"], in_features=6, seed=spec["seed"] + 1, dtype=torch.float64
    )
    return encoder, queries, keys


class _Box:
    """What autograd stores for a saved tensor while the counter below watches it."""

    def __init__(self, tensor: torch.Tensor):
        self.tensor = tensor


class _LiveGraphs:
    """Counts the encoder's forward graphs that are alive at once (their saved activations).

    Each forward run with autograd on gets an id; every tensor autograd saves during it is
    boxed, and a finaliser notices when autograd lets go of the box (after backward, or when
    the graph is dropped, e.g. by ``.detach()``). ``peak`` is the most graphs alive at once:
    1 or 2 for GradCache's second pass (a query and a key micro-batch may share one
    backward), many when micro-batches' graphs are kept until a late backward.
    """

    def __init__(self, model: nn.Module):
        self.current: int | None = None
        self.next_id = 0
        self.live: dict[int, int] = {}
        self.peak = 0
        self.largest_forward = 0
        model.register_forward_pre_hook(self._start)
        model.register_forward_hook(self._end)

    def _start(self, _module, args) -> None:
        if args and torch.is_tensor(args[0]):
            self.largest_forward = max(self.largest_forward, len(args[0]))
        if torch.is_grad_enabled():
            self.current, self.next_id = self.next_id, self.next_id + 1

    def _end(self, _module, _args, _output) -> None:
        self.current = None

    def pack(self, tensor: torch.Tensor) -> _Box:
        box = _Box(tensor.detach())  # no grad_fn: a saved output must not keep its graph alive
        if self.current is not None:
            forward = self.current
            self.live[forward] = self.live.get(forward, 0) + 1
            self.peak = max(self.peak, len(self.live))
            weakref.finalize(box, self._release, forward)
        return box

    def _release(self, forward: int) -> None:
        self.live[forward] -= 1
        if not self.live[forward]:
            del self.live[forward]

    @staticmethod
    def unpack(box: _Box) -> torch.Tensor:
        return box.tensor


def _variant_gradients(spec):
    """Each named slip and the gradient it leaves, computed one after the other (lazily) on
    one encoder whose .grad is cleared in between."""
    encoder, queries, keys = _pairs_problem(spec)
    micro, temperature = spec["micro_batch_size"], spec["temperature"]
    naive_accumulation(encoder, queries, keys, micro, temperature)
    yield "negatives_per_micro_batch", flat_gradient(encoder.parameters()).tolist()
    encoder.zero_grad(set_to_none=True)
    with torch.no_grad():
        query_cache = torch.cat([encoder(q) for q in queries.split(micro)])
        key_cache = torch.cat([encoder(k) for k in keys.split(micro)])
    query_cache.requires_grad_(True)
    info_nce(query_cache, key_cache, temperature).backward()
    for chunk, gradient in zip(queries.split(micro), query_cache.grad.split(micro), strict=True):
        encoder(chunk).backward(gradient)
    yield "keys_not_backpropagated", flat_gradient(encoder.parameters()).tolist()


GRAD_CACHE_MESSAGES = {
    "negatives_per_micro_batch": (
        "Your gradient is plain accumulation of each micro-batch's own InfoNCE loss: every "
        "query met only its micro-batch's keys as negatives. That is another, easier loss. "
        "Embed all micro-batches first (no graph), compute the loss over all embeddings, then "
        "push each slice of the embeddings' gradient back through its micro-batch."
    ),
    "keys_not_backpropagated": (
        "Only the queries' cached gradients were pushed back through the encoder: the keys "
        "are embedded by the same encoder, and their gradient counts too. Run the second "
        "pass over the keys' micro-batches as well."
    ),
}


@register
class GradCacheStep(Question):
    name = "grad_cache_step"
    module = MODULE
    points = 4

    def public_specs(self):
        return [
            {"seed": 1, "n_pairs": 16, "micro_batch_size": 4, "temperature": 0.1},
            {"seed": 2, "n_pairs": 12, "micro_batch_size": 3, "temperature": 0.5},
            {"seed": 3, "n_pairs": 10, "micro_batch_size": 4, "temperature": 0.1},  # 4, 4, 2
            {"seed": 4, "n_pairs": 8, "micro_batch_size": 8, "temperature": 0.2},  # one chunk
        ]

    def hidden_specs(self, rng):
        specs = []
        for _ in range(2):
            micro = rng.randint(2, 6)
            specs.append(
                {
                    "seed": rng.randrange(10**6),
                    "n_pairs": micro * rng.randint(2, 4) + rng.randint(0, micro - 1),
                    "micro_batch_size": micro,
                    "temperature": rng.choice([0.05, 0.1, 0.3]),
                }
            )
        # Fixed: micro-batches 6, 4. Split by count (chunk(2): 5, 5) or balanced (5, 5), it
        # is another partition than split(6): inputs and cached gradients sliced in two ways
        # no longer line up (the public uneven case, 10 by 4, happens to agree with chunk(3)).
        specs.append({"seed": 5, "n_pairs": 10, "micro_batch_size": 6, "temperature": 0.1})
        return specs

    def run(self, fn, spec):
        encoder, queries, keys = _pairs_problem(spec)
        graphs = _LiveGraphs(encoder)
        start = weights_of(encoder)
        with torch.autograd.graph.saved_tensors_hooks(graphs.pack, graphs.unpack):
            returned = fn(encoder, queries, keys, spec["micro_batch_size"], spec["temperature"])
        loss = as_float(returned)
        return {
            "grad": tensor_list(flat_gradient(encoder.parameters())),
            "loss": loss,
            "largest_forward": graphs.largest_forward,
            "peak_live_graphs": graphs.peak,
            "weights_moved": weights_of(encoder) != start,
        }

    def reference(self):
        return grad_cache_step

    def judge(self, spec, outputs, expected):
        micro, n = spec["micro_batch_size"], spec["n_pairs"]
        setting = f"({n} pairs, micro-batches of {micro}, temperature {spec['temperature']})"
        judge_micro_batches_and_weights(
            outputs,
            micro,
            setting,
            unit="inputs",
            hint=" Both passes count: embed queries and keys in separate calls.",
        )
        require_gradient(outputs)
        actual = number_list(outputs, "grad", "a gradient for every parameter")
        wanted = expected["grad"]
        if relative_gap(actual, wanted) > TOLERANCE:
            self._diagnose(spec, actual, wanted, setting)
        peak = outputs.get("peak_live_graphs")
        if isinstance(peak, int) and peak > 2:
            raise Failure(
                f"The gradient is right, but at one point the graphs (saved activations) of "
                f"{peak} encoder forward passes were alive at once {setting}: as much memory "
                "as the micro-batches together, which GradCache exists to avoid. Compute the "
                "first pass under torch.no_grad(), and in the second pass call backward on "
                "each micro-batch's embeddings before embedding the next.",
                "graph_kept_for_all_micro_batches",
            )
        loss = outputs.get("loss")
        if not isinstance(loss, float) or abs(loss - expected["loss"]) > 1e-9 * abs(
            expected["loss"]
        ):
            raise Failure(
                f"The gradient is right, but return the full-batch InfoNCE loss as a float: "
                f"expected {expected['loss']:.6g}, got {loss} {setting}.",
                "loss_wrong",
            )

    def _diagnose(self, spec, actual, wanted, setting):
        # A multiple of the right gradient, or one off by rounding only, is none of the named
        # slips' gradients: those are checked (two more runs) only when neither holds.
        gap = relative_gap(actual, wanted)
        k = scale_of(actual, wanted)
        if k is not None and abs(k - 1) > 1e-3:  # not a float32 slip's rounding
            raise Failure(
                f"Your gradient is {k:.4g} times the full-batch gradient {setting}: the cached "
                "gradients are already the full loss's; push them back unscaled.",
                "wrong_scale",
            )
        if gap >= 1e-5 and spec["n_pairs"] > spec["micro_batch_size"]:
            for mistake, gradient in _variant_gradients(spec):
                if relative_gap(actual, gradient) <= 1e-9:
                    raise Failure(f"{GRAD_CACHE_MESSAGES[mistake]} {setting}", mistake)
        hint = ""
        if gap < 1e-5:
            hint = (
                " That is close, but not float64-exact: is there a float32 step (a .float(), "
                "or a torch.tensor without dtype) in your computation?"
            )
        elif spec["n_pairs"] % spec["micro_batch_size"]:
            last = spec["n_pairs"] % spec["micro_batch_size"]
            hint = (
                f" Here the last micro-batch is shorter ({last} pairs): check that every pair "
                "is pushed back, and that each micro-batch's inputs and the slice of cached "
                "gradients pushed through them are the same rows."
            )
        raise Failure(
            f"Your gradient differs from the full-batch InfoNCE gradient by {gap:.2e} "
            f"(relative) {setting}.{hint}"
        )
