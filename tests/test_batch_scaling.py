"""Module 6's scaling rules and batch ramp (coursekit.batch_scaling), and its two graded
questions: every correct style passes and every known mistake loses points, named truly."""

from __future__ import annotations

import json
import math
import re

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from coursekit.batch_scaling import (
    ramp_plan,
    ramp_schedule,
    scaled_hyperparameters,
    train_with_plan,
)
from coursekit.checks import Status, evaluate
from coursekit.checks.module06.ramp_plan import RampPlan
from coursekit.checks.module06.scaled_hyperparameters import ScaledHyperparameters
from coursekit.checks.question import Failure
from coursekit.data import make_regression, split_micro_batches
from coursekit.models import tiny_mlp
from coursekit.training import train_accumulated
from tests.corpora import student_code
from tests.corpora.student_code import module06_batch as student_code_06_batch
from tests.helpers import mutation

QUESTIONS = ("scaled_hyperparameters", "ramp_plan")

# ---------------------------------------------------------------- scaled_hyperparameters


def test_sgd_scales_the_learning_rate_linearly_and_keeps_the_warmup_in_samples():
    assert scaled_hyperparameters(0.1, 256, 1024, "sgd", 500) == {"lr": 0.4, "warmup_steps": 125}
    smaller = scaled_hyperparameters(0.1, 256, 64, "sgd", 500)
    assert smaller["lr"] == pytest.approx(0.025) and smaller["warmup_steps"] == 2000


@pytest.mark.parametrize("kind", ["adam", "adamw"])
def test_adam_follows_the_square_root_rule(kind):
    scaled = scaled_hyperparameters(1e-3, 32, 512, kind, 100, betas=(0.95, 0.999), eps=1e-6)
    assert scaled["lr"] == pytest.approx(4e-3, rel=1e-12)
    assert scaled["betas"] == pytest.approx((1 - 16 * 0.05, 1 - 16 * 0.001), rel=1e-12)
    assert scaled["eps"] == pytest.approx(2.5e-7, rel=1e-12)
    assert scaled["warmup_steps"] == 7  # 100 x 32 / 512 = 6.25 steps: rounded up


def test_a_smaller_batch_moves_the_betas_towards_1():
    scaled = scaled_hyperparameters(2e-3, 512, 128, "adam", 300, betas=(0.9, 0.98))
    assert scaled["betas"] == pytest.approx((0.975, 0.995), rel=1e-12)
    assert scaled["lr"] == pytest.approx(1e-3) and scaled["eps"] == pytest.approx(2e-8)


@given(warmup=st.integers(0, 10**6), base=st.integers(1, 4096), new=st.integers(1, 4096))
def test_the_warmup_covers_the_fewest_whole_steps_that_hold_its_samples(warmup, base, new):
    steps = scaled_hyperparameters(0.1, base, new, "sgd", warmup)["warmup_steps"]
    assert isinstance(steps, int)
    assert steps * new >= warmup * base > (steps - 1) * new or steps == warmup == 0


def test_the_warmup_is_exact_where_a_float_ratio_is_one_step_off():
    assert math.ceil(245 / (98 / 96)) == 241  # the float ceiling lands one step high
    assert scaled_hyperparameters(0.1, 96, 98, "sgd", 245)["warmup_steps"] == 240


def test_k_times_one_minus_beta_of_exactly_1_gives_beta_0():
    scaled = scaled_hyperparameters(1e-3, 64, 128, "adam", 0, betas=(0.5, 0.75))
    assert scaled["betas"] == (0.0, 0.5)


@pytest.mark.parametrize(
    ("args", "kwargs", "words"),
    [
        ((0.1, 0, 64, "sgd", 10), {}, "base_batch"),
        ((0.1, 64, -8, "sgd", 10), {}, "new_batch"),
        ((0.0, 64, 128, "sgd", 10), {}, "base_lr"),
        ((0.1, 64, 128, "sgd", -1), {}, "warmup_steps"),
        ((0.1, 64, 128, "rmsprop", 10), {}, "'sgd', 'adam', 'adamw'"),
        ((1e-3, 32, 512, "adam", 10), {}, "betas[0]"),
        ((1e-3, 32, 512, "adamw", 10), {"betas": (0.99, 0.9)}, "betas[1]"),
        ((1e-3, 32, 64, "adam", 10), {"betas": (0.9,)}, "two numbers"),
    ],
)
def test_bad_settings_are_refused_with_the_setting_named(args, kwargs, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        scaled_hyperparameters(*args, **kwargs)


def test_sgd_is_not_refused_where_the_rule_for_adams_betas_stops():
    assert scaled_hyperparameters(0.1, 32, 512, "sgd", 10) == {"lr": 1.6, "warmup_steps": 1}
    with pytest.raises(ValueError, match="betas"):
        scaled_hyperparameters(0.1, 32, 512, "adam", 10)


# ---------------------------------------------------------------- ramp_plan


def _accum_at(schedule, sample):
    return [n for f, n in schedule if f <= sample][-1]


ramp_specs = st.integers(1, 8).flatmap(
    lambda micro: st.integers(1, 200).flatmap(
        lambda total: st.tuples(
            st.just(total),
            st.just(micro),
            st.lists(st.integers(1, 250), max_size=4, unique=True).flatmap(
                lambda starts: st.lists(
                    st.integers(1, 8), min_size=len(starts) + 1, max_size=len(starts) + 1
                ).map(lambda accum: list(zip([0, *sorted(starts)], accum, strict=True)))
            ),
        )
    )
)


@given(ramp_specs)
def test_a_plan_trains_every_sample_once_in_order_and_sizes_each_window_at_its_start(spec):
    total, micro, schedule = spec
    plan = ramp_plan(total, micro, schedule)
    flat = [r for window in plan["windows"] for r in window]
    assert [a for a, _ in flat] == list(range(0, total, micro))
    assert [b for _, b in flat] == [min(a + micro, total) for a, _ in flat]
    for index, window in enumerate(plan["windows"]):
        wanted = _accum_at(schedule, window[0][0])
        last = index == len(plan["windows"]) - 1
        assert len(window) == wanted or (last and len(window) < wanted)
    for window, scales in zip(plan["windows"], plan["scales"], strict=True):
        samples = window[-1][1] - window[0][0]
        assert scales == [(b - a) / samples for a, b in window]
        assert math.fsum(scales) == pytest.approx(1.0, abs=1e-12)
    assert plan["optimizer_steps"] == len(plan["windows"])


def test_a_change_inside_a_window_waits_for_the_next_window():
    plan = ramp_plan(50, 5, [(0, 2), (15, 3)])
    assert plan["windows"] == [
        [[0, 5], [5, 10]],
        [[10, 15], [15, 20]],  # starts at 10 < 15: still 2 micro-batches
        [[20, 25], [25, 30], [30, 35]],
        [[35, 40], [40, 45], [45, 50]],
    ]
    assert plan["optimizer_steps"] == 4


def test_accum_steps_may_go_down_and_a_short_end_is_scaled_by_its_samples():
    plan = ramp_plan(30, 4, [(0, 4), (16, 1), (20, 3)])
    assert [len(w) for w in plan["windows"]] == [4, 1, 3]
    assert plan["windows"][-1] == [[20, 24], [24, 28], [28, 30]]
    assert plan["scales"][-1] == [0.4, 0.4, 0.2]


@pytest.mark.parametrize(
    ("total", "micro", "schedule", "words"),
    [
        (40, 0, [(0, 2)], "micro_batch_size"),
        (0, 4, [(0, 2)], "total_samples"),
        (40, 4, [], "empty"),
        (40, 4, [(4, 2)], "sample 0"),
        (40, 4, [(0, 2), (16, 3), (8, 4)], "sorted"),
        (40, 4, [(0, 2), (8, 3), (8, 4)], "sorted"),
        (40, 4, [(0, 2), (8, 0)], "accum_steps"),
        (40, 4, [(0, 2, 3)], "pair"),
    ],
)
def test_bad_plans_are_refused(total, micro, schedule, words):
    with pytest.raises(ValueError, match=words):
        ramp_plan(total, micro, schedule)


# ---------------------------------------------------------------- ramp_schedule


def test_a_ramp_grows_the_accumulation_in_even_stages_and_ends_at_the_full_batch():
    schedule = ramp_schedule(10_000, 32, start_batch=32, end_batch=256, ramp_samples=4_000)
    assert schedule == [(0, 1), (1000, 3), (2000, 5), (3000, 6), (4000, 8)]
    assert ramp_plan(10_000, 32, schedule)["windows"][-1][0][0] > 4000


def test_a_ramp_leaves_out_stages_that_repeat_and_a_zero_ramp_starts_full():
    assert ramp_schedule(100, 4, 4, 8, ramp_samples=40, steps=8) == [(0, 1), (20, 2)]
    assert ramp_schedule(100, 4, 4, 32, ramp_samples=0) == [(0, 8)]
    assert ramp_schedule(100, 4, 32, 8, ramp_samples=40, steps=2) == [(0, 8), (20, 5), (40, 2)]


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"start_batch": 30}, "start_batch"),
        ({"end_batch": 250}, "end_batch"),
        ({"ramp_samples": 20_000}, "ramp_samples"),
    ],
)
def test_a_ramp_that_accumulation_cannot_make_is_refused(kwargs, words):
    settings = {"start_batch": 32, "end_batch": 256, "ramp_samples": 4_000, **kwargs}
    with pytest.raises(ValueError, match=words):
        ramp_schedule(10_000, 32, **settings)


# ---------------------------------------------------------------- train_with_plan


def test_training_by_a_one_phase_plan_is_plain_accumulation():
    inputs, targets = make_regression(30)
    losses = {}
    weights = {}
    for way in ("plan", "loop"):
        model = tiny_mlp()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        if way == "plan":
            plan = ramp_plan(30, 4, [(0, 3)])
            losses[way] = train_with_plan(
                model, nn.MSELoss(), optimizer, None, (inputs, targets), plan, progress=False
            )
        else:
            micro_batches = split_micro_batches(inputs, targets, 4)
            losses[way] = train_accumulated(model, optimizer, nn.MSELoss(), micro_batches, 3)
        weights[way] = torch.cat([p.detach().flatten() for p in model.parameters()])
    assert losses["plan"] == losses["loop"]
    assert torch.equal(weights["plan"], weights["loop"])


def test_training_by_a_ramp_sees_every_sample_once_and_steps_once_per_window():
    inputs, targets = make_regression(45)
    seen = []

    def counting_loss(outputs, wanted):
        seen.append(len(wanted))
        return nn.functional.mse_loss(outputs, wanted)

    model = tiny_mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    plan = ramp_plan(45, 4, ramp_schedule(45, 4, 4, 16, ramp_samples=20))
    losses = train_with_plan(
        model, counting_loss, optimizer, scheduler, (inputs, targets), plan, progress=False
    )
    assert sum(seen) == 45
    assert len(losses) == plan["optimizer_steps"] == scheduler.last_epoch


def test_a_plan_longer_than_the_data_is_refused():
    model = tiny_mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    with pytest.raises(ValueError, match="reaches sample 40"):
        train_with_plan(
            model, nn.MSELoss(), optimizer, None, make_regression(30), ramp_plan(40, 4, [(0, 2)])
        )


# ---------------------------------------------------------------- the graded questions


@pytest.fixture
def hand_ins(monkeypatch):
    """tests.corpora.student_code with module 6's scaling hand-ins in it (the lead merges them into
    student_code itself; until then, and after, this gives the same sets)."""
    module = student_code_06_batch
    for name in ("BY_QUESTION", "NAMED_AS", "ALSO_NAMED"):
        monkeypatch.setattr(
            student_code, name, {**getattr(student_code, name), **getattr(module, name)}
        )
    for name in ("NON_TEXTBOOK", "HIDDEN_ONLY", "UNNAMED"):
        monkeypatch.setattr(student_code, name, getattr(student_code, name) | getattr(module, name))
    return student_code


def _variants(kind: str):
    """(question, variant) pairs: "correct" styles, "named" mutants the public check names."""
    module = student_code_06_batch
    pairs = [(q, v) for q in QUESTIONS for v in module.BY_QUESTION[q]]
    if kind == "correct":
        return [(q, v) for q, v in pairs if v.startswith("correct")]
    return [
        (q, v)
        for q, v in pairs
        if not v.startswith("correct") and (q, v) not in module.HIDDEN_ONLY | module.UNNAMED
    ]


@pytest.mark.grading
@pytest.mark.parametrize(("question", "variant"), _variants("correct"))
def test_right_answers_pass_every_public_check(hand_ins, question, variant):
    result = evaluate(question, hand_ins.load(question, variant))
    assert result.status is Status.PASSED, result.render()


@pytest.mark.grading
@pytest.mark.parametrize(("question", "variant"), _variants("named"))
def test_each_known_mistake_is_named_by_the_public_check(hand_ins, question, variant):
    result = evaluate(question, hand_ins.load(question, variant))
    assert result.status is Status.FAILED, result.render()
    assert result.mistake == hand_ins.mistake_of(variant), result.render()


@pytest.mark.slow  # over 4 s: out of the quick run (-m 'not slow')
@pytest.mark.grading
@pytest.mark.parametrize("question", QUESTIONS)
def test_every_mutant_loses_points_and_every_correct_style_passes_on_20_seeds(hand_ins, question):
    assert len(mutation.mutants(question)) >= 10
    assert len(mutation.correct_styles(question)) >= 3
    score = mutation.score(question, range(20))
    assert not score.crashed, score.crashed
    assert not score.survived, f"mutants that kept full marks (variant: seeds): {score.survived}"
    assert not score.marked_down, f"correct styles marked down: {score.marked_down}"
    assert not score.false_names, f"mistake names that are not true: {score.false_names}"


@pytest.mark.grading
def test_the_mutation_sets_name_existing_mutants_and_non_textbook_ones_per_question():
    module = student_code_06_batch
    for pairs in (module.NON_TEXTBOOK, module.HIDDEN_ONLY, module.UNNAMED, module.ALSO_NAMED):
        for question, variant in pairs:
            assert variant in module.BY_QUESTION[question] and not variant.startswith("correct")
    for question in QUESTIONS:
        assert sum(q == question for q, _ in module.NON_TEXTBOOK) >= 2
    # another module's variant of the same name would be named after this module's mistake
    clashes = set(module.NAMED_AS) & set(student_code.NAMED_AS)
    assert all(student_code.NAMED_AS[v] == module.NAMED_AS[v] for v in clashes), clashes


def _judge(question_name, spec, outputs):
    question = ScaledHyperparameters() if question_name == QUESTIONS[0] else RampPlan()
    expected = json.loads(json.dumps(question.run(question.reference(), spec)))
    question.judge(spec, outputs, expected)


@pytest.mark.grading
@pytest.mark.parametrize(
    "outputs",
    [
        {"returned": "list: [1, 2]"},
        {"keys": ["windows"], "windows": [], "scales": [], "steps": 0},
        {
            "keys": ["optimizer_steps", "scales", "windows"],
            "windows": "str: x",
            "scales": [],
            "steps": 1,
        },
        {
            "keys": ["optimizer_steps", "scales", "windows"],
            "windows": [[]],
            "scales": [[]],
            "steps": 1,
        },
        {
            "keys": ["optimizer_steps", "scales", "windows"],
            "windows": [[[0, 10]]],
            "scales": [[1.0, 0.0]],
            "steps": 1,
        },
    ],
)
def test_a_plan_of_the_wrong_shape_is_refused_with_a_message(outputs):
    spec = {"total": 10, "micro": 10, "schedule": [[0, 1]]}
    with pytest.raises(Failure) as failure:
        _judge("ramp_plan", spec, outputs)
    assert failure.value.mistake is None and "(total_samples 10" in failure.value.message


@pytest.mark.grading
def test_ramp_plan_reads_any_sequence_types_and_refuses_non_integers():
    question = RampPlan()
    spec = {"total": 10, "micro": 5, "schedule": [[0, 2]]}
    expected = question.run(ramp_plan, spec)

    def as_ranges(total, micro, schedule):
        return {
            "windows": [(range(0, 5), range(5, 10))],
            "scales": ((0.5, 0.5),),
            "optimizer_steps": 1,
        }

    assert question.run(as_ranges, spec) == expected

    def float_stops(total, micro, schedule):
        return {"windows": [[[0, 5.0], [5, 10]]], "scales": [[0.5, 0.5]], "optimizer_steps": 1}

    with pytest.raises(Failure, match="'windows' must be a list"):
        question.judge(spec, question.run(float_stops, spec), expected)


@pytest.mark.grading
def test_a_mistake_is_not_named_where_two_mistakes_give_the_same_output():
    # one phase of N: 1/N per micro-batch is both "not updated" and "scaled by N"
    spec = {"total": 30, "micro": 4, "schedule": [[0, 3]]}

    def one_over_n(total, micro, schedule):
        plan = ramp_plan(total, micro, schedule)
        plan["scales"] = [[1 / 3] * len(w) for w in plan["windows"]]
        return plan

    question = RampPlan()
    with pytest.raises(Failure) as failure:
        question.judge(spec, question.run(one_over_n, spec), question.run(ramp_plan, spec))
    assert failure.value.mistake is None and "add up to 1" in failure.value.message


def test_a_samples_schedule_gives_the_same_rate_at_the_same_sample_whatever_the_ramp():
    from coursekit.batch_scaling import samples_schedule
    from coursekit.schedules import warmup_cosine

    def rates(plan):
        optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
        scheduler = samples_schedule(optimizer, plan, warmup_samples=32)
        by_sample = {}
        for window in plan["windows"]:
            by_sample[window[0][0]] = optimizer.param_groups[0]["lr"]
            optimizer.step()
            scheduler.step()
        return by_sample

    flat = rates(ramp_plan(512, 8, [(0, 1)]))  # a window every 8 samples
    ramp = rates(ramp_plan(512, 8, [(0, 1), (128, 4)]))  # then every 32
    assert set(ramp) < set(flat)
    assert all(ramp[sample] == pytest.approx(flat[sample]) for sample in ramp)
    # a schedule counted in steps, sized by the same plan, has decayed further by sample 128:
    # the 16 short windows before it are 16 of the plan's 28 steps
    plan = ramp_plan(512, 8, [(0, 1), (128, 4)])
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    in_steps = warmup_cosine(optimizer, 4, plan["optimizer_steps"]).lr_lambdas[0]
    assert plan["optimizer_steps"] == 16 + 12
    assert in_steps(16) < 0.6 < 0.9 < ramp[128]
    with pytest.raises(ValueError, match="fewer than the plan"):
        samples_schedule(optimizer, ramp_plan(16, 4, [(0, 1)]), warmup_samples=16)
