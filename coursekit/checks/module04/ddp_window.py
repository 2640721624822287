"""``ddp_window``: one accumulation window under DDP, all-reduced once, on its last micro-batch.

The check runs in this process, in a one-process gloo group: with one process DDP's
all-reduce is a copy, but DDP still decides when it would communicate, and that is what a
communication hook counts (with the micro-batch each synchronisation happened in, and every
use of ``no_sync()``). The notebook then runs the same function on two processes. The
gradient is compared with the window's mean; the check answers ``dist.get_world_size()``
with 2, so a loss divided by the world size (DDP divides already) shows as half of it.
The hidden draw ends with a memory test (:mod:`coursekit.checks.module04.ddp_memory`): those
counts are made inside the process, and the kernel's count of memory is not.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from coursekit.checks.instruments import (
    SINGLE_BACKWARD,
    Watch,
    judge_micro_batches_and_weights,
    require_gradient,
    tensor_list,
    weights_of,
)
from coursekit.checks.module04.common import MODULE
from coursekit.checks.module04.ddp_memory import in_ddp, warm_up_in_ddp
from coursekit.checks.question import Failure, Question, Rule, number_list, relative_gap, scale_of
from coursekit.checks.registry import register
from coursekit.checks.side_effects import Kept, judge_left_behind
from coursekit.checks.tamper_evident import (
    CallSink,
    ForwardSink,
    Seal,
    Sink,
    combined,
    counted,
    judge_instruments,
    poke,
    poker,
    watched,
)
from coursekit.checks.window_memory import (
    is_memory_spec,
    judge_memory,
    memory_spec,
    run_measured,
)
from coursekit.data import make_regression, split_micro_batches
from coursekit.distributed import _COLLECTIVES, CollectiveCounter, ensure_single_process_group
from coursekit.gradients import flat_gradient
from coursekit.models import tiny_mlp
from coursekit.workers.distributed import reference_ddp_window


class _SyncWatch:
    """Counts DDP's synchronisations, the micro-batch each happened in, and no_sync use.

    Out of the hooks' reach and read from torch's live state, as the checks' instruments are
    (:mod:`coursekit.checks.tamper_evident`); :meth:`verdict` says whether every hook is
    still in place.
    """

    def __init__(self, ddp: nn.parallel.DistributedDataParallel):
        self.counter = CollectiveCounter()
        self.seal = Seal()
        # through the DDP wrapper, which alone can synchronise: inside no_sync() or not
        self._ddp = ForwardSink(ddp, measure=lambda: not ddp.require_backward_grad_sync)
        self._module = ForwardSink(ddp.module, measure=lambda: None)  # the micro-batches
        self._sync = _SyncSink(self._module)
        self._no_sync = CallSink(ddp.no_sync)
        self.sinks = [self._ddp, self._module, self._sync, self._no_sync]
        sync_token, ddp_hook = self._sync.token, self.counter.ddp_hook

        def synced(state, bucket, _token=sync_token, _send=poke, _hook=ddp_hook):
            _send(_token)  # DDP's reducer calls it, in the backward pass
            return _hook(state, bucket)

        ddp.register_comm_hook(None, synced)
        for module, sink in ((ddp, self._ddp), (ddp.module, self._module)):
            hook = poker(sink.token)
            handle = module.register_forward_pre_hook(hook)
            self.seal.hook(module, "_forward_pre_hooks", handle, hook)
        wrapper = counted(self._no_sync.original, self._no_sync)
        ddp.no_sync = wrapper
        self.seal.method(ddp, "no_sync", wrapper)

    @property
    def forwards(self) -> int:
        return len(self._module.events)

    @property
    def ddp_forwards(self) -> int:
        return len(self._ddp.events)

    @property
    def forwards_inside_no_sync(self) -> int:
        return sum(inside for (inside,) in self._ddp.events)

    @property
    def no_sync_entries(self) -> int:
        return len(self._no_sync.events)

    @property
    def sync_at(self) -> list[int]:
        return [at for (at,) in self._sync.events]

    def verdict(self) -> str:
        return self.seal.verdict()


class _SyncSink(Sink):
    """One event per backward pass in which DDP synchronised (its comm hook ran inside the
    autograd engine): how many micro-batches had run forward by then."""

    def __init__(self, forwards: ForwardSink):
        super().__init__()
        self.forwards = forwards

    def accept(self, *_payload) -> None:
        if torch._C._current_autograd_node() is None:
            return
        if self._once(torch._C._current_graph_task_id()):
            self.events.append((len(self.forwards.events),))


class _ByHandSink(Sink):
    """One event per collective the student's code called through ``torch.distributed``:
    the poke must come straight from a wrapper :class:`_ByHand` put there."""

    def __init__(self):
        super().__init__()
        self.originals: set[int] = set()
        self._code = _HAND_CODE

    def accept(self, *_payload) -> None:
        frame = self._getframe(2)
        if frame.f_code is self._code and id(frame.f_locals.get("_original")) in self.originals:
            self.events.append(())


def _by_hand_wrapper(original, token):
    def collective(*args, _original=original, _token=token, _send=poke, **kwargs):
        _send(_token)
        return _original(*args, **kwargs)

    return collective


_HAND_CODE = next(c for c in _by_hand_wrapper.__code__.co_consts if hasattr(c, "co_name"))


class _ByHand:
    """Counts the collectives the student's code makes itself (DDP's own all-reduce runs in
    C++, and is not one), out of the code's reach: the wrappers it puts on
    ``torch.distributed`` bind what they call, and the count lives in a sink."""

    def __init__(self):
        self.sink = _ByHandSink()
        self.sinks = [self.sink]
        self._originals: dict[str, object] = {}

    def __enter__(self) -> _ByHand:
        for name in _COLLECTIVES:
            original = getattr(dist, name, None)
            if original is not None:
                self._originals[name] = original
                self.sink.originals.add(id(original))
                setattr(dist, name, _by_hand_wrapper(original, self.sink.token))
        return self

    def __exit__(self, *_exc) -> None:
        for name, original in self._originals.items():
            setattr(dist, name, original)


# The check runs one process, but answers dist.get_world_size() with 2, so a loss divided by
# the world size (DDP divides already) shows up as half the gradient.
PRETENDED_WORLD_SIZE = 2


def _ddp_problem(spec):
    ensure_single_process_group()
    model = tiny_mlp(in_features=5, hidden=7, depth=2, seed=spec["seed"], dtype=torch.float64)
    n, micro = spec["accum_steps"], spec["micro_batch_size"]
    inputs, targets = make_regression(
        n * micro, in_features=5, seed=spec["seed"] + 1, dtype=torch.float64
    )
    ddp = nn.parallel.DistributedDataParallel(model)
    return ddp, split_micro_batches(inputs, targets, micro)


def _last_micro_batch_gradient(spec) -> list[float]:
    """The gradient when only the last micro-batch's counts (zero_grad inside the loop)."""
    model = tiny_mlp(in_features=5, hidden=7, depth=2, seed=spec["seed"], dtype=torch.float64)
    n, micro = spec["accum_steps"], spec["micro_batch_size"]
    inputs, targets = make_regression(
        n * micro, in_features=5, seed=spec["seed"] + 1, dtype=torch.float64
    )
    last_inputs, last_targets = split_micro_batches(inputs, targets, micro)[-1]
    (nn.MSELoss()(model(last_inputs), last_targets) / n).backward()
    return flat_gradient(model.parameters()).tolist()


DDP_MISTAKES = {
    "no_sync_missing": (
        "DDP all-reduced the gradients after every micro-batch ({syncs} times for {n}): "
        "no_sync() was never used. Run forward and backward of every micro-batch but the last "
        "inside `with model.no_sync():`, so the gradients are all-reduced once."
    ),
    "forward_outside_no_sync": (
        "DDP still all-reduced after every micro-batch ({syncs} times for {n}): the forward "
        "pass ran outside no_sync(). DDP decides during the forward whether the backward will "
        "synchronise (its docs: 'The forward pass should be included inside the context "
        "manager, or else gradients will still be synchronized'). Put forward and backward "
        "inside."
    ),
    "off_by_one_boundary": (
        "The gradients were all-reduced {times}during micro-batch{es} {at} of {n}: {after}"
        "Synchronise on the last micro-batch only, once."
    ),
    "never_synced": (
        "The gradients were never all-reduced: every micro-batch ran inside no_sync(), so each "
        "rank would step on its own gradients and the replicas drift apart. Run the last "
        "micro-batch outside no_sync()."
    ),
}


@register
class DdpWindow(Question):
    name = "ddp_window"
    module = MODULE
    points = 4
    # coursekit code that answers it under other names (flagged when called for it)
    library_answers = (
        "coursekit.checks.module04.ddp_memory.right_window",
        "coursekit.noise_scale._accumulate",
        "coursekit.checks.window_memory._honest_warm_up",
    )
    rules = (
        Rule(
            "the gradients all-reduced exactly once, in the last micro-batch's backward",
            "every spec but the memory test: a communication hook counts the all-reduces",
            (
                "no_sync_missing",
                "forward_outside_no_sync",
                "off_by_one_boundary",
                "never_synced",
                "ddp_bypassed",
                "synced_by_hand",
                "synced_twice",
                "enumerate_from_one",
            ),
            lambda spec: spec["accum_steps"] > 1 and not is_memory_spec(spec),
        ),
        Rule(
            "Run each micro-batch's forward and backward through `model`, one at a time",
            "the memory test: 16 micro-batches on a 4,096-wide model in DDP, the memory the "
            "call takes counted by the kernel (ddp_memory.py)",
            ("whole_window_elsewhere",),
            is_memory_spec,
        ),
        Rule(
            "and `micro_batches` left as it was given",
            "every spec but the memory test: the list is compared after the call",
            ("popped_last_micro_batch", "divided_by_count_after_pop"),
            lambda spec: not is_memory_spec(spec),
        ),
        Rule(
            "DDP already averages over the processes, so divide only by the number of "
            "micro-batches",
            "every spec but the memory test (one process there): get_world_size() answers 2",
            ("loss_not_divided", "divided_by_world_size", "float32_scale", "zero_grad_inside_loop"),
            lambda spec: not is_memory_spec(spec),
        ),
    )

    def public_specs(self):
        return [
            {"seed": 1, "accum_steps": 4, "micro_batch_size": 3},
            {"seed": 2, "accum_steps": 2, "micro_batch_size": 5},
            {"seed": 3, "accum_steps": 1, "micro_batch_size": 4},
        ]

    def hidden_specs(self, rng):
        # One drawn window (each spec builds a DDP model: the costly part), a fixed one and
        # the memory test.
        return [
            {
                "seed": rng.randrange(10**6),
                "accum_steps": rng.randint(4, 8),
                "micro_batch_size": rng.randint(2, 6),
            }
        ] + [
            # Fixed: 1/3 is not a float32 number, so a scale rounded to float32
            # (torch.tensor(1 / n)) shows; the public windows (4, 2, 1) are powers of two.
            {"seed": 7, "accum_steps": 3, "micro_batch_size": 2},
            # the memory test: the wide model in DDP (ddp_memory.py), its fresh memory
            # counted by the kernel
            memory_spec(rng.randrange(10**6)),
        ]

    def memory_call(self, fn) -> tuple:
        """How the memory test calls ``fn`` (on the wide model, wrapped in DDP), and the
        right answer its warm-up runs (:func:`coursekit.checks.window_memory.run_measured`)."""
        made: dict = {}  # the wrapper the warm-up makes, handed to the call
        return (
            in_ddp(fn, made, PRETENDED_WORLD_SIZE),
            warm_up_in_ddp(made, PRETENDED_WORLD_SIZE),
        )

    def run(self, fn, spec):
        if is_memory_spec(spec):
            return run_measured(spec, *self.memory_call(fn))
        ddp, micro_batches = _ddp_problem(spec)
        given = [tensor for pair in micro_batches for tensor in pair]
        snapshot = [tensor.clone() for tensor in given]
        n_samples = sum(len(inputs) for inputs, _ in micro_batches)
        watch = _SyncWatch(ddp)
        backward = Watch(ddp.module)
        start = weights_of(ddp.module)
        real_world_size = dist.get_world_size

        def pretend_two(group=None):  # DDP asks about its own group: it gets the truth
            return PRETENDED_WORLD_SIZE if group is None else real_world_size(group)

        dist.get_world_size = pretend_two
        kept = Kept((ddp,))
        try:
            with _ByHand() as by_hand:
                watched((watch, backward, by_hand), fn, ddp, nn.MSELoss(), micro_batches)
        finally:
            dist.get_world_size = real_world_size
        return {
            **kept.report(),
            "ddp_forwards": watch.ddp_forwards,
            "forwards": watch.forwards,
            "collectives_by_hand": len(by_hand.sink.events),
            "grad": tensor_list(flat_gradient(ddp.module.parameters())),
            "sync_at": watch.sync_at,
            "no_sync_entries": watch.no_sync_entries,
            "forwards_inside_no_sync": watch.forwards_inside_no_sync,
            "largest_forward": max(backward.forward_sizes, default=0),
            "backward_passes": backward.backward_passes,
            "weights_moved": weights_of(ddp.module) != start,
            "instruments": combined(watch.verdict(), backward.verdict(samples=n_samples)),
            "micro_batches_left": len(micro_batches),
            "inputs_changed": any(
                not torch.equal(a, b) for a, b in zip(given, snapshot, strict=True)
            ),
        }

    def reference(self):
        return reference_ddp_window

    def judge(self, spec, outputs, expected):
        if is_memory_spec(spec):
            return judge_memory(spec, outputs, expected)
        n, micro = spec["accum_steps"], spec["micro_batch_size"]
        setting = f"({n} micro-batches of {micro})"
        judge_left_behind(outputs, setting)
        judge_instruments(outputs, setting, bypass=False)
        judge_micro_batches_and_weights(outputs, micro, setting)
        ddp_forwards, forwards = outputs.get("ddp_forwards"), outputs.get("forwards")
        if isinstance(ddp_forwards, int) and isinstance(forwards, int) and ddp_forwards < forwards:
            raise Failure(
                f"{forwards - ddp_forwards} of {forwards} forward passes called model.module "
                "directly, around DDP: only a forward through the DDP model can set up the "
                f"gradient synchronisation. Call model(inputs) {setting}.",
                "ddp_bypassed",
            )
        if outputs.get("collectives_by_hand"):
            raise Failure(
                "You called torch.distributed collectives yourself. DDP does it for you, "
                "bucket by bucket while the last backward runs (overlapping with it): run "
                f"the last micro-batch outside no_sync() and let DDP all-reduce {setting}.",
                "synced_by_hand",
            )
        sync_at = outputs.get("sync_at")
        if isinstance(sync_at, list) and all(type(s) is int for s in sync_at):
            mistake = self._sync_mistake(outputs, sync_at, n)
            if mistake:
                message = DDP_MISTAKES[mistake].format(
                    syncs=len(sync_at),
                    n=n,
                    times="once, but " if len(sync_at) == 1 else f"{len(sync_at)} times, ",
                    es="" if len(sync_at) == 1 else "es",
                    at=", ".join(str(s) for s in sync_at),
                    after=(
                        "every micro-batch after it added local gradients that the other "
                        "ranks never see. "
                        if sync_at and sync_at[-1] < n
                        else "each extra all-reduce is communication no_sync() should save. "
                    ),
                )
                raise Failure(f"{message} {setting}", mistake)
        require_gradient(outputs)
        actual = number_list(outputs, "grad", "a gradient for every parameter")
        wanted = expected["grad"]
        if relative_gap(actual, wanted) > 1e-10:
            k = scale_of(actual, wanted)
            if k is not None and abs(k * PRETENDED_WORLD_SIZE - 1) < 1e-6:
                raise Failure(
                    "Your gradient is half the window's mean: the check told your code "
                    f"dist.get_world_size() = {PRETENDED_WORLD_SIZE}, and you divided by it. "
                    "DDP already averages over the processes (its all-reduce divides by the "
                    f"world size): divide only by the number of micro-batches {setting}.",
                    "divided_by_world_size",
                )
            if k is not None and abs(k - n) < 1e-6 and n > 1:
                raise Failure(
                    f"Your gradient is {n} times the window's mean: divide each micro-batch's "
                    f"loss by the number of micro-batches {setting}.",
                    "loss_not_divided",
                )
            if n > 1 and relative_gap(actual, _last_micro_batch_gradient(spec)) <= 1e-9:
                raise Failure(
                    "Your gradient is the last micro-batch's alone: the gradients of the "
                    "others were cleared (zero_grad inside the loop?). Gradients must add up "
                    f"over the window; clear them only before it {setting}.",
                    "zero_grad_inside_loop",
                )
            if k is not None:
                rounded = (
                    f" (as a Python number: a float32 tensor rounds 1/{n})"
                    if abs(k - 1) < 1e-6
                    else ""
                )
                raise Failure(
                    f"The synchronisation is right, but your gradient is {k:.10g} times the "
                    f"window's mean: divide each micro-batch's loss by exactly {n}, the number "
                    f"of micro-batches{rounded} {setting}."
                )
            gap = f"differs from the window's mean gradient by {relative_gap(actual, wanted):.2e}"
            left = outputs.get("micro_batches_left")
            if left != expected["micro_batches_left"]:
                raise Failure(
                    f"The synchronisation is right, but the gradient {gap} (relative), and "
                    f"the list of micro-batches you were given now holds {left} of {n}: a "
                    "length read after popping counts one fewer. Read the micro-batches; do "
                    f"not pop or remove them {setting}.",
                    "inputs_changed",
                )
            raise Failure(
                f"The synchronisation is right, but the gradient {gap} (relative) {setting}."
            )
        judge_instruments(outputs, setting)
        passes = outputs.get("backward_passes")
        if isinstance(passes, int) and passes < n:
            raise Failure("The gradient is right, but " + SINGLE_BACKWARD, "single_backward")
        left = outputs.get("micro_batches_left")
        if left != expected["micro_batches_left"] or outputs.get("inputs_changed") is not False:
            raise Failure(
                f"The gradient is right, but your function changed the micro-batches it was "
                f"given (the list now holds {left} of {n}, or a tensor in it changed): the "
                "training loop still needs them, e.g. to log or re-run the window. Read them; "
                f"do not pop, reorder or modify them in place {setting}.",
                "inputs_changed",
            )

    @staticmethod
    def _sync_mistake(outputs, sync_at: list[int], n: int) -> str | None:
        if not sync_at:
            return "never_synced"
        if len(sync_at) == 1:
            return None if sync_at[0] == n else "off_by_one_boundary"
        if outputs.get("no_sync_entries") == 0:
            return "no_sync_missing"
        if outputs.get("forwards_inside_no_sync") == 0:
            return "forward_outside_no_sync"
        return "no_sync_missing" if len(sync_at) >= n else "off_by_one_boundary"
