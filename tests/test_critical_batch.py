"""Module 6: the steps-vs-samples trade-off, the critical batch, and the accumulation advice."""

from __future__ import annotations

import math

import pytest
import torch

from coursekit.critical_batch import (
    batch_size_sweep,
    diverged,
    fit_hyperbola,
    linear_scaling_sweep,
    lr_scaling_runs,
    make_task,
    measure_throughput,
    should_accumulate,
    steps_to_target,
    warmup_runs,
)
from coursekit.widgets import advisor_html

LRS = [0.5, 1, 2, 4, 8, 16]


@pytest.fixture(scope="module")
def task():
    return make_task(seed=0)


def hyperbola_points(min_steps, min_samples, sizes):
    steps = [min_steps * (1 + (min_samples / min_steps) / b) for b in sizes]
    return steps, [b * s for b, s in zip(sizes, steps, strict=True)]


def test_fit_recovers_an_exact_hyperbola():
    steps, samples = hyperbola_points(20.0, 4000.0, [8, 32, 128, 512, 2048])
    fit = fit_hyperbola(steps, samples)
    assert fit.min_steps == pytest.approx(20.0)
    assert fit.min_samples == pytest.approx(4000.0)
    assert fit.critical_batch == pytest.approx(200.0)
    assert fit.rms_log_error < 1e-9
    assert fit.steps(200.0) == pytest.approx(40.0) and fit.samples(200.0) == pytest.approx(8000)


def test_fit_recovers_a_noisy_hyperbola_within_tolerance():
    sizes = [2**k for k in range(2, 13)]
    steps, samples = hyperbola_points(20.0, 4000.0, sizes)
    noise = torch.exp(0.1 * torch.randn(len(sizes), generator=torch.Generator().manual_seed(1)))
    noisy = [s * float(n) for s, n in zip(steps, noise, strict=True)]
    fit = fit_hyperbola(noisy, [b * s for b, s in zip(sizes, noisy, strict=True)])
    assert fit.min_steps == pytest.approx(20.0, rel=0.15)
    assert fit.min_samples == pytest.approx(4000.0, rel=0.15)
    assert 0.03 < fit.rms_log_error < 0.2


def test_fit_refuses_too_few_points_and_points_that_do_not_bend():
    with pytest.raises(ValueError, match="at least 3"):
        fit_hyperbola([10, 20], [100, 200])
    with pytest.raises(ValueError, match="both sides of the critical batch"):
        fit_hyperbola([10, 20, 40], [10, 80, 640])  # more steps at larger B: E_min < 0


def test_accumulation_takes_the_same_steps_as_the_whole_batch(task):
    target = task.floor_loss + 0.01
    whole_batch = steps_to_target(task, 256, 4.0, target)
    assert whole_batch is not None
    assert steps_to_target(task, 256, 4.0, target, micro_batch_size=64) == whole_batch
    assert steps_to_target(task, 256, 4.0, target, micro_batch_size=48) == whole_batch  # uneven
    assert steps_to_target(task, 256, 0.5, target) != whole_batch  # the count can differ


def test_steps_to_target_says_none_when_the_target_is_out_of_reach(task):
    assert steps_to_target(task, 64, 1.0, task.floor_loss - 0.01, max_steps=20) is None


def test_the_sweep_shows_both_regimes(task):
    sweep = batch_size_sweep(task, [8, 32, 512, 2048], LRS, task.floor_loss + 0.01, progress=False)
    small, medium, large, huge = sweep
    assert all(p.steps is not None and p.samples == p.batch_size * p.steps for p in sweep)
    # noise-limited: 4x the batch, steps fall about 4x, samples stay (flat would give 4x)
    assert medium.samples / small.samples < 2.5
    # curvature-limited: 4x the batch, steps stay (constant samples would give 1/4)
    assert huge.steps / large.steps > 0.5
    fit = fit_hyperbola([p.steps for p in sweep], [p.samples for p in sweep])
    assert 32 < fit.critical_batch < 1024


def test_linear_scaling_stops_helping_past_the_critical_batch(task):
    sweep = linear_scaling_sweep(
        task, 16, 1.0, [16, 64, 1024], task.floor_loss + 0.01, max_steps=400, progress=False
    )
    base, scaled, far = sweep
    assert scaled.samples is not None and scaled.samples < 2 * base.samples
    assert far.samples is None or far.samples > 3 * base.samples


def test_lr_scaling_runs_label_every_rule(task):
    runs = lr_scaling_runs(task, samples=1024)
    assert len(runs) == 7
    assert {run.optimizer for run in runs.values()} == {"sgd", "adam"}
    warm = next(run for label, run in runs.items() if "warm-up 8 steps" in label)
    assert warm.warmup_steps == 8 and warm.lr == 8.0
    assert all(
        run.samples[-1] == 1024 and run.losses[0] == pytest.approx(math.log(2))
        for run in runs.values()
    )
    with pytest.raises(ValueError, match="must be larger than base_batch"):
        lr_scaling_runs(task, base_batch=64, new_batch=64)


@pytest.mark.slow  # over 3 s: out of the quick run (-m 'not slow')
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_without_warmup_the_large_batch_diverges_and_warmup_fixes_it(seed):
    base, base_warm, large, large_warm = warmup_runs(seed).values()
    assert (large.batch_size, large.lr, large_warm.warmup_steps) == (128, 0.48, 64)
    assert diverged(large)  # 8x the batch at 8x the rate, straight away
    assert not any(diverged(run) for run in (base, base_warm, large_warm))
    assert base.losses[-1] < base.losses[0] / 10  # the base run trains
    assert large_warm.samples[-1] == base.samples[-1] == 16384
    assert large_warm.losses[-1] < 2.5 * base.losses[-1]  # warmed up, nearly as good
    assert base_warm.losses[-1] < 1.5 * base.losses[-1]  # at the base batch it is not needed


def test_diverged_and_warmup_runs_check_their_input():
    from coursekit.critical_batch import LossCurve

    assert diverged(LossCurve([0, 8], [1.0, float("nan")], 8, 1.0, 0, "sgd"))
    assert diverged(LossCurve([0, 8], [1.0, 11.0], 8, 1.0, 0, "sgd"))
    assert not diverged(LossCurve([0, 8, 16], [1.0, 50.0, 0.5], 8, 1.0, 0, "sgd"))  # recovered
    with pytest.raises(ValueError, match="must lie between new_batch"):
        warmup_runs(warmup_samples=64)
    with pytest.raises(ValueError, match="must be larger than base_batch"):
        warmup_runs(base_batch=128)


THROUGHPUT = {16: 800.0, 32: 1000.0, 64: 1100.0}


def test_advice_accumulates_below_the_critical_batch():
    advice = should_accumulate(32, THROUGHPUT, critical_batch=1024, target_batch=256)
    assert advice.action == "accumulate"
    assert (advice.micro_batch_size, advice.accum_steps, advice.effective_batch) == (32, 8, 256)
    assert advice.step_time_s == pytest.approx(256 / 1000)
    assert advice.relative_steps == pytest.approx(1 + 1024 / 256)


def test_advice_cuts_a_target_past_the_critical_batch():
    advice = should_accumulate(32, THROUGHPUT, critical_batch=128, target_batch=1024)
    assert advice.effective_batch == 128 and advice.accum_steps == 4
    assert "past the critical batch 128" in advice.reasons[0]


def test_advice_says_the_micro_batch_alone_is_past_the_critical_batch():
    advice = should_accumulate(64, THROUGHPUT, critical_batch=50, target_batch=512)
    assert advice.action == "as is" and advice.accum_steps == 1
    assert advice.effective_batch == 64
    assert any("already at or past the critical batch" in r for r in advice.reasons)


def test_advice_prefers_free_devices_to_accumulation():
    advice = should_accumulate(32, THROUGHPUT, 4096, 256, devices=2, more_devices_available=6)
    assert advice.action == "add devices"
    assert (advice.devices, advice.accum_steps, advice.effective_batch) == (8, 1, 256)
    assert advice.step_time_s == pytest.approx(32 / 1000)
    assert any("does not speed up a step" in r for r in advice.reasons)


def test_advice_when_the_target_fits_and_on_bad_input():
    assert should_accumulate(64, THROUGHPUT, 1024, 48).action == "as is"
    with pytest.raises(ValueError, match="no micro-batch size that fits"):
        should_accumulate(8, THROUGHPUT, 1024, 256)


def test_advisor_html_shows_the_advice_and_the_step_times():
    page = advisor_html(32, THROUGHPUT, 4096, 256, devices=1, more_devices_available=3)
    assert "advice: add devices" in page
    assert "256.0 ms" in page and "64.0 ms" in page  # 8 x 32 ms on one, 2 x 32 ms on four


def test_measure_throughput_counts_samples_per_second():
    model = torch.nn.Linear(4, 1)
    result = measure_throughput(
        model,
        torch.nn.functional.mse_loss,
        lambda n: (torch.zeros(n, 4), torch.zeros(n, 1)),
        [1, 8],
        repeats=2,
    )
    assert sorted(result) == [1, 8] and all(v > 0 for v in result.values())
    assert model.weight.grad is None


def test_measure_throughput_waits_for_cuda_kernels_only_on_a_gpu(monkeypatch):
    from coursekit.critical_batch import throughput

    waited = []
    monkeypatch.setattr(torch.cuda, "synchronize", waited.append)
    throughput._synchronize(torch.device("cpu"))
    assert waited == []
    throughput._synchronize(torch.device("cuda", 0))
    assert waited == [torch.device("cuda", 0)]


def test_measure_throughput_waits_before_and_after_every_timed_pass(monkeypatch):
    from coursekit.critical_batch import throughput

    events = []
    monkeypatch.setattr(throughput, "_synchronize", lambda device: events.append("wait"))
    model = torch.nn.Linear(4, 1)
    forward = model.forward
    monkeypatch.setattr(model, "forward", lambda x: events.append("pass") or forward(x))
    measure_throughput(
        model,
        torch.nn.functional.mse_loss,
        lambda n: (torch.zeros(n, 4), torch.zeros(n, 1)),
        [2],
        repeats=2,
    )
    assert events == ["wait", "pass", "wait"] * 3  # a warm-up pass, then 2 timed repeats


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_measure_throughput_times_a_model_on_the_gpu():
    model = torch.nn.Linear(4, 1).cuda()
    result = measure_throughput(
        model,
        torch.nn.functional.mse_loss,
        lambda n: (torch.zeros(n, 4, device="cuda"), torch.zeros(n, 1, device="cuda")),
        [1, 8],
        repeats=2,
    )
    assert sorted(result) == [1, 8] and all(v > 0 for v in result.values())
