"""The gradient noise scale (coursekit.noise_scale): the accumulated estimate against a
per-sample oracle, the estimator's unbiasedness, the DDP version, and the graded question."""

from __future__ import annotations

import math
import random
import types

import pytest
import torch
from torch import nn

import coursekit.checks.module06.noise_scale  # noqa: F401  (registers the question)
from coursekit.checks import QUESTIONS, evaluate
from coursekit.checks.result import Status
from coursekit.data import make_classification, make_regression, split_micro_batches
from coursekit.distributed import run_workers
from coursekit.models import tiny_mlp
from coursekit.noise_scale import (
    NoiseEstimate,
    NoiseScaleMeter,
    estimate_from_micro_batches,
    estimate_from_per_sample,
    noise_scale_along_training,
    per_sample_gradients,
    true_noise_scale,
    two_batch_estimate,
)
from tests.corpora.student_code import module06_noise as code06
from tests.helpers import mutation

pytestmark = pytest.mark.module6


def _problem(loss: str, dtype=torch.float32, k: int = 4, b: int = 6, seed: int = 0):
    if loss == "mse":
        inputs, targets = make_regression(k * b, 5, 2, noise=0.5, seed=seed, dtype=dtype)
        model, loss_fn = tiny_mlp(5, 8, 2, seed=seed, dtype=dtype), nn.MSELoss()
    else:
        inputs, targets = make_classification(k * b, 5, 3, seed=seed, dtype=dtype)
        model, loss_fn = tiny_mlp(5, 8, 3, seed=seed, dtype=dtype), nn.CrossEntropyLoss()
    return model, loss_fn, split_micro_batches(inputs, targets, b)


def _gap(a: NoiseEstimate, b: NoiseEstimate) -> float:
    """The largest relative difference between two estimates' |G|^2 and trace."""
    return max(
        abs(a.gradient_sq_norm - b.gradient_sq_norm) / abs(b.gradient_sq_norm),
        abs(a.trace - b.trace) / abs(b.trace),
    )


# ---------------------------------------------------------------- accumulation vs oracle


@pytest.mark.parametrize("loss", ["mse", "cross_entropy"])
@pytest.mark.parametrize(("dtype", "tolerance"), [(torch.float64, 1e-10), (torch.float32, 1e-5)])
def test_accumulated_estimate_equals_the_per_sample_oracle(loss, dtype, tolerance):
    model, loss_fn, micro_batches = _problem(loss, dtype)
    accumulated = estimate_from_micro_batches(model, loss_fn, micro_batches)
    oracle = estimate_from_per_sample(model, loss_fn, micro_batches)
    assert _gap(accumulated, oracle) <= tolerance
    assert accumulated.b_simple == pytest.approx(oracle.b_simple, rel=10 * tolerance)


def test_the_oracle_is_not_fooled_by_another_split():
    # the same samples split into 2 micro-batches of 12 give another (right) estimate:
    # the comparison above would catch an accumulation that ignored the split
    model, loss_fn, micro_batches = _problem("mse", torch.float64)
    inputs = torch.cat([x for x, _ in micro_batches])
    targets = torch.cat([y for _, y in micro_batches])
    other = estimate_from_per_sample(model, loss_fn, split_micro_batches(inputs, targets, 12))
    assert _gap(estimate_from_micro_batches(model, loss_fn, micro_batches), other) > 1e-3


def test_gradients_are_left_as_they_were_found():
    model, loss_fn, micro_batches = _problem("mse", torch.float64)
    estimate_from_micro_batches(model, loss_fn, micro_batches)
    assert all(p.grad is None for p in model.parameters())
    # gradients already there (a window half accumulated) are kept, tensor and values
    loss_fn(model(micro_batches[0][0]), micro_batches[0][1]).backward()
    before = [p.grad for p in model.parameters()]
    values = [g.clone() for g in before]
    estimate_from_micro_batches(model, loss_fn, micro_batches)
    assert all(p.grad is g for p, g in zip(model.parameters(), before, strict=True))
    assert all(torch.equal(g, v) for g, v in zip(before, values, strict=True))


def test_per_sample_gradients_match_single_sample_backward_passes():
    model, loss_fn, micro_batches = _problem("cross_entropy", torch.float64)
    inputs, targets = micro_batches[0]
    rows = per_sample_gradients(model, loss_fn, inputs, targets)
    for j in range(len(inputs)):
        model.zero_grad(set_to_none=True)
        loss_fn(model(inputs[j : j + 1]), targets[j : j + 1]).backward()
        expected = torch.cat([p.grad.flatten() for p in model.parameters()])
        torch.testing.assert_close(rows[j], expected, rtol=1e-12, atol=1e-14)


# ---------------------------------------------------------------- unbiasedness


def test_two_batch_estimates_are_unbiased_over_random_batches():
    """On a fixed model and 64 samples, batches drawn with replacement: the averages of 4000
    estimates land within 4 standard errors of the exact |G|^2 and tr(Sigma)."""
    model, loss_fn, micro_batches = _problem("mse", torch.float64, k=8, b=8, seed=3)
    inputs = torch.cat([x for x, _ in micro_batches])
    targets = torch.cat([y for _, y in micro_batches])
    truth = true_noise_scale(model, loss_fn, inputs, targets)
    rows = per_sample_gradients(model, loss_fn, inputs, targets)
    draws, k, b = 4000, 4, 2
    generator = torch.Generator().manual_seed(0)
    index = torch.randint(len(rows), (draws, k, b), generator=generator)
    micro = rows[index].mean(dim=2)  # (draws, k, P): each micro-batch's gradient
    small = micro.pow(2).sum(dim=2).mean(dim=1)
    big = micro.mean(dim=1).pow(2).sum(dim=1)
    estimates = [
        two_batch_estimate(float(s), float(g), b, k * b) for s, g in zip(small, big, strict=True)
    ]
    for name in ("gradient_sq_norm", "trace"):
        values = torch.tensor([getattr(e, name) for e in estimates], dtype=torch.float64)
        error = float(values.std()) / math.sqrt(draws)
        assert abs(float(values.mean()) - getattr(truth, name)) < 4 * error, name
    # the test has power: the uncorrected big-batch norm misses |G|^2 by far more
    assert float(big.mean()) - truth.gradient_sq_norm > 10 * float(big.std()) / math.sqrt(draws)


def test_true_noise_scale_normalises_by_n():
    rows = torch.tensor([[1.0, 0.0], [3.0, 2.0]], dtype=torch.float64)
    model = nn.Linear(2, 1, bias=False).double()
    with torch.no_grad():
        model.weight.zero_()
    # the loss -(w . x) / 1 has per-sample gradient -x: rows are the negated inputs
    truth = true_noise_scale(model, lambda out, _y: -out.sum(), -rows, torch.zeros(2))
    assert truth.gradient_sq_norm == pytest.approx(2.0**2 + 1.0**2)
    assert truth.trace == pytest.approx(2.0)  # (|(-1,-1)|^2 + |(1,1)|^2) / 2


# ---------------------------------------------------------------- DDP


def test_ddp_estimate_from_local_and_all_reduced_gradients_equals_the_oracle():
    """Two windows of 3 micro-batches per rank, under no_sync but the last: the local window
    is the small batch, the all-reduced one the big batch, and the meter averages both."""
    results = run_workers(
        "coursekit.workers.noise_scale.ddp_noise_estimate",
        2,
        micro_batch_size=2,
        accum_steps=3,
        windows=2,
        progress=False,
    )
    oracles = results[0]["oracles"]
    assert results[0]["local_sq_norm"] != pytest.approx(results[1]["local_sq_norm"])
    for result in results:
        for window, oracle in zip(result["windows"], oracles, strict=True):
            for key in ("gradient_sq_norm", "trace", "b_simple"):
                assert window["estimate"][key] == pytest.approx(oracle[key], rel=1e-9), key
    assert oracles[0]["trace"] != pytest.approx(oracles[1]["trace"])  # two different windows
    meter = NoiseScaleMeter(decay=0.9)
    for oracle in oracles:
        meter.add(NoiseEstimate(oracle["gradient_sq_norm"], oracle["trace"]))
    assert results[0]["meter"]["b_simple"] == pytest.approx(meter.b_simple, rel=1e-9)


def test_ddp_noise_scale_refuses_a_single_process():
    from torch.nn.parallel import DistributedDataParallel

    from coursekit.distributed import ensure_single_process_group
    from coursekit.noise_scale import DDPNoiseScale

    ensure_single_process_group()
    ddp = DistributedDataParallel(tiny_mlp(3, depth=1, seed=0))
    with pytest.raises(ValueError, match="at least 2 processes"):
        DDPNoiseScale(ddp, local_batch_size=4)


# ---------------------------------------------------------------- the meter and bad input


def test_meter_takes_the_ratio_of_bias_corrected_averages():
    meter = NoiseScaleMeter(decay=0.5)
    assert math.isnan(meter.b_simple)
    # (small, big) at b = 1, B = 4 for |G|^2 = 1, tr = 2, then |G|^2 = 3, tr = 2
    assert meter.update(3.0, 1.5, 1, 4).as_dict() == {
        "gradient_sq_norm": 1.0,
        "trace": 2.0,
        "b_simple": 2.0,
    }
    meter.update(5.0, 3.5, 1, 4)
    # weights 1/3 and 2/3 (0.25 and 0.5 over 0.75): |G|^2 = 7/3, tr = 2
    assert meter.estimate.gradient_sq_norm == pytest.approx(7 / 3)
    assert meter.estimate.trace == pytest.approx(2.0)
    assert meter.b_simple == pytest.approx(6 / 7)  # not the averaged ratios, 10/9
    assert [row["b_simple"] for row in meter.history] == pytest.approx([2.0, 6 / 7])


def test_b_simple_of_a_zero_gradient_estimate():
    assert NoiseEstimate(0.0, 2.0).b_simple == math.inf
    assert NoiseEstimate(0.0, -2.0).b_simple == -math.inf
    assert math.isnan(NoiseEstimate(0.0, 0.0).b_simple)
    assert NoiseEstimate(-2.0, 4.0).b_simple == -2.0  # kept: one noisy estimate


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda: two_batch_estimate(2.0, 1.0, 4, 4), "must be larger than small_batch"),
        (lambda: two_batch_estimate(2.0, 1.0, 8, 4), "must be larger than small_batch"),
        (lambda: two_batch_estimate(2.0, 1.0, 0, 4), "small_batch must be at least 1"),
        (lambda: two_batch_estimate(-2.0, 1.0, 1, 4), "small_sq_norm must be in"),
        (lambda: NoiseScaleMeter(decay=1.0), "decay must be in"),
    ],
)
def test_bad_numbers_are_refused_with_a_reason(call, words):
    with pytest.raises(ValueError, match=words):
        call()


def test_bad_micro_batches_are_refused_with_a_reason():
    model, loss_fn, micro_batches = _problem("mse")
    with pytest.raises(ValueError, match="at least 2"):
        estimate_from_micro_batches(model, loss_fn, micro_batches[:1])
    uneven = [micro_batches[0], (micro_batches[1][0][:3], micro_batches[1][1][:3])]
    with pytest.raises(ValueError, match="sizes differ"):
        estimate_from_micro_batches(model, loss_fn, uneven)
    with pytest.raises(ValueError, match="differ in length"):
        per_sample_gradients(model, loss_fn, micro_batches[0][0], micro_batches[0][1][:2])


# ---------------------------------------------------------------- along training


def test_noise_scale_grows_as_the_loss_falls():
    """Toy problem: linear regression (8 inputs, Gaussian noise 0.5 on the targets), plain SGD
    (lr 0.05), 80 windows of 4 micro-batches of 16 fresh samples, seed 0. Far from the optimum
    the gradient's signal |G|^2 is large; near it |G|^2 shrinks towards 0 while the targets'
    noise keeps tr(Sigma) up, so B_simple grows (the truth by ~100x; the averaged estimate,
    which lags behind and is noisy near the optimum, by ~3x over these windows)."""
    inputs, targets = make_regression(80 * 4 * 16, 8, noise=0.5, seed=0)
    model = tiny_mlp(8, depth=1, seed=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    batches = split_micro_batches(inputs, targets, 16)
    windows = [batches[i : i + 4] for i in range(0, len(batches), 4)]
    before = true_noise_scale(model, nn.MSELoss(), inputs, targets)
    history = noise_scale_along_training(
        model, nn.MSELoss(), optimizer, windows, decay=0.95, progress=False
    )
    after = true_noise_scale(model, nn.MSELoss(), inputs, targets)
    assert [row["step"] for row in history] == list(range(80))
    early, late = history[5:15], history[-15:]
    assert max(row["loss"] for row in late) < 0.2 * history[0]["loss"]
    assert min(row["b_simple"] for row in late) > 2 * max(row["b_simple"] for row in early)
    assert after.b_simple > 10 * before.b_simple  # the truth agrees
    assert all(p.grad is None for p in model.parameters())  # zero_grad after the last step


def test_measuring_every_few_windows_skips_the_others():
    inputs, targets = make_regression(6 * 2 * 4, 3, seed=1)
    batches = split_micro_batches(inputs, targets, 4)
    windows = [batches[i : i + 2] for i in range(0, len(batches), 2)]
    model = tiny_mlp(3, depth=1, seed=1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    history = noise_scale_along_training(
        model, nn.MSELoss(), optimizer, windows, measure_every=4, progress=False
    )
    assert [row["step"] for row in history] == [0, 4]


# ---------------------------------------------------------------- the graded question


def _load(variant: str):
    namespace: dict = {}
    exec(code06.NOISE_SCALE[variant], namespace)  # test fixtures, written in student_code_06
    return namespace["noise_scale"]


def test_the_question_is_registered_for_module_6():
    question = QUESTIONS["noise_scale"]
    assert (question.module, question.points) == ("06_batch_size", 3)
    hidden = question.hidden_specs(random.Random(0))
    edge = [s for s in hidden if (s["micro_batches"], s["micro_batch_size"]) == (2, 1)]
    assert len(edge) == 2 and hidden == question.hidden_specs(random.Random(0))


@pytest.mark.parametrize("variant", [v for v in code06.NOISE_SCALE if v.startswith("correct")])
def test_every_correct_style_passes_the_public_checks(variant):
    assert evaluate("noise_scale", _load(variant)).status is Status.PASSED


@pytest.mark.parametrize("variant", [v for v in code06.NOISE_SCALE if not v.startswith("correct")])
def test_each_mistake_is_named_by_the_public_checks(variant):
    result = evaluate("noise_scale", _load(variant))
    if ("noise_scale", variant) in code06.UNNAMED:  # a crash, or a slip no name fits
        assert result.status in (Status.FAILED, Status.ERROR) and result.mistake is None
        return
    assert result.status is Status.FAILED, result.render()
    assert result.mistake == code06.NAMED_AS.get(variant, variant), result.render()


def test_the_reference_itself_passes_and_a_stub_is_not_attempted():
    assert evaluate("noise_scale", QUESTIONS["noise_scale"].reference()).status is Status.PASSED

    def stub(model, loss_fn, micro_batches):
        raise NotImplementedError

    assert evaluate("noise_scale", stub).status is Status.NOT_ATTEMPTED


@pytest.mark.slow  # over 4 s: out of the quick run (-m 'not slow')
@pytest.mark.grading
def test_mutation_on_seeds_0_to_9(monkeypatch):
    """What tests/test_mutation.py does, for this question alone: tests.helpers.mutation reads the
    variants from tests.corpora.student_code, which is pointed here at this module's variants."""
    shim = types.SimpleNamespace(
        BY_QUESTION=code06.BY_QUESTION,
        UNNAMED=code06.UNNAMED,
        ALSO_NAMED=code06.ALSO_NAMED,
        DESCRIBED=code06.DESCRIBED,
        mistake_of=lambda variant: code06.NAMED_AS.get(variant, variant),
        load=lambda _question, variant: _load(variant),
    )
    monkeypatch.setattr(mutation, "student_code", shim)
    assert len(mutation.mutants("noise_scale")) >= 10
    assert len(mutation.correct_styles("noise_scale")) >= 3
    score = mutation.score("noise_scale", range(10))
    assert not score.crashed, score.crashed
    assert not score.survived, score.survived
    assert not score.marked_down, score.marked_down
    assert not score.false_names, score.false_names


def test_the_mutation_sets_name_existing_mutants():
    named = {
        q for pairs in (code06.NON_TEXTBOOK, code06.HIDDEN_ONLY, code06.UNNAMED) for q in pairs
    }
    for question, variant in named | set(code06.ALSO_NAMED):
        assert variant in code06.BY_QUESTION[question] and not variant.startswith("correct")
    assert len(code06.NON_TEXTBOOK) >= 2
    assert set(code06.NAMED_AS) <= set(code06.NOISE_SCALE)


# ---------------------------------------------------------------- plots


def test_the_plots_draw_what_they_are_given():
    import matplotlib

    matplotlib.use("Agg")
    from coursekit.plots import plot_noise_estimate_check, plot_noise_scale_history

    history = [
        {"step": s, "loss": 1 / (s + 1), "b_simple": 5.0 + s, "raw_b_simple": r}
        for s, r in enumerate([4.0, -3.0, 9.0])
    ]
    figure = plot_noise_scale_history(history)
    loss_axes, noise_axes = figure.axes
    assert list(loss_axes.lines[0].get_xdata()) == [0, 1, 2]
    assert list(noise_axes.lines[0].get_ydata()) == [4.0, 9.0]  # the negative one left out
    rows = [{"label": "seed 0", "truth": 10.0, "meter": 11.0, "mean_of_ratios": 30.0}]
    assert len(plot_noise_estimate_check(rows).axes[0].patches) == 3


def test_a_meter_fed_estimates_averages_like_one_fed_norms():
    by_norms, by_estimates = NoiseScaleMeter(decay=0.5), NoiseScaleMeter(decay=0.5)
    for small, big in ((3.0, 1.5), (5.0, 2.0), (4.0, 1.0)):
        by_estimates.add(two_batch_estimate(small, big, 2, 8))
        by_norms.update(small, big, 2, 8)
    assert by_estimates.history == by_norms.history
    assert by_estimates.b_simple == by_norms.b_simple
