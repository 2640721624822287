"""Issue 40: module 7's simulated card keeps its log out of the tuner's reach.

The judge of ``autotune`` reads the card's log (every call, what it returned, what was freed)
and its count of calls, which stops a search that never ends. A tuner that could reach the
card could clear the log, lift the limit, or write the log it wants judged. These tests hand
the check tuners that try, by every route short of frames, ``gc`` and ``ctypes`` (which the
grader's audit hook reports): each is judged on what it did, and loses the points.
"""

from __future__ import annotations

import random
import threading

import pytest
import torch

from coursekit.checks import QUESTIONS, Failure, Status, evaluate
from coursekit.checks.module07.sealed_card import CardSink, new_sealed_card
from coursekit.checks.tamper_evident import watched
from coursekit.real_model.simulated_device import SimulatedDevice
from coursekit.real_model.tuning import autotune as reference
from tests.corpora import student_code
from tests.helpers.reachable import reachable_from

QUESTION = QUESTIONS["autotune"]


def _counting_down(try_step, free_memory, max_memory_gb, target, world, margin, before=None):
    """The mistake the card's limit catches: one size at a time, down from the share."""
    share, limit = target // world, max_memory_gb * 2**30 * (1 - margin)
    for size in range(share, 0, -1):
        if before is not None:
            before()
        try:
            peak = try_step(size)
        except torch.OutOfMemoryError:
            peak = None
        if peak is None:
            free_memory()
        elif peak <= limit:
            steps = -(-share // size)
            sizes = [share // steps + (i < share % steps) for i in range(steps)]
            return {"largest_fit": size, "accum_steps": steps, "micro_batch_sizes": sizes}
    raise ValueError("nothing fits")


def _rewrite_every_card(roots) -> None:
    """The attack, generalised: every log emptied and every limit lifted that the tuner can
    reach from what it was handed."""
    for found in [obj for root in roots for obj in reachable_from(root, depth=8)]:
        if isinstance(found, list) and found and isinstance(found[0], dict):
            found.clear()
        for name in ("max_calls", "log", "calls"):
            if hasattr(found, name) and not isinstance(found, type):
                try:
                    setattr(found, name, 10**9 if name != "log" else [])
                except (AttributeError, TypeError):
                    pass


def log_rewriter(try_step, free_memory, max_memory_gb, target_batch, world_size=1, margin=0.1):
    """Counting down, with the card's log and limit rewritten before every try."""
    return _counting_down(
        try_step,
        free_memory,
        max_memory_gb,
        target_batch,
        world_size,
        margin,
        before=lambda: _rewrite_every_card([try_step, free_memory]),
    )


def through_self(try_step, free_memory, max_memory_gb, target_batch, world_size=1, margin=0.1):
    """The plain attack: the card is the bound method's ``__self__``."""
    card = try_step.__self__
    card.max_calls = 10**9
    planned = _counting_down(try_step, free_memory, max_memory_gb, target_batch, world_size, margin)
    card.log[:] = [e for e in card.log if e.get("size") == planned["largest_fit"]]
    return planned


def forged_pokes(try_step, free_memory, max_memory_gb, target_batch, world_size=1, margin=0.1):
    """The functions' own token and poke, called with an outcome already filled in."""
    token, send = try_step.__defaults__[:2]
    share = target_batch // world_size
    for size in range(share, 0, -1):
        send(token, ("try", size, [12345]))  # a forged peak: the card ignores the poke
        send(token, ("free", None, [None]))
    return _counting_down(try_step, free_memory, max_memory_gb, target_batch, world_size, margin)


def _hidden_verdicts(fn, seeds=range(3)):
    """The mistake named on each hidden spec of a few draws, or None where it passed."""
    named = []
    for seed in seeds:
        for spec in QUESTION.hidden_specs(random.Random(seed)):
            expected = QUESTION.run(QUESTION.reference(), spec)
            try:
                QUESTION.judge(spec, QUESTION.run(fn, spec), expected)
            except Failure as failure:
                named.append(failure.mistake or "unnamed")
            except AttributeError:
                named.append("crashed")
            else:
                named.append(None)
    return named


def _counting_down_tuner(try_step, free_memory, max_memory_gb, target, world_size=1, margin=0.1):
    return _counting_down(try_step, free_memory, max_memory_gb, target, world_size, margin)


def test_no_card_and_no_log_is_reachable_from_the_functions_the_tuner_is_handed():
    sink, try_step, free_memory = new_sealed_card(QUESTION.public_specs()[0])
    watched((sink,), reference, try_step, free_memory, 8, 256, 1, 0.1)
    assert sink.device.log, "the search was recorded"
    found = [obj for root in (try_step, free_memory) for obj in reachable_from(root, depth=10)]
    assert not any(isinstance(obj, (CardSink, SimulatedDevice)) for obj in found)
    assert all(obj is not sink.device.log for obj in found)


@pytest.mark.parametrize("attack", [log_rewriter, forged_pokes])
def test_rewriting_or_forging_changes_nothing_the_judge_reads(attack):
    """Each attack is judged as the honest mistake under it (counting down) is, card for
    card: it reached nothing the judge reads."""
    honest = _hidden_verdicts(_counting_down_tuner)
    assert _hidden_verdicts(attack) == honest
    assert honest.count("too_many_probes") >= 3, honest
    public = evaluate("autotune", attack)
    assert public.status is not Status.PASSED and public.mistake == "too_many_probes"


def test_a_tuner_that_takes_the_card_from_try_step_finds_none():
    verdicts = _hidden_verdicts(through_self)
    assert None not in verdicts and "crashed" in verdicts, verdicts
    assert evaluate("autotune", through_self).status is not Status.PASSED


def test_the_card_answers_only_inside_the_check_s_call():
    spec = QUESTION.public_specs()[0]
    sink, try_step, free_memory = new_sealed_card(spec)
    with pytest.raises(RuntimeError, match="only while the check runs your function"):
        try_step(4)  # no watched() frame: nothing reaches the card
    kept = {}

    def in_a_thread(*args):
        errors = []
        thread = threading.Thread(target=lambda: _call_or_keep(args[0], errors))
        thread.start()
        thread.join()
        kept["errors"] = errors
        return reference(*args)

    watched((sink,), in_a_thread, try_step, free_memory, 8, 256, 1, 0.1)
    assert kept["errors"] and "only while" in kept["errors"][0]
    assert all(entry.get("size") != 3 for entry in sink.device.log)


def _call_or_keep(try_step, errors):
    try:
        try_step(3)
    except RuntimeError as error:
        errors.append(str(error))


def test_a_failed_try_s_memory_is_held_as_long_as_its_error_lives():
    """The sealed functions keep the card's rule: free_memory() inside the except block frees
    nothing, after it frees all; no frame of the check keeps the error alive."""
    sink, try_step, free_memory = _card_whose_failures_hold_all()

    def tuner(try_step, free_memory, *_):
        try:
            try_step(10**6)
        except torch.OutOfMemoryError as error:
            assert _frames_of(error.__traceback__) == ["tuner", "try_step"]  # none of the card
            free_memory()
        inside = sink.device.held_bytes
        free_memory()
        return inside, sink.device.held_bytes

    inside, after = watched((sink,), tuner, try_step, free_memory)
    assert inside > 0 and after == 0
    assert [e["event"] for e in sink.device.log] == ["oom", "free", "free"]


@pytest.mark.parametrize(
    "variant", [v for v in student_code.BY_QUESTION["autotune"] if v.startswith("correct")]
)
def test_every_right_style_keeps_full_marks_on_the_sealed_card(variant):
    fn = student_code.load("autotune", variant)
    assert evaluate("autotune", fn).status is Status.PASSED, variant
    assert set(_hidden_verdicts(fn, seeds=range(2))) == {None}, variant


def _frames_of(traceback) -> list[str]:
    names = []
    while traceback is not None:
        names.append(traceback.tb_frame.f_code.co_name)
        traceback = traceback.tb_next
    return names


class _Probe(Exception):
    pass


class _Peak(int):
    """What a spy's product becomes: compared with the card's capacity, it reports both."""

    def __add__(self, other):
        return _Peak(int(self) + int(other))

    __radd__ = __add__

    def __gt__(self, capacity):
        raise _Probe(int(self), int(capacity))


class _Spy(int):
    """A size whose arithmetic runs inside the card (the reviewer's attack)."""

    def __mul__(self, per_sample):
        return _Peak(int(self) * int(per_sample))

    __rmul__ = __mul__


def spying(try_step, free_memory, max_memory_gb, target_batch, world_size=1, margin=0.1):
    """Counting down with free probes: an int subclass learns whether a size fits from the
    card's own comparison, raising before the card logs the call."""
    share, limit = target_batch // world_size, max_memory_gb * 2**30 * (1 - margin)
    for size in range(share, 0, -1):
        try:
            try_step(_Spy(size))
        except _Probe as probe:
            peak, capacity = probe.args
            if peak <= capacity and peak <= limit:
                break
        except TypeError:
            break  # the card refused the spy: fall back to counting down for real
    return _counting_down(try_step, free_memory, max_memory_gb, target_batch, world_size, margin)


def test_a_size_that_runs_code_inside_the_card_is_refused_and_logged():
    honest = _hidden_verdicts(_counting_down_tuner)
    assert _hidden_verdicts(spying) == honest
    sink, try_step, free_memory = new_sealed_card(QUESTION.public_specs()[0])
    with pytest.raises(TypeError, match="an int"):
        watched((sink,), try_step, _Spy(4))
    assert sink.device.log == [{"event": "bad", "size": "_Spy"}]


def test_the_failed_try_s_memory_is_the_error_s_whatever_attribute_is_removed():
    """Memory a failed try holds is tied to the error object itself: deleting an attribute
    of the error inside the except block frees nothing."""
    sink, try_step, free_memory = _card_whose_failures_hold_all()

    def tuner(try_step, free_memory, *_):
        try:
            try_step(10**6)
        except torch.OutOfMemoryError as error:
            for name in list(vars(error)):
                delattr(error, name)
            free_memory()
            return sink.device.held_bytes

    assert watched((sink,), tuner, try_step, free_memory) > 0


def _card_whose_failures_hold_all():
    """A sealed card on which a failed try keeps all it asked for until freed."""
    return new_sealed_card({**QUESTION.public_specs()[1], "held_fraction": 1.0})
