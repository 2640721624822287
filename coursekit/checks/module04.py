"""Checks for module 4 (04_distributed): batch arithmetic, DDP's no_sync, ZeRO memory.

``ddp_window`` runs in this process, in a one-process gloo group: with one process DDP's
all-reduce is a copy, but DDP still decides when it would communicate, and that is what a
communication hook counts. The notebook then runs the same function on two processes.
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
from coursekit.checks.question import Failure, Question, number_list, relative_gap, scale_of
from coursekit.checks.registry import register
from coursekit.data import make_regression, split_micro_batches
from coursekit.distributed import CollectiveCounter, ensure_single_process_group
from coursekit.gradients import flat_gradient
from coursekit.models import tiny_mlp
from coursekit.workers.distributed import reference_ddp_window
from coursekit.zero import resolve_batch_config, zero_bytes_per_device

MODULE = "04_distributed"

# ---------------------------------------------------------------- resolve_batch_config

_SETTINGS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")


def _reference_resolve(world_size, train_batch_size=None, micro=None, accum=None):
    config = resolve_batch_config(world_size, train_batch_size, micro, accum)
    return (
        config.train_batch_size,
        config.train_micro_batch_size_per_gpu,
        config.gradient_accumulation_steps,
    )


def _case(world_size, total=None, micro=None, accum=None, label=""):
    return {"world_size": world_size, "given": [total, micro, accum], "label": label}


def _resolves_without_world(world, total, micro, accum, outputs) -> bool:
    """Whether the answer is the one-device answer to settings that do not fit ``world``."""
    try:
        return outputs.get("answer") == list(_reference_resolve(1, total, micro, accum))
    except ValueError:
        return False


@register
class ResolveBatchConfig(Question):
    name = "resolve_batch_config"
    module = MODULE
    points = 2

    def public_specs(self):
        return [
            _case(4, 256, 8, None, "total and micro-batch given"),
            _case(4, 256, None, 8, "total and accumulation given"),
            _case(8, None, 4, 2, "micro-batch and accumulation given"),
            _case(2, 64, 8, 4, "all three, consistent"),
            _case(4, 128, 8, 8, "all three, inconsistent"),
            _case(4, 100, 8, None, "a total that does not divide"),
            _case(4, 100, None, 8, "a total that does not divide, micro-batch missing"),
            _case(4, 256, None, None, "only one given"),
        ]

    def hidden_specs(self, rng):
        world, micro, accum = rng.choice([2, 4, 8, 16]), rng.randint(1, 16), rng.randint(1, 16)
        total = world * micro * accum
        return [
            _case(world, total, micro, None, "drawn: accumulation missing"),
            _case(world, total, None, accum, "drawn: micro-batch missing"),
            _case(world, total + world, micro, accum, "drawn: inconsistent"),
            _case(world, total + 1, None, accum, "drawn: does not divide"),
            _case(world, None, micro, None, "drawn: only one given"),
            # Fixed: 60 is a multiple of 6 but not of 6 x 4, so a remainder check that
            # leaves out the world size lets it through.
            _case(4, 60, None, 6, "a total that divides by the accumulation steps only"),
            _case(4, 60, 6, None, "a total that divides by the micro-batch only"),
        ]

    def run(self, fn, spec):
        total, micro, accum = spec["given"]
        try:
            answer = fn(spec["world_size"], total, micro, accum)
        except NotImplementedError:
            raise
        except Exception as exc:  # which exception is part of the answer
            kind = "ValueError" if isinstance(exc, ValueError) else type(exc).__name__
            return {"raised": kind, "message": str(exc)[:300]}
        try:
            return {
                "answer": [int(v) for v in answer],
                "floats": any(isinstance(v, float) for v in answer),
            }
        except (TypeError, ValueError):
            return {"answer": repr(answer)[:200]}

    def reference(self):
        return _reference_resolve

    def judge(self, spec, outputs, expected):
        world = spec["world_size"]
        total, micro, accum = spec["given"]
        setting = (
            f"({spec['label']}: world_size={world}, train_batch_size={total}, "
            f"train_micro_batch_size_per_gpu={micro}, gradient_accumulation_steps={accum})"
        )
        raised = outputs.get("raised")
        if "raised" in expected:
            if raised == "ValueError":
                message = str(outputs.get("message", ""))
                says_something = len(message) >= 20 or (
                    len(message) >= 5 and any(c.isdigit() for c in message)
                )
                if not says_something:
                    raise Failure(
                        f"You raised ValueError, but its message ({message!r}) does not say what "
                        f"is wrong: name the settings or show the numbers {setting}.",
                        "message_too_short",
                    )
                return
            if raised:
                raise Failure(
                    f"Raise ValueError for settings that do not fit together; you raised "
                    f"{raised} {setting}.",
                    "wrong_exception",
                )
            mistake = "inconsistent_accepted" if None not in spec["given"] else "remainder_ignored"
            if spec["given"].count(None) > 1:
                mistake = "too_few_accepted"
            elif world > 1 and _resolves_without_world(world, total, micro, accum, outputs):
                raise Failure(
                    f"You returned {tuple(outputs['answer'])}: that is the answer for one "
                    "device. With the world size in the arithmetic these settings do not "
                    "divide: raise ValueError. train_batch_size = micro-batch x accumulation "
                    f"steps x world_size {setting}.",
                    "world_size_ignored",
                )
            raise Failure(
                f"These settings cannot all hold, and you returned {outputs.get('answer')}: "
                f"raise ValueError with a message that shows the arithmetic {setting}.",
                mistake,
            )
        if raised:
            raise Failure(
                f"You raised {raised} ({outputs.get('message', '')[:120]}), but the settings fit "
                f"together: expected {tuple(expected['answer'])} {setting}."
            )
        answer = outputs.get("answer")
        if answer == expected["answer"]:
            if outputs.get("floats") is True:
                raise Failure(
                    f"The numbers are right, but some are floats (e.g. 8.0): batch sizes and "
                    "step counts are whole numbers, and range() or DataLoader(batch_size=...) "
                    f"refuse floats. Use // and return ints {setting}.",
                    "not_integers",
                )
            return
        if isinstance(answer, list) and len(answer) == 3:
            without_world = _reference_resolve(1, total, micro, accum) if world > 1 else None
            if without_world is not None and answer == list(without_world):
                raise Failure(
                    f"You returned {tuple(answer)}: the world size is missing from the "
                    "arithmetic. train_batch_size = micro-batch x accumulation steps x "
                    f"world_size {setting}.",
                    "world_size_ignored",
                )
            if sorted(answer) == sorted(expected["answer"]):
                raise Failure(
                    f"You returned {tuple(answer)}: the right numbers in the wrong order. "
                    "Return (train_batch_size, train_micro_batch_size_per_gpu, "
                    f"gradient_accumulation_steps) {setting}.",
                    "wrong_order",
                )
        raise Failure(
            f"Expected (train_batch_size, train_micro_batch_size_per_gpu, "
            f"gradient_accumulation_steps) = {tuple(expected['answer'])}; got {answer} {setting}."
        )


# ---------------------------------------------------------------- ddp_window


class _SyncWatch:
    """Counts DDP's synchronisations, the micro-batch each happened in, and no_sync use."""

    def __init__(self, ddp: nn.parallel.DistributedDataParallel):
        self.counter = CollectiveCounter()
        self.forwards = 0  # of the model inside DDP: the micro-batches, however they ran
        self.ddp_forwards = 0  # through the DDP wrapper, which alone can synchronise
        self.forwards_inside_no_sync = 0
        self.no_sync_entries = 0
        self.sync_at: list[int] = []
        ddp.register_comm_hook(None, self._hook)
        ddp.register_forward_pre_hook(self._ddp_forward)
        ddp.module.register_forward_pre_hook(self._forward)
        original = ddp.no_sync

        def counted_no_sync(*args, **kwargs):
            self.no_sync_entries += 1
            return original(*args, **kwargs)

        ddp.no_sync = counted_no_sync
        self.ddp = ddp

    def _ddp_forward(self, _module, _args) -> None:
        self.ddp_forwards += 1
        if not self.ddp.require_backward_grad_sync:
            self.forwards_inside_no_sync += 1

    def _forward(self, _module, _args) -> None:
        self.forwards += 1

    def _hook(self, state, bucket):
        self.sync_at.append(self.forwards)
        return self.counter.ddp_hook(state, bucket)


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

    def public_specs(self):
        return [
            {"seed": 1, "accum_steps": 4, "micro_batch_size": 3},
            {"seed": 2, "accum_steps": 2, "micro_batch_size": 5},
            {"seed": 3, "accum_steps": 1, "micro_batch_size": 4},
        ]

    def hidden_specs(self, rng):
        # One drawn window (each spec builds a DDP model: the costly part) and a fixed one.
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
        ]

    def run(self, fn, spec):
        ddp, micro_batches = _ddp_problem(spec)
        given = [tensor for pair in micro_batches for tensor in pair]
        snapshot = [tensor.clone() for tensor in given]
        watch = _SyncWatch(ddp)
        backward = Watch(ddp.module)
        start = weights_of(ddp.module)
        real_world_size = dist.get_world_size

        def pretend_two(group=None):  # DDP asks about its own group: it gets the truth
            return PRETENDED_WORLD_SIZE if group is None else real_world_size(group)

        dist.get_world_size = pretend_two
        try:
            with CollectiveCounter() as by_hand:
                fn(ddp, nn.MSELoss(), micro_batches)
        finally:
            dist.get_world_size = real_world_size
        return {
            "ddp_forwards": watch.ddp_forwards,
            "forwards": watch.forwards,
            "collectives_by_hand": sum(by_hand.calls.values()),
            "grad": tensor_list(flat_gradient(ddp.module.parameters())),
            "sync_at": watch.sync_at,
            "no_sync_entries": watch.no_sync_entries,
            "forwards_inside_no_sync": watch.forwards_inside_no_sync,
            "largest_forward": max(backward.forward_sizes, default=0),
            "backward_passes": backward.backward_passes,
            "weights_moved": weights_of(ddp.module) != start,
            "micro_batches_left": len(micro_batches),
            "inputs_changed": any(
                not torch.equal(a, b) for a, b in zip(given, snapshot, strict=True)
            ),
        }

    def reference(self):
        return reference_ddp_window

    def judge(self, spec, outputs, expected):
        n, micro = spec["accum_steps"], spec["micro_batch_size"]
        setting = f"({n} micro-batches of {micro})"
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
            raise Failure(
                f"The synchronisation is right, but the gradient differs from the window's "
                f"mean gradient by {relative_gap(actual, wanted):.2e} (relative) {setting}."
            )
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


# ---------------------------------------------------------------- zero_memory


def _zero_patterns(psi: float, stage: int, nd: int) -> dict[str, float]:
    """What the usual slips compute, to name them."""
    return {
        "world_size_ignored": 16 * psi,
        "everything_sharded": 16 * psi / nd if stage else 16 * psi,
        "fp32_master_weights_forgotten": zero_bytes_per_device(psi, stage, nd, k=8),
        "stages_shifted": zero_bytes_per_device(psi, min(stage + 1, 3), nd),
        "stages_not_cumulative": _one_part_sharded(psi, stage, nd),
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

    def public_specs(self):
        return [{"n_parameters": 7.5e9, "stage": stage, "world_size": 64} for stage in range(4)] + [
            {"n_parameters": 1e9, "stage": 2, "world_size": 1}
        ]

    def hidden_specs(self, rng):
        psi = rng.choice([1.3e8, 3.5e9, 7e10])
        world = rng.choice([2, 8, 32, 256])
        return [{"n_parameters": psi, "stage": stage, "world_size": world} for stage in (1, 2, 3)]

    def run(self, fn, spec):
        answer = fn(spec["n_parameters"], spec["stage"], spec["world_size"])
        try:
            return {"bytes": float(answer)}
        except (TypeError, ValueError):
            return {"bytes": repr(answer)[:100]}

    def reference(self):
        return zero_bytes_per_device

    def judge(self, spec, outputs, expected):
        psi, stage, nd = spec["n_parameters"], spec["stage"], spec["world_size"]
        setting = f"({psi:.3g} parameters, stage {stage}, {nd} devices)"
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
