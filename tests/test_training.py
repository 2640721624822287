"""The reference loop against the full-batch oracle, data splitting, models, throughput."""

import copy

import pytest
import torch
from torch import nn

from coursekit.checks.loop_variants import run_loop
from coursekit.data import make_classification, make_regression, split_micro_batches
from coursekit.models import tiny_mlp
from coursekit.training import samples_per_second, train_accumulated, windows

pytestmark = pytest.mark.module1


def weights(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def full_batch_steps(model, optimizer, inputs, targets, window_samples):
    """The oracle: one plain step per window on the window's samples, all in one batch."""
    start, losses = 0, []
    for size in window_samples:
        loss = nn.MSELoss()(model(inputs[start : start + size]), targets[start : start + size])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
        start += size
    return losses


@pytest.mark.parametrize(
    ("n_samples", "micro", "accum"), [(32, 4, 4), (40, 4, 4), (12, 4, 5), (30, 3, 1)]
)
def test_accumulated_training_equals_one_batch_per_window_in_float64(n_samples, micro, accum):
    inputs, targets = make_regression(n_samples, dtype=torch.float64, seed=3)
    model = tiny_mlp(dtype=torch.float64, seed=4)
    oracle = copy.deepcopy(model)
    window_samples = [min(micro * accum, n_samples - s) for s in range(0, n_samples, micro * accum)]

    losses = train_accumulated(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        nn.MSELoss(),
        split_micro_batches(inputs, targets, micro),
        accum,
    )
    expected = full_batch_steps(
        oracle, torch.optim.SGD(oracle.parameters(), lr=0.1), inputs, targets, window_samples
    )
    assert torch.allclose(weights(model), weights(oracle), rtol=0, atol=1e-12)
    assert losses == pytest.approx(expected, rel=1e-12)


def test_unequal_micro_batches_are_weighted_by_their_samples():
    inputs, targets = make_regression(10, dtype=torch.float64)
    model = tiny_mlp(dtype=torch.float64)
    oracle = copy.deepcopy(model)
    train_accumulated(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        nn.MSELoss(),
        split_micro_batches(inputs, targets, 4),
        accum_steps=3,  # sizes 4, 4, 2: one window
    )
    full_batch_steps(oracle, torch.optim.SGD(oracle.parameters(), lr=0.1), inputs, targets, [10])
    assert torch.allclose(weights(model), weights(oracle), rtol=0, atol=1e-12)


def test_gradients_match_the_full_batch_only_once_the_window_is_complete():
    from coursekit.gradients import flat_gradient, full_batch_gradient, relative_error

    inputs, targets = make_regression(8, dtype=torch.float64)
    model = tiny_mlp(dtype=torch.float64)
    expected = full_batch_gradient(model, nn.MSELoss(), inputs, targets)
    micro_batches = split_micro_batches(inputs, targets, 2)
    for x, y in micro_batches[:3]:  # three of a window of four
        (nn.MSELoss()(model(x), y) / 4).backward()
    assert relative_error(flat_gradient(model.parameters()), expected) > 1e-3
    x, y = micro_batches[3]
    (nn.MSELoss()(model(x), y) / 4).backward()
    assert relative_error(flat_gradient(model.parameters()), expected) < 1e-12


def test_the_checks_reference_variant_is_the_same_loop():
    inputs, targets = make_regression(40, dtype=torch.float64)
    a, b = tiny_mlp(dtype=torch.float64), tiny_mlp(dtype=torch.float64)
    micro_batches = split_micro_batches(inputs, targets, 4)
    la = train_accumulated(
        a, torch.optim.SGD(a.parameters(), lr=0.1), nn.MSELoss(), micro_batches, 3
    )
    lb = run_loop(b, torch.optim.SGD(b.parameters(), lr=0.1), nn.MSELoss(), micro_batches, 3)
    assert torch.allclose(weights(a), weights(b), rtol=0, atol=1e-12)
    assert la == pytest.approx(lb, rel=1e-12)


def test_windows_group_and_reject_a_zero_window():
    assert [len(w) for w in windows(list(range(10)), 4)] == [4, 4, 2]
    with pytest.raises(ValueError, match="accum_steps must be at least 1"):
        windows([1], 0)


def test_split_gives_consecutive_micro_batches_and_clear_errors():
    x, y = make_regression(10)
    parts = split_micro_batches(x, y, 4)
    assert [len(p[0]) for p in parts] == [4, 4, 2]
    assert torch.equal(torch.cat([p[0] for p in parts]), x)
    with pytest.raises(ValueError, match="at least 1"):
        split_micro_batches(x, y, 0)
    with pytest.raises(ValueError, match="differ in length"):
        split_micro_batches(x, y[:5], 2)


def test_data_and_models_are_reproducible_and_leave_the_global_seed_alone():
    torch.manual_seed(0)
    expected = torch.rand(2)
    torch.manual_seed(0)
    assert torch.equal(make_regression(5, seed=1)[0], make_regression(5, seed=1)[0])
    assert torch.equal(weights(tiny_mlp(seed=2)), weights(tiny_mlp(seed=2)))
    labels = make_classification(50, n_classes=3)[1]
    assert set(labels.tolist()) <= {0, 1, 2}
    assert torch.equal(torch.rand(2), expected)


def test_a_model_needs_one_layer():
    with pytest.raises(ValueError, match="depth must be at least 1"):
        tiny_mlp(depth=0)


def test_throughput_is_samples_over_the_median_repeat(monkeypatch):
    clock = iter([0.0, 0.5, 10.0, 10.25, 20.0, 21.0])  # repeats of 0.5 s, 0.25 s and 1 s
    monkeypatch.setattr("coursekit.training.time.perf_counter", lambda: next(clock))
    calls = []
    speed = samples_per_second(lambda: calls.append(1), n_samples=100, repeats=3, warmup=2)
    assert len(calls) == 5
    assert speed == pytest.approx(100 / 0.5)  # the median repeat: not the best (0.25 s)


def test_the_gpu_experiment_says_no_gpu_and_its_loop_runs_on_the_cpu(monkeypatch):
    from coursekit import gpu

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu.accumulation_on_gpu() is None
    assert "No CUDA GPU here" in gpu.NO_GPU
    runs = gpu.measure_accumulation(torch.device("cpu"), 32, (32, 8), hidden=16)
    assert [(r.micro_batch_size, r.accum_steps) for r in runs] == [(32, 1), (8, 4)]
    assert all(r.peak_bytes is None and r.samples_per_second > 0 for r in runs)
    with pytest.raises(ValueError, match="does not divide"):
        gpu.measure_accumulation(torch.device("cpu"), 32, (5,), hidden=16)
