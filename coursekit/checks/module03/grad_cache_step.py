"""``grad_cache_step``: one contrastive step with GradCache, micro-batch by micro-batch.

GradCache gives the full batch's InfoNCE gradient with one micro-batch's activations in
memory: embed every micro-batch without a graph, compute the loss over all embeddings, then
push each slice of the embeddings' gradient back through its micro-batch. Like module 1's
window check, this compares the gradient with the full batch's (float64) and watches the
forward passes: their sizes, and how many forward graphs are alive at once (through
saved-tensor hooks), so keeping every micro-batch's graph until a late backward is named
though the gradient is right. Plain accumulation of per-micro-batch losses, and a second
pass over the queries only, are named by re-running them.
"""

from __future__ import annotations

import weakref
from itertools import count

import torch
from torch import nn

from coursekit.checks.instruments import (
    as_float,
    judge_micro_batches_and_weights,
    require_gradient,
    tensor_list,
    weights_of,
)
from coursekit.checks.module03.common import MODULE
from coursekit.checks.question import Failure, Question, Rule, number_list, relative_gap, scale_of
from coursekit.checks.registry import register
from coursekit.checks.side_effects import (
    Kept,
    gradient_again,
    judge_again,
    judge_left_behind,
)
from coursekit.checks.tamper_evident import (
    MODULE_CALL,
    ForwardSink,
    Seal,
    Sink,
    judge_instruments,
    poke,
    poker,
    watched,
)
from coursekit.checks.window_memory import (
    TEMPERATURE,
    in_mib,
    is_memory_spec,
    judge_memory,
    memory_setting,
    memory_spec,
    run_measured,
)
from coursekit.contrastive import (
    grad_cache_step,
    info_nce,
    make_pairs,
    naive_accumulation,
)
from coursekit.gradients import flat_gradient

TOLERANCE = 1e-10  # float64


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


def _whole_batch(fn):
    """``fn`` called on the memory test's encoder and its batch of pairs, whole, with the
    micro-batch size the batch was split by (:mod:`coursekit.checks.window_memory`)."""

    def step(encoder, _, micro_batches):
        queries = torch.cat([q for q, _ in micro_batches])
        keys = torch.cat([k for _, k in micro_batches])
        return fn(encoder, queries, keys, len(micro_batches[0][0]), TEMPERATURE)

    return step


def _warm_up(encoder, _loss_fn, micro_batches):
    """The memory test's warm-up: the right step, on the micro-batches :func:`_whole_batch`
    would join. Written here (coursekit's own answer is watched by the grader's tripwire),
    and watched itself: the question names it in ``library_answers``."""
    with torch.no_grad():
        query_cache = torch.cat([encoder(q) for q, _ in micro_batches])
        key_cache = torch.cat([encoder(k) for _, k in micro_batches])
    query_cache.requires_grad_(True)
    key_cache.requires_grad_(True)
    info_nce(query_cache, key_cache, TEMPERATURE).backward()
    sizes = [len(queries) for queries, _ in micro_batches]
    for side, cache in enumerate((query_cache, key_cache)):
        for pair, gradient in zip(micro_batches, cache.grad.split(sizes), strict=True):
            encoder(pair[side]).backward(gradient)


def _too_much_memory(spec, outputs) -> Failure:
    """The memory test's failure in GradCache's words: a forward on the whole batch with its
    graph (the largest the encoder saw), or many micro-batches' graphs alive at once."""
    setting, peak = memory_setting(spec), in_mib(outputs["peak_above_warm_up"])
    largest = outputs.get("largest_forward")
    if isinstance(largest, int) and largest > spec["micro_batch_size"]:
        return Failure(
            f"Your function needed {peak} of memory beyond what one micro-batch's forward and "
            f"backward take {setting}: a forward on {largest} inputs at once, with its graph. "
            "Embed one micro-batch at a time: the first pass under torch.no_grad(), the "
            "second with each micro-batch's backward before the next is embedded.",
            "whole_batch_forward",
        )
    return Failure(
        f"Your function needed {peak} of memory beyond what one micro-batch's forward and "
        f"backward take {setting}: the graphs (saved activations) of many micro-batches were "
        "alive at once, which GradCache exists to avoid (if the encoder saw only "
        "micro-batches, a copy of it may have seen the rest). Compute the first pass under "
        "torch.no_grad(), and in the second pass call backward on each micro-batch's "
        "embeddings before embedding the next.",
        "graph_kept_for_all_micro_batches",
    )


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

    Each forward of the encoder run with autograd on is one graph; every tensor autograd
    saves during it is boxed, and a weak reference notices when autograd lets go of the box
    (after backward, or when the graph is dropped, e.g. by ``.detach()``). ``peak`` is the
    most graphs alive at once: 1 or 2 for GradCache's second pass (a query and a key
    micro-batch may share one backward), many when micro-batches' graphs are kept until a
    late backward. Out of the hooks' reach and read from torch's live state, as the checks'
    instruments are (:mod:`coursekit.checks.tamper_evident`).
    """

    def __init__(self, model: nn.Module):
        self.seal = Seal()
        self._sizes: list[tuple] = []
        self._forwards = ForwardSink(model, events=self._sizes)
        self._grad_modes = ForwardSink(model, measure=torch.is_grad_enabled)
        self._graphs = _GraphSink(model)
        self.sinks = [self._forwards, self._grad_modes, self._graphs]
        for add, attribute in (
            (model.register_forward_pre_hook, "_forward_pre_hooks"),
            (model.register_forward_hook, "_forward_hooks"),
        ):
            hook = poker(self._forwards.token)
            self.seal.hook(model, attribute, add(hook), hook)
        hook = poker(self._grad_modes.token)
        self.seal.hook(model, "_forward_pre_hooks", model.register_forward_pre_hook(hook), hook)
        self.pack, self._graphs.released = _packer(self._graphs.token)

    @staticmethod
    def unpack(box: _Box) -> torch.Tensor:
        return box.tensor

    @property
    def largest_forward(self) -> int:
        return max((size for _, size in self._sizes), default=0)

    @property
    def peak(self) -> int:
        """The most forward graphs alive at once, replayed from the events."""
        forward_of, live, peak = {}, {}, 0
        for event in self._graphs.events:
            if event[0] == "pack":
                _, forward, number = event
                forward_of[number] = forward
                live[forward] = live.get(forward, 0) + 1
                peak = max(peak, len(live))
            elif event[1] in forward_of:
                forward = forward_of.pop(event[1])
                live[forward] -= 1
                if not live[forward]:
                    del live[forward]
        return peak

    def verdict(self, hooks_on: bool) -> str:
        """Intact when every hook is, the saved-tensor hooks were still this counter's when
        the function returned (``hooks_on``), and every forward run with autograd on saved
        something through them (else they were off meanwhile)."""
        if not hooks_on:
            return "changed"
        with_grad = sum(enabled for (enabled,) in self._grad_modes.events)
        unseen = with_grad > len(self._graphs.forwards)
        return self.seal.verdict("forward_unseen" if unseen else None)


def _saved_tensor_hooks():
    """The saved-tensor hooks in force now, (pack, unpack), or None."""
    return torch._C._autograd._top_saved_tensors_default_hooks(False)


def _packer(token):
    """The saved-tensor pack hook, and the weak references' callback, for ``token``'s sink."""

    # what they call is bound now, as tamper_evident's hooks bind it
    def released(reference, _token=token, _send=poke) -> None:  # a box went
        _send(_token, ("release", reference))

    def pack(tensor, _token=token, _send=poke, _box=_Box, _ref=weakref.ref, _gone=released):
        box = _box(tensor.detach())  # no grad_fn: a saved output must not keep its graph
        _send(_token, ("pack", box, _ref(box, _gone)))
        return box

    return pack, released


class _GraphSink(Sink):
    """Packs attributed to the encoder call in progress (found on the stack, never told),
    and releases of boxes this sink saw packed, once they are really gone."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model, self.released, self._codes = model, None, MODULE_CALL
        self.forwards: dict[int, tuple] = {}  # id of a call (call_of) -> (it, its number)
        self._boxes: dict[int, tuple] = {}  # id of a weak reference -> (it, its number)
        self._numbers = count()

    def accept(self, kind, *payload) -> None:
        if kind == "release":
            (reference,) = payload
            known = self._boxes.get(id(reference))
            if known is not None and known[0] is reference and reference() is None:
                del self._boxes[id(reference)]
                self.events.append(("release", known[1]))
            return
        box, reference = payload
        frame = self._frame_of(self._codes, self.model)
        if frame is None or reference() is not box or reference.__callback__ is not self.released:
            return
        call = self._call_of(frame)
        forward = self.forwards.setdefault(id(call), (call, len(self.forwards)))[1]
        number = next(self._numbers)
        self._boxes[id(reference)] = (reference, number)
        self.events.append(("pack", forward, number))


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
    encoder.zero_grad(set_to_none=True)
    query_cache, key_cache = query_cache.detach(), key_cache.requires_grad_(True)
    info_nce(query_cache, key_cache, temperature).backward()
    for chunk, gradient in zip(keys.split(micro), key_cache.grad.split(micro), strict=True):
        encoder(chunk).backward(gradient)
    yield "zero_grad_between_passes", flat_gradient(encoder.parameters()).tolist()


GRAD_CACHE_MESSAGES = {
    "zero_grad_between_passes": (
        "Your gradient is the keys' part alone: the queries' part, pushed back before it, is "
        "no longer in .grad (cleared between the two, by a zero_grad?). Both parts add up in "
        ".grad; clear it only before the step, never between the queries' and keys' passes."
    ),
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
    # coursekit code that answers it under other names (flagged when called for it)
    library_answers = ("coursekit.checks.module03.grad_cache_step._warm_up",)
    rules = (
        Rule(
            "Leave the full-batch gradient in `.grad`",
            "every spec; a shorter last micro-batch in some",
            (
                "negatives_per_micro_batch",
                "keys_not_backpropagated",
                "wrong_scale",
                "gradients_chunked_by_count",
                "slice_offset_from_chunk_length",
                "last_partial_micro_batch_dropped",
                "second_pass_detached",
                "zero_grad_between_passes",
                "float32_cache",
            ),
        ),
        Rule(
            "never run the encoder on more than `micro_batch_size` inputs at once",
            "every spec: the encoder's input sizes are recorded",
            ("whole_batch_forward",),
        ),
        Rule(
            "Embed every micro-batch under `torch.no_grad()`: the embeddings of the whole "
            "batch, and no activations kept.",
            "every spec: the graphs alive during the second pass are counted",
            ("keys_with_graph",),
        ),
        Rule(
            "Embed each micro-batch again, this time with a graph, and call "
            "`embeddings.backward(cached_gradient_slice)`",
            "every spec: the graphs alive during the second pass are counted",
            ("all_graphs_then_one_backward", "graph_kept_for_all_micro_batches"),
        ),
        Rule(
            "and return the full-batch loss as a float.",
            "every spec: the returned loss against the reference's",
            ("loss_wrong",),
        ),
    )

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
        # the memory test: 256 pairs through a wide encoder, its fresh memory counted by the
        # kernel (the graph counter above sees the encoder's passes, not a copy's)
        specs.append(memory_spec(rng.randrange(10**6), problem="pairs"))
        return specs

    def memory_call(self, fn) -> tuple:
        """How the memory test calls ``fn``, and the right answer its warm-up runs
        (:func:`coursekit.checks.window_memory.run_measured`)."""
        return _whole_batch(fn), _warm_up

    def run(self, fn, spec):
        if is_memory_spec(spec):
            return run_measured(spec, *self.memory_call(fn))
        encoder, queries, keys = _pairs_problem(spec)
        graphs = _LiveGraphs(encoder)
        start = weights_of(encoder)
        kept = Kept((encoder,), queries=queries, keys=keys)
        with torch.autograd.graph.saved_tensors_hooks(graphs.pack, graphs.unpack):
            args = (encoder, queries, keys, spec["micro_batch_size"], spec["temperature"])
            returned = watched((graphs,), fn, *args)
            hooks_on = _saved_tensor_hooks() == (graphs.pack, graphs.unpack)
        loss = as_float(returned)
        outputs = {
            **kept.report(),
            "grad": tensor_list(flat_gradient(encoder.parameters())),
            "loss": loss,
            "largest_forward": graphs.largest_forward,
            "peak_live_graphs": graphs.peak,
            "weights_moved": weights_of(encoder) != start,
            "instruments": graphs.verdict(hooks_on),
        }
        if outputs["input_changed"] is None and not outputs["weights_moved"]:
            args = (encoder, queries, keys, spec["micro_batch_size"], spec["temperature"])
            again = gradient_again(outputs["grad"], lambda: fn(*args), encoder.parameters())
            outputs["again_gap"] = again
        return outputs

    def reference(self):
        return grad_cache_step

    def judge(self, spec, outputs, expected):
        if is_memory_spec(spec):
            try:
                return judge_memory(spec, outputs, expected)
            except Failure as failure:
                if failure.mistake not in ("single_backward", "whole_batch_forward"):
                    raise
                raise _too_much_memory(spec, outputs) from None
        micro, n = spec["micro_batch_size"], spec["n_pairs"]
        setting = f"({n} pairs, micro-batches of {micro}, temperature {spec['temperature']})"
        judge_left_behind(outputs, setting)
        judge_instruments(outputs, setting)
        judge_again(outputs, TOLERANCE, setting)
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
