"""Module 7's question ``autotune``: probe a card for the largest micro-batch that fits a
budget, then the window that reaches a target effective batch.

The student writes ``autotune(try_step, free_memory, max_memory_gb, target_batch,
world_size=1, margin=0.1)``. Each spec hands it a simulated card
(:mod:`coursekit.real_model.simulated_device`) that runs out of memory above some size, may
fail now and then near its edge, may keep a failed try's memory until it is freed, may raise
an error that is not about memory, and stops a search that never ends. The card logs every
call, so the judge reads what the search did, not only what it returned: a right answer may
probe in any order that finds the largest fit within the card's calls (:func:`probe_budget`:
room for growing then bisecting, as the exercise asks, or for bisecting from the top, but
not for counting down one size at a time), and a flaky card lets two right answers differ. A
mistake is named from the log: more calls than the card allows, a size chosen that failed or
was never run, a size that fitted left unchosen, memory not freed (or freed while the
exception still held it), an error swallowed, the budget or its margin ignored, a window
that misses the target. An answer that raises NotImplementedError is not attempted, on every
spec (the refusals included).
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping

from coursekit.checks.module07.common import (
    MODULE,
    card,
    gib,
    largest_possible,
    limit_bytes,
    probe_budget,
    surely_fits,
)
from coursekit.checks.module07.sealed_card import new_sealed_card
from coursekit.checks.question import Failure, Question, Rule
from coursekit.checks.registry import register
from coursekit.checks.tamper_evident import watched
from coursekit.real_model.simulated_device import ProbingDidNotStop
from coursekit.real_model.tuning import autotune

MAX_LOG = 120  # entries of a card's log sent back: over twice what probe_budget allows


def _spec(label, capacity, base, per_sample_mib, budget, target, world=1, margin=0.1, **more):
    return {
        "label": label,
        "capacity_gib": capacity,
        "base_gib": base,
        "per_sample_mib": per_sample_mib,
        "max_memory_gb": budget,
        "margin": margin,
        "target": target,
        "world": world,
        **more,
    }


def _refusal(spec) -> str | None:
    if spec["target"] % spec["world"]:
        return (
            f"a target batch of {spec['target']} cannot be shared equally by "
            f"{spec['world']} devices"
        )
    if surely_fits(spec) == 0 and largest_possible(spec) == 0:
        return (
            f"not even a micro-batch of 1 fits: its step needs more than the budget of "
            f"{spec['max_memory_gb']:g} GiB less its {spec['margin']:.0%} margin"
        )
    return None


def _whole(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _read(returned) -> dict:
    if not isinstance(returned, Mapping):
        return {"returned": f"{type(returned).__name__}: {repr(returned)[:120]}"}
    sizes = returned.get("micro_batch_sizes")
    try:
        sizes = list(sizes)[:10_000] if not isinstance(sizes, (str, bytes)) else None
    except TypeError:
        sizes = None
    read = {
        "largest_fit": returned.get("largest_fit"),
        "accum_steps": returned.get("accum_steps"),
        "sizes": sizes,
    }
    if not _whole(read["largest_fit"]) or not _whole(read["accum_steps"]) or sizes is None:
        return {"returned": repr(dict(returned))[:200]}
    if not all(_whole(s) for s in sizes):
        return {"returned": repr(dict(returned))[:200]}
    return {
        "largest_fit": int(read["largest_fit"]),
        "accum_steps": int(read["accum_steps"]),
        "sizes": [int(s) for s in sizes],
    }


@register
class Autotune(Question):
    name = "autotune"
    module = MODULE
    points = 4
    rules = (
        Rule(
            "A size **fits** when `try_step` returns and its peak is at most "
            "`max_memory_gb * 2**30 * (1 - margin)` bytes",
            "the cards with a budget below their size, or a margin",
            ("budget_ignored", "margin_ignored", "units_in_gigabytes"),
        ),
        Rule(
            "A device's share of the window is `target_batch // world_size`; no micro-batch is "
            "ever bigger.",
            "the cards where everything fits, and those with several devices",
            ("beyond_share", "world_size_ignored"),
        ),
        Rule(
            "Find the largest size from 1 to the share that fits",
            "every card that runs out of memory below the share",
            ("not_largest", "bisection_off_by_one", "bisection_keeps_wrong_end"),
        ),
        Rule(
            r"the checks' cards allow $2\lceil\log_2(\text{share})\rceil + 4$ calls to "
            "`try_step`",
            "every card: it refuses the call after those",
            ("probing_never_stops", "counting_down"),
        ),
        Rule(
            "After every `torch.OutOfMemoryError`, call `free_memory()` after the `except` "
            "block, before the next try and before returning.",
            "the cards whose failed tries hold memory until it is freed",
            ("nothing_freed", "freed_while_error_alive"),
            lambda spec: spec.get("held_fraction", 0) > 0,
        ),
        Rule(
            "Let every other error propagate.",
            "the cards with a bug that is not about memory",
            ("error_swallowed",),
            lambda spec: spec.get("error_from") is not None,
        ),
        Rule(
            "Never choose a size that failed once.",
            "the cards with a flaky edge",
            ("failed_size_chosen", "flaky_size_retried"),
        ),
        Rule(
            "the window of one device, the fewest micro-batches, none above `b`, that add up to "
            "the share exactly.",
            "every card whose target it can reach",
            ("effective_batch_missed", "window_rounded_up", "too_many_steps"),
        ),
        Rule(
            "Raise a `ValueError` when `target_batch` is not a multiple of `world_size`, or when "
            "not even a micro-batch of 1 fits.",
            "the cards 'a target four devices cannot share' and 'nothing fits'",
            ("nothing_fits_returned_empty", "indivisible_target_accepted"),
            lambda spec: _refusal(spec) is not None,
        ),
    )
    library_answers = ("coursekit.real_model.tuning.tune",)  # the notebook imports it for its demos

    def public_specs(self):
        return [
            # a 16 GiB card tuned to an 8 GiB budget: the budget, not the card, stops it at 17
            _spec("budget below the card", 16, 2.0, 300, 8, 256),
            # the card runs out first; each failure holds half its memory until freed
            _spec("failures hold memory", 8, 1.0, 150, 8, 512, world=2, held_fraction=0.5),
            # sizes near the card's edge fail on some calls only
            _spec("flaky edge", 6, 0.5, 100, 6, 128, margin=0.05, flaky_mib=600, seed=1),
            # every size from 12 up hits a bug in the model's code, not the memory
            _spec("an error that is not about memory", 16, 1.0, 100, 16, 256, error_from=12),
            # everything fits: a device's share of the window is the most worth probing
            _spec("everything fits", 80, 1.0, 10, 80, 48),
            # four devices, and a share (130) that the largest fit (39) does not divide
            _spec("four devices", 24, 3.0, 200, 12, 520, world=4),
            _spec("a target four devices cannot share", 24, 3.0, 200, 12, 250, world=4),
            _spec("nothing fits", 16, 15.0, 100, 16, 64),
        ]

    def hidden_specs(self, rng):
        specs = [
            _spec("failures hold all their memory", 12, 2.0, 90, 12, 384, held_fraction=1.0),
            _spec("bug from 2", 16, 1.0, 100, 16, 256, error_from=2),
            _spec("exactly the budget", 16, 2.0, 256, 6, 96, margin=0.0),  # 16 peaks at 6 GiB
            _spec("one sample fits", 16, 4.0, 4096, 9, 32),
            _spec("odd share", 40, 2.0, 64, 40, 7, world=1),
            *(
                _spec("flaky edge", 6, 0.5, 100, 6, 128, margin=0.05, flaky_mib=600, seed=seed)
                for seed in (6, 9, 11)
            ),
        ]
        for index in range(5):
            capacity = rng.choice([8, 12, 16, 24, 40, 80])
            base = round(rng.uniform(0.05, 0.3) * capacity, 2)
            per_sample = rng.randint(20, 900)
            budget = rng.choice([capacity, round(capacity * rng.uniform(0.4, 0.9), 1)])
            world = rng.choice([1, 1, 2, 4, 8])
            target = world * rng.randint(16, 600)
            more = {"seed": rng.randrange(10**6)}
            if index % 2 == 0:
                more |= {"held_fraction": rng.choice([0.25, 0.5, 1.0])}
            if index == 1:
                more |= {"flaky_mib": rng.randint(200, 1200), "flaky_chance": 0.5}
            specs.append(
                _spec(
                    f"random {index}",
                    capacity,
                    base,
                    per_sample,
                    budget,
                    target,
                    world,
                    margin=rng.choice([0.05, 0.1, 0.15]),
                    **more,
                )
            )
        return specs

    def run(self, fn, spec):
        sink, try_step, free_memory = new_sealed_card(spec)
        device = sink.device  # read after the call: the tuner reaches it through no argument
        args = (
            try_step,
            free_memory,
            spec["max_memory_gb"],
            spec["target"],
            spec["world"],
            spec["margin"],
        )
        del try_step, free_memory
        outputs: dict = {}
        if _refusal(spec) is not None:
            try:
                returned = watched((sink,), fn, *args)
            except NotImplementedError:  # the stub as handed out: not attempted
                raise
            except ProbingDidNotStop:
                outputs = {"stopped": False}
            except Exception as error:  # the refusal is what this spec checks
                outputs = {
                    "raised": type(error).__name__,
                    "value_error": isinstance(error, ValueError),
                }
            else:
                read = _read(returned)
                outputs = {"returned": repr(returned)[:200], "largest_fit": read.get("largest_fit")}
        else:
            try:
                returned = watched((sink,), fn, *args)
            except ProbingDidNotStop:
                outputs = {"stopped": False}
            except Exception as error:
                if spec.get("error_from") is None or isinstance(error, NotImplementedError):
                    raise
                chain = (error, error.__cause__)
                outputs = {
                    "raised": type(error).__name__,
                    "propagated": any(_is_bug(e) for e in chain if e is not None),
                }
            else:
                outputs = _read(returned)
                again = _called_again(fn, spec)
                if again is not None and again != outputs:
                    outputs["again"] = again
        log = device.log
        outputs["calls"] = device.calls
        outputs["log"] = log[:MAX_LOG]
        outputs["log_entries"] = len(log)  # more than sent back: the judge says it is cut
        outputs["held_at_end"] = device.held_bytes
        return outputs

    def reference(self):
        return autotune

    def judge(self, spec, outputs, expected):
        setting = (
            f"(card: {spec['label']}; max_memory_gb {spec['max_memory_gb']:g}, margin "
            f"{spec['margin']:g}, target_batch {spec['target']}, world_size {spec['world']})"
        )
        log = outputs.get("log") or []
        calls, budget = outputs.get("calls"), probe_budget(spec)
        if (
            outputs.get("stopped") is False
            or any(e.get("event") == "stopped" for e in log)
            or (isinstance(calls, int) and calls > budget)
        ):
            tried = [e.get("size") for e in log if e.get("event") in ("ok", "oom")][-6:]
            entries = outputs.get("log_entries")
            said = f"its last sizes were {tried}"
            if isinstance(entries, int) and entries > len(log):
                said = (
                    f"the {len(log)} entries of its log sent back (of {entries}) end with the "
                    f"sizes {tried}"
                )
            share = spec["target"] // spec["world"]
            raise Failure(
                f"Your search called try_step {budget} times, all this card allows for a "
                f"share of {share} (2 x ceil(log2({share})) + 4), and was still probing; "
                f"{said} {setting}. Grow by doubling until a size "
                "fails, then bisect between the last size that fitted and the first that "
                "failed until they are 1 apart: about 2 x log2(share) calls.",
                "too_many_probes",
            )
        reason = _refusal(spec)
        if reason is not None:
            _judge_refusal(outputs, reason, setting, _why_accepted(spec, outputs))
            return
        if spec.get("error_from") is not None:
            _judge_bug(spec, outputs, log, setting)
            return
        if "again" in outputs:
            first = {key: outputs.get(key) for key in ("largest_fit", "accum_steps", "sizes")}
            raise Failure(
                f"Called again on a fresh card like this one {setting}, after a call on "
                f"another card, your function returned {_short(outputs['again'])} instead of "
                f"{_short(first)}: it keeps something between calls (a cache, a global, a "
                "default argument). Each call must probe its own card from scratch.",
                "state_across_calls",
            )
        _judge_result(spec, outputs, log, setting)


def _judge_result(spec, outputs, log, setting):
    """What a search left and returned: memory freed, the largest fit, the window."""
    _judge_freeing(log, outputs.get("held_at_end", 0), setting)
    if "raised" in outputs:
        raise Failure(
            f"Your function raised {outputs['raised']} {setting}, although no size it tried "
            "raised an error that is not about memory: return the plan."
        )
    if "returned" in outputs or "largest_fit" not in outputs:
        raise Failure(
            "Return a dict with largest_fit, accum_steps and micro_batch_sizes (whole "
            f"numbers, and a list of them) {setting}; yours returned {outputs.get('returned')}."
        )
    largest = outputs["largest_fit"]
    _judge_largest(spec, largest, log, setting)
    _judge_window(spec, largest, outputs["accum_steps"], outputs["sizes"], setting)


def _called_again(fn, spec) -> dict | None:
    """What ``fn`` returns on a fresh card like the spec's, after a call on a very different
    card: a function that keeps nothing between calls returns what it returned the first
    time (the cards are alike to their random draws). None when a call fails."""
    roomy = {
        **spec,
        "capacity_gib": 4096,
        "max_memory_gb": 4096,
        "base_gib": 0.01,
        "per_sample_mib": 1,
        "flaky_mib": 0,
        "held_fraction": 0.0,
    }
    try:
        for other in (roomy, spec):
            sink, try_step, free_memory = new_sealed_card(other)
            returned = watched(
                (sink,),
                fn,
                try_step,
                free_memory,
                other["max_memory_gb"],
                other["target"],
                other["world"],
                other["margin"],
            )
    except (Exception, ProbingDidNotStop):  # the first call's verdict says what is wrong
        return None
    return _read(returned)


def _is_bug(error) -> bool:
    return isinstance(error, RuntimeError) and "illegal memory access" in str(error)


def _short(read: dict) -> str:
    if "returned" in read:
        return read["returned"]
    sizes = read.get("sizes") or []
    shown = sizes if len(sizes) <= 8 else [*sizes[:8], "..."]
    return f"largest_fit {read.get('largest_fit')}, micro_batch_sizes {shown}"


def _why_accepted(spec, outputs) -> str | None:
    """The one mistake that explains a plan returned where nothing fits, if one does: the
    chosen size needs no more than the whole budget (the margin left out), or more than
    that but no more than the card (the budget left out); a function that returns no size
    at all never refuses. None where no rule explains the size."""
    largest = outputs.get("largest_fit")
    if spec["target"] % spec["world"] or not _whole(largest) or largest < 1:
        return "bad_input_accepted"
    device, budget = card(spec), spec["max_memory_gb"] * 2**30
    needs = device.needs(largest)
    if needs <= budget:
        return "margin_ignored"
    return "budget_ignored" if needs <= device.capacity_bytes else None


def _judge_refusal(outputs, reason, setting, name="bad_input_accepted"):
    if "raised" not in outputs:
        raise Failure(
            f"{reason[0].upper()}{reason[1:]} {setting}, yet your function returned "
            f"{outputs.get('returned')}. Raise a ValueError that says so.",
            name,
        )
    if outputs.get("value_error") is not True:
        raise Failure(
            f"Right to refuse {setting}: {reason}. But raise a ValueError, not "
            f"{outputs.get('raised')}: a message that says what to change is what the caller "
            "needs, not the out-of-memory error of one probe.",
            "wrong_exception",
        )


def _judge_bug(spec, outputs, log, setting):
    bug = next((e["size"] for e in log if e.get("event") == "error"), None)
    if bug is None:  # the search never reached the faulty sizes: judged as any other card
        _judge_result(spec, outputs, log, setting)
        return
    if outputs.get("propagated") is True:
        return
    what = f"raised {outputs['raised']} instead" if "raised" in outputs else "went on and returned"
    raise Failure(
        f"try_step({bug}) raised RuntimeError: CUDA error: an illegal memory access, which is "
        f"not an out-of-memory error, and your function {what} {setting}. Catch only "
        "torch.OutOfMemoryError (or check the message): any other error is a bug, and treating "
        'it as "too big" hides it behind a smaller batch. Let it propagate.',
        "error_swallowed",
    )


def _judge_freeing(log, held_at_end, setting):
    last_oom, freed_since = None, False
    for entry in [*log, {"event": "end", "held": held_at_end}]:
        event = entry.get("event")
        if event == "oom" and not entry.get("held"):
            last_oom, freed_since = entry["size"], False
        elif event == "free":
            freed_since = True
        elif event in ("ok", "oom", "end") and entry.get("held"):
            when = "before returning" if event == "end" else f"when you tried {entry['size']}"
            if freed_since:
                raise Failure(
                    f"{gib(entry['held'])} from the failed try of {last_oom} was still held "
                    f"{when} {setting}: you called free_memory() while the exception still "
                    "existed (inside the except block, or kept in a variable), and its "
                    "traceback keeps the failed step's tensors alive. Leave the except block "
                    "first, then call free_memory().",
                    "freed_while_error_alive",
                )
            raise Failure(
                f"After try_step({last_oom}) ran out of memory, {gib(entry['held'])} was "
                f"still held {when} {setting}: call free_memory() after every out-of-memory "
                "error, after the except block, before the next try and before returning.",
                "nothing_freed",
            )
        if event == "oom" and entry.get("held"):
            last_oom = entry["size"]


def _judge_largest(spec, largest, log, setting):
    share = spec["target"] // spec["world"]
    limit = limit_bytes(spec)
    tries = [e for e in log if e.get("event") in ("ok", "oom")]
    failed = {e["size"] for e in tries if e["event"] == "oom" or e.get("peak", 0) > limit}
    fitted = {e["size"] for e in tries if e["event"] == "ok" and e["peak"] <= limit} - failed
    if largest > share:
        raise Failure(
            f"Your largest_fit is {largest}, more than a device's share of the window "
            f"({spec['target']} / {spec['world']} = {share}) {setting}: a micro-batch is never "
            "bigger than that, so stop probing there.",
            "beyond_share",
        )
    if largest < 1 or largest not in {e["size"] for e in tries}:
        raise Failure(
            f"Your largest_fit is {largest}, a size your search never ran {setting}. Choose "
            "a size whose try_step ran, and stayed within the budget less its margin.",
            "untried_size_chosen",
        )
    peaks = [e["peak"] for e in tries if e["size"] == largest and e["event"] == "ok"]
    if largest in failed and peaks and max(peaks) > limit:
        _over_limit(spec, largest, max(peaks), share, setting)
    if largest in failed:
        raise Failure(
            f"Micro-batch {largest} ran out of memory on one of your tries {setting}. A size "
            "that failed once will fail again during training: never choose it (a bisection "
            "returns the last size that fitted, not the first that failed).",
            "failed_size_chosen",
        )
    if largest >= share:
        return
    following = largest + 1
    sure = min(surely_fits(spec), share)
    best = max([sure, *(size for size in fitted if size <= share)])
    if following in fitted:
        peak = max(e["peak"] for e in tries if e["size"] == following)
        raise Failure(
            f"Micro-batch {following} ran and peaked at {gib(peak)}, within the budget less "
            f"its margin ({gib(limit)}), yet your largest_fit is {largest} {setting}. Either "
            "your search did not keep a size that fitted, or it judged this size by something "
            "other than this card's try_step (an answer kept from an earlier call), or your "
            "test of a peak is stricter than peak <= max_memory_gb GiB x (1 - margin), with a "
            "GiB of 2**30 bytes."
        )
    if following in failed or following > sure:
        return  # it failed, or it may fail on some calls (the card's flaky edge)
    above = min((size for size in failed if size > largest), default=None)
    if above == largest + 2:
        raise Failure(
            f"Your search stopped with {largest} fitting and {above} failing, and never tried "
            f"{following} between them, which fits {setting}. Bisect until the size that fits "
            "and the one that fails are 1 apart, and return the one that fits.",
            "bisection_off_by_one",
        )
    raise Failure(
        f"Your largest_fit is {largest}, but every size up to {best} fits {setting}, and your "
        f"search never tried {following}. Grow until a size fails, then bisect between the "
        "last size that fitted and the first that failed: halving or doubling alone skips "
        "the sizes in between.",
        "not_largest",
    )


def _over_limit(spec, largest, peak, share, setting):
    """The chosen size ran but peaked over the budget less its margin. Named only when one
    mistake alone explains the choice: the margin left out (the largest size within the
    whole budget), the budget left out (the largest the card runs), or the first size that
    failed returned instead of the last that fitted."""
    device, limit = card(spec), limit_bytes(spec)
    budget = int(spec["max_memory_gb"] * 2**30)

    def largest_under(ceiling: int) -> int:
        return min(share, max(0, (ceiling - device.base_bytes) // device.per_sample_bytes))

    explains = {
        "margin_ignored": peak <= budget
        and largest == largest_under(min(budget, device.capacity_bytes)),
        "budget_ignored": peak > budget
        and largest_under(device.capacity_bytes - device.flaky_bytes)
        <= largest
        <= largest_under(device.capacity_bytes),
        "failed_size_chosen": largest == largest_under(limit) + 1,
    }
    names = [name for name, true in explains.items() if true]
    name = names[0] if len(names) == 1 else None
    hints = {
        "margin_ignored": "A size fits only when its peak is at most max_memory_gb GiB x "
        "(1 - margin): the margin leaves room for longer sequences and fragmentation.",
        "budget_ignored": "A size fits only when try_step runs and its peak is at most "
        "max_memory_gb GiB x (1 - margin): the card may be bigger than the budget.",
        "failed_size_chosen": "A bisection returns the last size that fitted, not the first "
        "that failed.",
        None: "A size fits only when try_step runs and its peak is at most max_memory_gb GiB "
        "x (1 - margin).",
    }
    raise Failure(
        f"Micro-batch {largest} peaked at {gib(peak)}, over the budget of "
        f"{spec['max_memory_gb']:g} GiB less its {spec['margin']:.0%} margin ({gib(limit)}) "
        f"{setting}. {hints[name]}",
        name,
    )


def _judge_window(spec, largest, steps, sizes, setting):
    share, world = spec["target"] // spec["world"], spec["world"]
    fewest = -(-share // largest)
    if world > 1 and sum(sizes) == spec["target"]:
        raise Failure(
            f"Your window holds {sum(sizes)} samples on each of {world} devices, "
            f"{sum(sizes) * world} in all, not {spec['target']} {setting}: each device "
            f"trains on its share, target_batch / world_size = {share}.",
            "world_size_ignored",
        )
    if sum(sizes) != share:
        raise Failure(
            f"Your micro-batch sizes add up to {sum(sizes)} per device ({sum(sizes) * world} "
            f"per optimizer step), not {share} ({spec['target']}) {setting}. Reach the target "
            f"exactly: {fewest} micro-batches whose sizes add up to {share}, none over "
            f"{largest} (sizes may differ by one when it does not divide).",
            "effective_batch_missed",
        )
    if max(sizes) > largest or min(sizes) < 1:
        raise Failure(
            f"Your window {sizes[:12]} has a micro-batch of {max(sizes)}, over the largest that "
            f"fits ({largest}) {setting}."
            if max(sizes) > largest
            else f"Your window {sizes[:12]} has an empty micro-batch {setting}.",
            "micro_batch_over_fit" if max(sizes) > largest else None,
        )
    if len(sizes) != steps:
        raise Failure(
            f"accum_steps is {steps}, but your window has {len(sizes)} micro-batches "
            f"{setting}: accum_steps is the number of micro-batches per window.",
        )
    if steps > fewest:
        raise Failure(
            f"Your window has {steps} micro-batches; {fewest} reach {share} per device with none "
            f"over {largest} {setting}. More micro-batches than needed only run slower.",
            "too_many_steps",
        )
