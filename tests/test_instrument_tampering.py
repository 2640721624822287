"""Issue 40, item 4a: an instrument reached through the objects the student's function is given.

Each attack reaches for a check's instruments from inside the function under test: rewrites
what a hook leads to, calls or pokes the hooks itself, removes, replaces or reorders them, or
goes around them (the layers' weights by hand, a copy of the model, ``functional_call``).
Each must leave the record as it happened, or make the verdict ``changed`` or a bypass,
which the judge turns into lost points. Tiny models, in memory: well under a second each.
"""

from __future__ import annotations

import copy
import gc

import pytest
import torch
from torch import nn

from coursekit.checks import QUESTIONS
from coursekit.checks.instruments import GradientPasses, Probes, SchedulerSteps, StepCounter, Watch
from coursekit.checks.question import Failure
from coursekit.checks.tamper_evident import judge_instruments, poke, watched
from coursekit.data import make_regression, split_micro_batches
from coursekit.models import tiny_mlp
from tests.corpora import student_code
from tests.corpora.instrument_attacks import (
    ALL_REDUCES_HIDDEN,
    COPY,
    DDP_HOOKS_OFF,
    FORGED_PASSES,
    GRAPHS_UNSEEN,
    HOOKS_OFF,
    ISSUE_ATTACK,
    SCALER_COUNTS_FORGED,
)
from tests.helpers.reachable import reachable_from as _reachable

MICRO, N = 6, 4


def _problem():
    model = tiny_mlp(in_features=5, hidden=7, depth=2, seed=1, dtype=torch.float64)
    inputs, targets = make_regression(MICRO * N, in_features=5, seed=1, dtype=torch.float64)
    return model, split_micro_batches(inputs, targets, MICRO)


def _whole(model, micro_batches):
    inputs = torch.cat([x for x, _ in micro_batches])
    targets = torch.cat([y for _, y in micro_batches])
    nn.functional.mse_loss(model(inputs), targets).backward()


def _hooks_of(*owners):
    """Every hook dict an attacker finds on the objects it was handed."""
    names = (
        "_forward_pre_hooks",
        "_forward_hooks",
        "_backward_hooks",
        "_post_accumulate_grad_hooks",
        "_optimizer_step_pre_hooks",
        "_optimizer_step_post_hooks",
    )
    for owner in owners:
        for item in [owner, *(owner.modules() if isinstance(owner, nn.Module) else [])]:
            for name in names:
                hooks = getattr(item, name, None)
                if hooks:
                    yield hooks


def _rewrite_everything(*owners):
    """The issue's attack, generalised: every list, dict and counter reachable from the hooks
    is rewritten to say one micro-batch at a time, one backward per micro-batch."""
    for hooks in list(_hooks_of(*owners)):
        for hook in list(hooks.values()):
            for found in list(_reachable(hook)):
                if isinstance(found, list):
                    found[:] = [MICRO] * N
                elif isinstance(found, dict) and found is not hooks:
                    for key in list(found):
                        found[key] = [MICRO] * N
                elif hasattr(found, "__dict__") and not isinstance(found, (type, nn.Module)):
                    for key, value in list(vars(found).items()):
                        if isinstance(value, int) and not isinstance(value, bool):
                            setattr(found, key, N)


def _call_and_poke_every_hook(model, parameter):
    """Call every hook by hand, and poke every token a closure holds, with small inputs."""
    fake = (torch.zeros(MICRO, 5, dtype=torch.float64),)
    for hooks in list(_hooks_of(model, parameter)):
        for hook in list(hooks.values()):
            for arguments in ((model, fake, {}), (model, fake), (parameter,)):
                try:
                    hook(*arguments)
                except TypeError:
                    continue
            for _ in range(N):
                poke(hook.__defaults__[-2], (model, fake))
                poke(hook.__defaults__[-2], (parameter,))


def _watch_run(attack):
    model, micro_batches = _problem()
    watch = Watch(model)
    watched((watch,), attack, model, micro_batches)
    return watch, watch.verdict(samples=MICRO * N)


def test_a_right_window_is_recorded_as_it_ran_and_intact():
    def right(model, micro_batches):
        for x, y in micro_batches:
            (nn.functional.mse_loss(model(x), y) / N).backward()

    watch, verdict = _watch_run(right)
    assert (max(watch.forward_sizes), watch.backward_passes, verdict) == (MICRO, N, "intact")


def test_rewriting_what_the_hooks_lead_to_leaves_the_record_as_it_ran():
    def attack(model, micro_batches):
        _whole(model, micro_batches)
        _rewrite_everything(model)

    watch, verdict = _watch_run(attack)
    assert max(watch.forward_sizes) == MICRO * N
    assert watch.backward_passes == 1
    assert verdict in ("intact", "changed")  # either way, the whole batch is seen


def test_calling_or_poking_the_hooks_by_hand_adds_nothing():
    def attack(model, micro_batches):
        _whole(model, micro_batches)
        _call_and_poke_every_hook(model, next(model.parameters()))

    watch, verdict = _watch_run(attack)
    assert (watch.forward_sizes, watch.backward_passes) == ([MICRO * N, MICRO * N], 1)
    assert verdict == "intact"


def test_a_hook_made_to_run_many_times_in_one_backward_counts_once():
    def attack(model, micro_batches):
        parameter = next(model.parameters())
        ours = list(parameter._post_accumulate_grad_hooks.values())

        def many(p):
            for hook in ours * 8:
                hook(p)

        parameter.register_post_accumulate_grad_hook(many)
        _whole(model, micro_batches)

    watch, _ = _watch_run(attack)
    assert watch.backward_passes == 1


@pytest.mark.parametrize(
    "change",
    [
        lambda model: [m._forward_pre_hooks.clear() for m in model.modules()],
        lambda model: next(model.parameters())._post_accumulate_grad_hooks.clear(),
        lambda model: setattr(next(model.parameters()), "_backward_hooks", None),
        lambda model: model._forward_pre_hooks.update(
            {key: (lambda *a, **k: None) for key in model._forward_pre_hooks}
        ),
        lambda model: [
            setattr(hook, "__defaults__", (None, None, None, object(), hook.__defaults__[-1]))
            for hook in model._forward_pre_hooks.values()
        ],
        lambda model: setattr(model, "_forward_pre_hooks", type(model._forward_pre_hooks)()),
    ],
    ids=["removed", "accumulate_hook", "grad_hooks", "replaced", "defaults", "dict"],
)
def test_removing_or_replacing_a_hook_is_changed(change):
    def attack(model, micro_batches):
        change(model)
        _whole(model, micro_batches)

    _, verdict = _watch_run(attack)
    assert verdict == "changed"


def test_names_rebound_for_the_length_of_the_call_change_nothing():
    from coursekit.checks import tamper_evident

    def attack(model, micro_batches):
        saved = tamper_evident.poke, torch._C._current_autograd_node
        tamper_evident.poke = lambda *args, **kwargs: None
        torch._C._current_autograd_node = lambda: None
        try:
            _whole(model, micro_batches)
        finally:
            tamper_evident.poke, torch._C._current_autograd_node = saved

    watch, verdict = _watch_run(attack)
    assert (watch.forward_sizes, watch.backward_passes) == ([MICRO * N, MICRO * N], 1)


def test_a_hook_put_in_front_of_the_checks_one_is_changed():
    def attack(model, micro_batches):
        hooks = model._forward_pre_hooks
        ours = dict(hooks)
        hooks.clear()
        hooks[-1] = lambda module, args: None
        hooks.update(ours)
        _whole(model, micro_batches)

    _, verdict = _watch_run(attack)
    assert verdict == "changed"


def test_layers_used_by_hand_are_a_bypass():
    def attack(model, micro_batches):
        inputs = torch.cat([x for x, _ in micro_batches])
        targets = torch.cat([y for _, y in micro_batches])
        out = inputs
        for layer in model:
            if isinstance(layer, nn.Linear):
                out = nn.functional.linear(out, layer.weight, layer.bias)
            else:
                out = type(layer).forward(layer, out)
        nn.functional.mse_loss(out, targets).backward()

    watch, verdict = _watch_run(attack)
    assert (watch.forward_sizes, verdict) == ([], "forward_unseen")


@pytest.mark.parametrize("clear_hooks", [True, False])
def test_a_copy_of_the_model_is_a_bypass(clear_hooks):
    def attack(model, micro_batches):
        twin = copy.deepcopy(model)
        if clear_hooks:
            for module in twin.modules():
                module._forward_pre_hooks.clear()
                module._forward_hooks.clear()
        _whole(twin, micro_batches)
        for mine, theirs in zip(model.parameters(), twin.parameters(), strict=True):
            mine.grad = theirs.grad.clone()

    watch, verdict = _watch_run(attack)
    assert (watch.forward_sizes, verdict) == ([], "forward_unseen")


def test_a_copy_behind_forward_and_backward_passes_for_show_is_a_bypass():
    def attack(model, micro_batches):
        for x, y in micro_batches:  # passes the check sees, bringing almost nothing
            (nn.functional.mse_loss(model(x), torch.zeros_like(y)) * 1e-9).backward()
        twin = copy.deepcopy(model)
        for module in twin.modules():
            module._forward_pre_hooks.clear()
            module._forward_hooks.clear()
        _whole(twin, micro_batches)  # the real work, on a copy
        for mine, theirs in zip(model.parameters(), twin.parameters(), strict=True):
            mine.grad = theirs.grad.clone()

    watch, verdict = _watch_run(attack)
    assert (max(watch.forward_sizes), watch.backward_passes) == (MICRO, N)
    assert verdict == "gradient_unseen"
    # (passes for show that bring a multiple of the right gradient, the micro-batches' own
    # losses scaled, did the accumulation itself: .grad is then a multiple of what they
    # brought, and only the memory the whole-batch copy took would tell)


def test_functional_call_is_seen_as_the_forward_it_is():
    def attack(model, micro_batches):
        inputs = torch.cat([x for x, _ in micro_batches])
        targets = torch.cat([y for _, y in micro_batches])
        params = dict(model.named_parameters())
        out = torch.func.functional_call(model, params, (inputs,))
        nn.functional.mse_loss(out, targets).backward()

    watch, _ = _watch_run(attack)
    assert max(watch.forward_sizes) == MICRO * N


def test_a_gradient_set_by_hand_is_a_bypass():
    def attack(model, micro_batches):
        for x, _ in micro_batches:  # forward passes the check sees, then a gradient by hand
            model(x)
        for parameter in model.parameters():
            parameter.grad = torch.ones_like(parameter)

    _, verdict = _watch_run(attack)
    assert verdict == "gradient_unseen"


def test_the_hooks_record_nothing_outside_the_watched_call():
    model, micro_batches = _problem()
    watch = Watch(model)
    _whole(model, micro_batches)  # not through watched(): no frame holds the sinks
    assert (watch.forward_sizes, watch.backward_passes) == ([], 0)


def test_no_sink_is_reachable_from_the_objects_handed_over():
    model, micro_batches = _problem()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    instruments = (
        Watch(model),
        StepCounter(model, optimizer),
        SchedulerSteps(scheduler),
        GradientPasses(model),
    )
    sinks = {id(sink) for instrument in instruments for sink in instrument.sinks}
    roots = [*(_hooks_of(model, optimizer)), vars(optimizer), vars(model), vars(scheduler)]
    found = {id(obj) for root in roots for obj in _reachable(root, depth=8)}
    assert not sinks & found
    assert not {id(i) for i in instruments} & found


def _loop(model, optimizer, scheduler, micro_batches):
    for x, y in micro_batches:
        (nn.functional.mse_loss(model(x), y) / N).backward()
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()


def _counted_run(attack):
    model, micro_batches = _problem()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.5**step)
    counter, steps = StepCounter(model, optimizer), SchedulerSteps(scheduler)
    watched((counter, steps), attack, model, optimizer, scheduler, micro_batches)
    return counter, steps


def test_step_counts_are_what_ran_and_hand_calls_add_nothing():
    def attack(model, optimizer, scheduler, micro_batches):
        _loop(model, optimizer, scheduler, micro_batches)
        for hook in list(optimizer._optimizer_step_pre_hooks.values()):
            hook(optimizer, (), {})
            poke(hook.__defaults__[-2])
        poke(vars(scheduler)["step"].__kwdefaults__["_token"])

    counter, steps = _counted_run(attack)
    assert (counter.steps, counter.lrs, counter.zero_grads, steps.count) == (1, [0.1], 1, 1)
    assert counter.verdict() == steps.verdict() == "intact"


@pytest.mark.parametrize(
    "change",
    [
        lambda model, optimizer, scheduler: optimizer._optimizer_step_pre_hooks.clear(),
        lambda model, optimizer, scheduler: vars(optimizer).pop("zero_grad"),
        lambda model, optimizer, scheduler: setattr(model, "zero_grad", lambda *a, **k: None),
    ],
    ids=["step_hook", "zero_grad", "model_zero_grad"],
)
def test_a_step_counter_changed_is_changed(change):
    def attack(model, optimizer, scheduler, micro_batches):
        change(model, optimizer, scheduler)
        _loop(model, optimizer, scheduler, micro_batches)

    counter, _ = _counted_run(attack)
    assert counter.verdict() == "changed"


def test_a_scheduler_stepped_around_its_counter_is_a_bypass():
    def attack(model, optimizer, scheduler, micro_batches):
        _loop(model, optimizer, scheduler, micro_batches)
        for _ in range(3):  # stepped per micro-batch, out of the counter's sight
            type(scheduler).step(scheduler)

    _, steps = _counted_run(attack)
    assert (steps.count, steps.verdict()) == (1, "step_unseen")
    _, removed = _counted_run(lambda m, o, s, b: (vars(s).pop("step"), _loop(m, o, s, b)))
    assert removed.verdict() == "changed"


def test_gradient_passes_and_probes_take_no_forged_events():
    model, micro_batches = _problem()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    passes, probes = GradientPasses(model), Probes()
    norms = probes.on_step(optimizer, lambda opt: 1.0)

    def attack(model, micro_batches):
        _whole(model, micro_batches)  # one backward for the window
        _call_and_poke_every_hook(model, next(model.parameters()))
        for hook in list(optimizer._optimizer_step_pre_hooks.values()):
            hook(optimizer, (), {})
            poke(hook.__defaults__[-2])

    watched((passes, probes), attack, model, micro_batches)
    assert (passes.count, norms) == (1, [])
    assert passes.verdict() == probes.verdict() == "intact"


# ------------------------------------------- whole questions, judged as the grader judges


def _graded(question: str, source: str) -> list[Failure | None]:
    """Each public spec's verdict: ``run`` on the student's function (as the hand-in's
    process would) and on the reference, then ``judge``."""
    check = QUESTIONS[question]
    namespace: dict = {}
    exec(compile(source, f"<{question}>", "exec"), namespace)
    verdicts = []
    for spec in check.public_specs()[:2]:
        expected = check.run(check.reference(), spec)
        outputs = check.run(namespace[question], spec)
        try:
            check.judge(spec, outputs, expected)
            verdicts.append(None)
        except Failure as failure:
            verdicts.append(failure.mistake)
    gc.collect()
    return verdicts


@pytest.mark.parametrize(
    ("question", "source", "mistake"),
    [
        ("accumulate_window", ISSUE_ATTACK, "whole_batch_forward"),
        ("accumulate_window", HOOKS_OFF, "instrument_changed"),
        ("accumulate_window", COPY, "instrument_bypassed"),
        ("train_accumulated", FORGED_PASSES, "single_backward"),
    ],
    ids=["rewritten_record", "hooks_off", "copy", "forged_passes"],
)
def test_the_judge_takes_the_points_an_instrument_protects(question, source, mistake):
    assert _graded(question, source) == [mistake, mistake]


@pytest.mark.parametrize(
    "question",
    ["accumulate_window", "train_accumulated", "amp_window", "ddp_window", "grad_cache_step"],
)
@pytest.mark.slow  # over 3 s: out of the quick run (-m 'not slow')
def test_right_answers_keep_their_points(question):
    assert _graded(question, student_code.BY_QUESTION[question]["correct"]) == [None, None]


@pytest.mark.parametrize(
    ("question", "source", "mistake"),
    [
        ("global_token_scale", ALL_REDUCES_HIDDEN, "all_reduce_per_micro_batch"),
        ("ddp_window", DDP_HOOKS_OFF, "instrument_changed"),
        ("grad_cache_step", GRAPHS_UNSEEN, "instrument_bypassed"),
        ("amp_window", SCALER_COUNTS_FORGED, "instrument_changed"),
    ],
    ids=["all_reduce", "ddp", "grad_cache", "amp_scaler"],
)
def test_each_questions_own_instruments_hold_too(question, source, mistake):
    assert mistake in _graded(question, source)


def test_a_missing_or_unknown_verdict_fails():
    for outputs in ({}, {"instruments": "fine"}, {"instruments": ["intact"]}):
        with pytest.raises(Failure) as failed:
            judge_instruments(outputs)
        assert failed.value.mistake == "instrument_changed"
    judge_instruments({"instruments": "forward_unseen"}, bypass=False)  # judged where right
