"""``global_token_scale``: the loss scale from the token count of every data-parallel rank.

``global_token_scale`` runs in one process, in a one-process gloo group, but the check plays
the other ranks: while the student's function runs, ``torch.distributed.all_reduce`` adds the
other ranks' token counts (their totals, or their per-micro-batch counts for a tensor of
those) and ``get_world_size`` answers their number. An ``async_op=True`` all_reduce returns
work whose sum lands in the tensor only when it is waited for, as on real ranks, so a tensor
read without ``wait()`` still holds this rank's own count. The scale it returns is compared
with ``world_size / global_count``; a wrong one is matched against the known mistakes, the
transformers #34242 one (each rank's own count) first.
"""

from __future__ import annotations

import numbers

import torch
import torch.distributed as dist

from coursekit.checks.module02.common import MODULE
from coursekit.checks.question import Failure, Question, Rule
from coursekit.checks.registry import register
from coursekit.checks.side_effects import Kept, judge_left_behind
from coursekit.checks.tamper_evident import Sink, poke, watched
from coursekit.distributed import ensure_single_process_group
from coursekit.tokens import global_token_scale

TOLERANCE = 1e-6  # counts in float32 are exact below 2**24, but an average of them rounds

RANK_MISTAKES = {
    "micro_batches_counted": (
        "that is world_size / the number of micro-batches on all ranks ({world} / "
        "{micro_batches}), not / the number of real tokens ({total}). Sum the token counts "
        "of local_token_counts, not their number."
    ),
    "integer_division": (
        "that is world_size // global count, an integer division ({world} // {total}). "
        "Divide with /."
    ),
    "token_count_not_summed_across_ranks": (
        "that is world_size / this rank's own count ({local} tokens). Each rank would weight "
        "its tokens by its own count: the mean of means again, across ranks "
        "(transformers #34242). all_reduce this rank's count first, so every rank divides by "
        "all {total} tokens of the window."
    ),
    "world_size_not_multiplied": (
        "that is 1 / the global count. DDP then averages the {world} ranks' gradients, "
        "dividing by {world} once more: multiply by dist.get_world_size() to undo that."
    ),
    "divided_by_world_size": (
        "that divides by the world size where it should multiply: DDP's averaging already "
        "divides by {world}, so the scale is world_size / global count."
    ),
    "averaged_not_summed": (
        "the count was averaged over the ranks (ReduceOp.AVG, or the sum divided by the world "
        "size), and then multiplied by the world size too: divide by the summed count, "
        "{total}, and multiply by {world} once."
    ),
    "own_count_alone": (
        "that is 1 / this rank's own count ({local} tokens): the other ranks' tokens are "
        "missing (transformers #34242), and DDP's averaging over {world} ranks is not undone. "
        "all_reduce the count, then return world_size / the global count."
    ),
    "scale_per_micro_batch": (
        "that uses one micro-batch's count. Every micro-batch of the window is divided by the "
        "same count, the whole window's on all ranks."
    ),
}


def _combine(op_name: str, every: torch.Tensor, world: int) -> torch.Tensor:
    if op_name in ("SUM", "AVG"):
        return every.sum(0) / (world if op_name == "AVG" else 1)
    if op_name == "MAX":
        return every.max(0).values
    if op_name == "MIN":
        return every.min(0).values
    return every.prod(0)


class _Work:
    """What ``all_reduce(..., async_op=True)`` returns here. As on real ranks, the sum is in
    the tensor only once the work is waited for (``wait``, ``get_future().wait()``, or
    ``is_completed()`` polled until True): read before that, the tensor still holds this
    rank's own value, so a collective never awaited shows."""

    def __init__(self, tensor: torch.Tensor, result: torch.Tensor):
        self.tensor, self.result, self.done = tensor, result, False

    def _complete(self) -> None:
        if not self.done:
            self.done = True
            with torch.no_grad():
                self.tensor.copy_(self.result.to(self.tensor.dtype))

    def wait(self, timeout=None) -> bool:
        self._complete()
        return True

    synchronize = wait

    def is_completed(self) -> bool:
        self._complete()  # a rank polling until done reads the sum after this
        return True

    def is_success(self) -> bool:
        return self.is_completed()

    def result(self) -> list[torch.Tensor]:
        self._complete()
        return [self.tensor]

    def get_future(self) -> torch.futures.Future:
        future: torch.futures.Future = torch.futures.Future()
        self._complete()
        future.set_result([self.tensor])
        return future


class _Done:
    """What ``all_reduce(..., async_op=True)`` returns to a played rank: nothing to wait for."""

    def wait(self, timeout=None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True


class _CallSink(Sink):
    """This rank's all_reduce calls, each read from the call in progress of the function the
    check puts behind ``dist.all_reduce`` (the poke must come straight from it, for these
    played ranks): the op and what this rank sent. The student's code reaches the played
    ranks, never this."""

    def __init__(self, played):
        super().__init__()
        self.played, self._code = played, _ALL_REDUCE

    def accept(self, *_payload) -> None:
        frame = self._getframe(2)
        if frame.f_code is not self._code or frame.f_locals.get("_played") is not self.played:
            return
        tensor = frame.f_locals.get("tensor")
        if self.played._recording is None and self._is_tensor(tensor):
            op = str(frame.f_locals.get("op")).rpartition(".")[2]
            self.events.append((op, tensor.detach().to(torch.float64).flatten().tolist()))


def _counted_all_reduce(played, token):
    """``dist.all_reduce`` while the check plays the other ranks: ``played``'s, after a poke
    of the sink that counts this rank's calls (what it calls is bound now)."""

    def all_reduce(
        tensor,
        op=dist.ReduceOp.SUM,
        group=None,
        async_op=False,
        _played=played,
        _token=token,
        _send=poke,
    ):
        _send(_token)
        return _played.all_reduce(tensor, op, group, async_op)

    return all_reduce


_ALL_REDUCE = next(
    c for c in _counted_all_reduce.__code__.co_consts if getattr(c, "co_name", "") == "all_reduce"
)


class _Calls:
    """The instrument :func:`coursekit.checks.tamper_evident.watched` holds: the sink of
    this rank's all_reduce calls (none without other ranks to play), and the function put
    behind ``dist.all_reduce``."""

    def __init__(self, played):
        self.sinks = [] if played is None else [_CallSink(played)]
        self.all_reduce = None
        if played is not None:
            self.all_reduce = _counted_all_reduce(played, self.sinks[0].token)

    @property
    def ops(self) -> list[str]:
        return [op for sink in self.sinks for op, _ in sink.events]

    @property
    def sent(self) -> list[list[float]]:
        return [sent for sink in self.sinks for _, sent in sink.events]


class _PlayedRanks:
    """Stands in for ``all_reduce`` and ``get_world_size`` while the student's code runs.

    The other ranks run the same function on their own counts: first each of them, with an
    ``all_reduce`` that records what it contributes, then this rank, whose k-th
    ``all_reduce`` combines its tensor with the others' k-th contributions. (A function whose
    second collective depends on the first's result is played approximately.)
    """

    def __init__(self, world: int):
        self.world = world
        self.recorded: list[list[torch.Tensor]] = []  # per other rank, per call
        self.calls: list[str] = []  # this rank's all_reduce ops, in order
        self.sent: list[list[float]] = []  # and what this rank contributed to each
        self._recording: list[torch.Tensor] | None = None
        self.works: list[_Work] = []  # this rank's async works, to see which were awaited

    def record(self, function, counts: list[int]) -> None:
        self._recording = []
        try:
            function(list(counts))
        except Exception:  # the same code on this rank's counts will say what is wrong
            pass
        finally:
            self.recorded.append(self._recording)
            self._recording = None

    def all_reduce(self, tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        if not torch.is_tensor(tensor):
            raise TypeError(
                f"all_reduce needs a tensor (it changes it in place); got {type(tensor).__name__}."
            )
        mine = tensor.detach().to(torch.float64).clone()
        if self._recording is not None:
            self._recording.append(mine)
            return _Done() if async_op else None
        index = len(self.calls)
        self.calls.append(str(op).rpartition(".")[2])
        self.sent.append(mine.flatten().tolist())
        theirs = [calls[index] for calls in self.recorded if index < len(calls)]
        if len(theirs) < len(self.recorded) or any(t.shape != mine.shape for t in theirs):
            raise RuntimeError(
                "The ranks disagree about this all_reduce: with the other ranks' counts your "
                "function made different collectives (every rank must make the same calls, "
                "with tensors of the same shape, or the job hangs)."
            )
        every = torch.stack([mine, *theirs])
        result = _combine(self.calls[-1], every, self.world)
        if async_op:  # the sum lands when the work is waited for
            work = _Work(tensor, result)
            self.works.append(work)
            return work
        with torch.no_grad():
            tensor.copy_(result.to(tensor.dtype))
        return None

    def get_world_size(self, group=None):
        return self.world


def _scale_patterns(counts: list[int], others: list[list[int]]) -> list[tuple[str, str, float]]:
    """(message, mistake name, the scale it gives) for each known slip."""
    world = 1 + len(others)
    local = sum(counts)
    total = local + sum(sum(c) for c in others)
    patterns = [
        ("world_size_not_multiplied", "world_size_not_multiplied", 1 / total),
        ("divided_by_world_size", "divided_by_world_size", 1 / (total * world)),
        ("averaged_not_summed", "averaged_not_summed", world * world / total),
    ]
    if local:
        mistake = "token_count_not_summed_across_ranks"
        patterns.append((mistake, mistake, world / local))
        patterns.append(("own_count_alone", mistake, 1 / local))
    micro_batches = len(counts) + sum(len(c) for c in others)
    patterns.append(("micro_batches_counted", "micro_batches_counted", world / micro_batches))
    patterns.append(("integer_division", "integer_division", float(world // total)))
    for index in range(len(counts) if len(counts) > 1 else 0):  # one micro-batch's count
        one = counts[index] + sum(c[index] for c in others if index < len(c))
        if one:
            patterns.append(("scale_per_micro_batch", "scale_per_micro_batch", world / one))
    return patterns


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= TOLERANCE * max(abs(b), 1e-300)


@register
class GlobalTokenScale(Question):
    name = "global_token_scale"
    module = MODULE
    points = 2
    rules = (
        Rule(
            "Add them up, sum that total over all ranks with one `dist.all_reduce` of a tensor "
            "(every rank makes the same call, before its first backward)",
            "every spec: the check plays the other ranks and records each all_reduce",
            (
                "all_reduce_not_sum",
                "several_all_reduces",
                "token_count_not_summed_across_ranks",
                "averaged_not_summed",
                "all_reduce_per_micro_batch",
                "own_count_alone",
                "all_reduced_a_copy",
                "async_not_awaited",
                "count_cached",
                "micro_batches_counted",
            ),
        ),
        Rule(
            "return `world_size / global_count` as a float, with `dist.get_world_size()` for "
            "the world size.",
            "every spec (2 to 4 ranks)",
            (
                "world_size_not_multiplied",
                "divided_by_world_size",
                "integer_division",
                "scale_per_micro_batch",
            ),
        ),
        Rule(
            "Call both through `dist`",
            "every spec: functions imported by name escape the ranks the check plays",
            ("functions_imported_by_name",),
        ),
    )

    def public_specs(self):
        return [
            {"counts": [30, 14], "others": [[50, 26]]},  # 2 ranks, 44 and 76 tokens
            {"counts": [12, 9, 3], "others": [[40, 41, 39]]},  # short sequences here
            {"counts": [5, 7], "others": [[9, 1], [3, 3], [8, 8]]},  # 4 ranks
            {"counts": [16], "others": []},  # one process: the world is one rank
            {"counts": [1501, 1702], "others": [[900, 2100]]},  # 6203: too many for 16 bits
        ]

    def hidden_specs(self, rng):
        specs = [{"counts": [0, 6], "others": [[11, 3]]}]  # a micro-batch of padding only
        for _ in range(3):
            n = rng.randint(1, 5)
            world = rng.choice([2, 3, 4, 8])
            specs.append(
                {
                    "counts": [rng.randint(1, 500) for _ in range(n)],
                    "others": [[rng.randint(1, 500) for _ in range(n)] for _ in range(world - 1)],
                }
            )
        return specs

    def run(self, fn, spec):
        ensure_single_process_group()
        others = spec["others"]
        played = _PlayedRanks(1 + len(others)) if others else None
        # The same two functions, under both names a hand-in may call them by.
        modules = (dist, dist.distributed_c10d)
        real = [(m, m.all_reduce, m.get_world_size) for m in modules]
        seen = _Calls(played)  # counts this rank's all_reduce calls, out of the hand-in's reach
        if played is not None:
            for module in modules:
                module.all_reduce, module.get_world_size = seen.all_reduce, played.get_world_size
        try:
            for counts in others:
                played.record(fn, counts)
            counts = list(spec["counts"])
            kept = Kept(local_token_counts=counts)
            try:
                returned = watched((seen,), fn, counts)
            except Exception as error:
                if played is None or played.calls or isinstance(error, NotImplementedError):
                    raise  # a stub stays "not attempted"
                said = (
                    str(error)
                    if type(error) is RuntimeError
                    else f"{type(error).__name__}: {error}"
                )
                raise RuntimeError(
                    f"{said}. (The check plays the other ranks behind "
                    "dist.all_reduce and dist.get_world_size only: sum the count with one "
                    "all_reduce.)"
                ) from None
        finally:
            for module, all_reduce, get_world_size in real:
                module.all_reduce, module.get_world_size = all_reduce, get_world_size
        if torch.is_tensor(returned) and returned.numel() == 1:
            returned = returned.item()
        numeric = isinstance(returned, numbers.Real) and not isinstance(returned, bool)
        if (
            not numeric
            and type(returned).__module__ == "numpy"
            and getattr(returned, "size", 0) == 1
        ):
            numeric = True  # a NumPy scalar or 0-d array: np.float32 is not a numbers.Real
        scale = float(returned) if numeric else None
        return {
            **kept.report(),
            "scale": scale if scale is not None else repr(returned)[:120],
            "all_reduces": seen.ops,
            "all_reduced": seen.sent,
            "not_awaited": sum(not w.done for w in played.works) if played is not None else 0,
            # the played ranks' all_reduce calls: the same function, called just before
            "others_all_reduces": [len(r) for r in played.recorded] if played else [],
        }

    def reference(self):
        return global_token_scale

    @staticmethod
    def _judge_call(outputs, scale: float, wanted: float, setting: str) -> None:
        """A wrong scale explained by this call's collectives: one never awaited, or none
        made where the same function made one for the played ranks just before."""
        waiting = outputs.get("not_awaited")
        if isinstance(waiting, int) and waiting > 0:
            raise Failure(
                f"Your scale is {scale:.6g}, but it should be {wanted:.6g} {setting}: "
                "your all_reduce(..., async_op=True) was never waited for. It returns at once, "
                "and its tensor holds the other ranks' counts only once the work is done: "
                "call work.wait() on what all_reduce returned before reading the tensor (or "
                "drop async_op: nothing else runs meanwhile here).",
                "async_not_awaited",
            )
        others = outputs.get("others_all_reduces")
        calls = outputs.get("all_reduces")
        if (
            calls == []
            and isinstance(others, list)
            and any(isinstance(n, int) and n > 0 for n in others)
        ):
            raise Failure(
                f"Your scale is {scale:.6g}, but it should be {wanted:.6g} {setting}: in this "
                "call your function made no all_reduce, though it made one for the other "
                "ranks' counts just before (the check plays them first, in this process). "
                "Without a collective in this call the scale cannot include this window's "
                "other ranks: a count or scale kept from an earlier call (a global, a cache) "
                "is stale. all_reduce this window's count in every call.",
                "state_across_calls",
            )

    def judge(self, spec, outputs, expected):
        counts, others = spec["counts"], spec["others"]
        world = 1 + len(others)
        local = sum(counts)
        total = local + sum(sum(c) for c in others)
        setting = (
            f"(this rank's micro-batches hold {counts} real tokens; {world} rank"
            f"{'s' if world > 1 else ''}, {total} tokens in all)"
        )
        judge_left_behind(outputs, setting)
        scale = outputs.get("scale")
        if not isinstance(scale, float):
            raise Failure(f"Return the scale as a number; got {scale} {setting}.")
        calls = outputs.get("all_reduces")
        wanted = expected["scale"]
        if _close(scale, wanted):
            if isinstance(calls, list) and len(calls) > 1:
                sent = outputs.get("all_reduced")
                per_micro_batch = sent == [[float(count)] for count in counts]
                raise Failure(
                    f"The scale is right, but you called all_reduce {len(calls)} times"
                    f"{' (once per micro-batch)' if per_micro_batch else ''}: one all_reduce of "
                    "a tensor (this rank's total, its per-micro-batch counts, or every number you "
                    f"need in one tensor) sums them over the ranks in one collective {setting}.",
                    "all_reduce_per_micro_batch" if per_micro_batch else "several_all_reduces",
                )
            return
        self._judge_call(outputs, scale, wanted, setting)
        other_ops = sorted({op for op in calls or [] if op not in ("SUM", "AVG")})
        if other_ops:
            raise Failure(
                f"Your scale is {scale:.6g}, but it should be {wanted:.6g}: all_reduce with "
                f"ReduceOp.{other_ops[0]} does not add the ranks' counts up. Use the default, "
                f"ReduceOp.SUM {setting}.",
                "all_reduce_not_sum",
            )
        micro_batches = len(counts) + sum(len(c) for c in others)
        details = {"local": local, "total": total, "world": world, "micro_batches": micro_batches}
        found = {
            (message, mistake)
            for message, mistake, value in _scale_patterns(counts, others)
            if _close(scale, value) and not _close(value, wanted)
        }
        unseen = ""
        if world > 1 and calls == []:  # e.g. `from torch.distributed import all_reduce`
            unseen = (
                " (The check saw no dist.all_reduce call. It plays the other ranks behind "
                "dist.all_reduce and dist.get_world_size: call them through "
                "`import torch.distributed as dist`.)"
            )
        if len({mistake for _, mistake in found}) == 1:
            message, mistake = sorted(found)[0]
            why = RANK_MISTAKES[message].format(**details)
            raise Failure(f"Your scale is {scale:.6g} {setting}: {why}{unseen}", mistake)
        raise Failure(
            f"Your scale is {scale:.6g}, but it should be world_size / global count = "
            f"{world} / {total} = {wanted:.6g} {setting}.{unseen}"
        )
