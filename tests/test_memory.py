"""Activation bytes (exact), the linear fit, optimizer state, the breakdown, CUDA peaks."""

import pytest
import torch
from torch import nn

from coursekit.memory import (
    activation_bytes,
    activation_bytes_by_size,
    fit_bytes_per_sample,
    memory_breakdown,
    optimizer_state_bytes,
    track_cuda_peak,
)
from coursekit.models import tiny_mlp
from coursekit.units import format_bytes

pytestmark = pytest.mark.module1


def test_a_linear_layer_saves_its_input_and_nothing_of_its_own():
    assert activation_bytes(nn.Linear(4, 2), torch.zeros(8, 4)) == 8 * 4 * 4


def test_the_mlp_saves_its_input_and_each_tanh_output_once():
    model = tiny_mlp(in_features=64, hidden=256, depth=4)
    per_sample = (64 + 3 * 256) * 4
    for size in (1, 3, 32):
        assert activation_bytes(model, torch.zeros(size, 64)) == per_sample * size


def test_float64_doubles_the_bytes():
    model32 = tiny_mlp(depth=3)
    model64 = tiny_mlp(depth=3, dtype=torch.float64)
    x = torch.zeros(5, 8)
    assert activation_bytes(model64, x.double()) == 2 * activation_bytes(model32, x)


def test_parameters_are_not_counted_even_when_saved_for_backward():
    # x @ W saves W (a parameter) for the input's gradient, and x for W's gradient.
    class Bilinear(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(4, 4))

        def forward(self, x):
            return x.requires_grad_() @ self.weight

    assert activation_bytes(Bilinear(), torch.zeros(2, 4)) == 2 * 4 * 4


def test_the_loss_is_counted_when_given():
    model = nn.Linear(3, 2)
    without = activation_bytes(model, torch.zeros(4, 3))
    with_loss = activation_bytes(model, torch.zeros(4, 3), torch.zeros(4, 2), nn.MSELoss())
    assert with_loss > without


def test_the_fit_recovers_bytes_per_sample_exactly():
    model = tiny_mlp(in_features=16, hidden=32, depth=3)
    measured = activation_bytes_by_size(model, lambda n: torch.zeros(n, 16), [1, 2, 4, 8])
    fit = fit_bytes_per_sample(measured)
    assert fit.bytes_per_sample == pytest.approx((16 + 2 * 32) * 4)
    assert abs(fit.intercept_bytes) < 1e-6
    assert fit.max_relative_error < 1e-9
    assert fit.predict(100) == pytest.approx(100 * (16 + 2 * 32) * 4)


def test_a_fit_needs_two_points():
    with pytest.raises(ValueError, match="at least two"):
        fit_bytes_per_sample({4: 100})


@pytest.mark.parametrize(
    ("make", "slots"),
    [
        (lambda p: torch.optim.SGD(p, lr=0.1), 0),
        (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), 1),
        (lambda p: torch.optim.Adam(p), 2),
        (lambda p: torch.optim.AdamW(p, amsgrad=True), 3),
        (lambda p: torch.optim.RMSprop(p, momentum=0.9, centered=True), 3),
        (lambda p: torch.optim.NAdam(p), 2),
    ],
)
def test_optimizer_state_is_predicted_before_the_first_step_and_measured_after(make, slots):
    model = tiny_mlp()
    optimizer = make(model.parameters())
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    assert optimizer_state_bytes(optimizer) == slots * param_bytes
    model(torch.randn(4, 8)).sum().backward()
    optimizer.step()
    assert optimizer_state_bytes(optimizer) == slots * param_bytes


def test_the_breakdown_adds_up_and_only_activations_follow_the_micro_batch():
    model = tiny_mlp(in_features=8, hidden=16, depth=2)
    optimizer = torch.optim.Adam(model.parameters())
    small = memory_breakdown(model, optimizer, torch.zeros(2, 8))
    large = memory_breakdown(model, optimizer, torch.zeros(20, 8))
    assert small.params_bytes == large.params_bytes == small.grads_bytes
    assert small.optimizer_state_bytes == 2 * small.params_bytes
    assert large.activation_bytes == 10 * small.activation_bytes
    assert small.total_bytes == sum(small.parts().values())
    assert "activations" in str(small) and "total" in str(small)


def test_the_cuda_peak_says_why_it_is_empty_without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with track_cuda_peak() as peak:
        torch.zeros(10)
    assert peak.peak_bytes is None and "no CUDA" in peak.reason


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_cuda_peak_sees_an_allocation():
    with track_cuda_peak() as peak:
        block = torch.empty(2**20, device="cuda")
        del block
    assert peak.peak_bytes >= 4 * 2**20


@pytest.mark.parametrize(
    ("n", "text"), [(0, "0 B"), (1023, "1023 B"), (1536, "1.5 KiB"), (3 * 2**30, "3.0 GiB")]
)
def test_bytes_are_formatted_in_binary_units(n, text):
    assert format_bytes(n) == text


def test_a_sliced_micro_batch_counts_as_the_slice_not_the_data_set():
    model = tiny_mlp(in_features=64, hidden=256, depth=4)
    data = torch.randn(1024, 64)
    assert activation_bytes(model, data[:8]) == activation_bytes(model, torch.randn(8, 64))


def test_measuring_leaves_batchnorm_statistics_and_random_numbers_alone():
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Dropout(0.5))
    before = [b.clone() for b in model.buffers()]
    batch = torch.randn(8, 4)
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    activation_bytes(model, batch)
    assert torch.equal(torch.rand(3), expected)
    assert all(torch.equal(a, b) for a, b in zip(before, model.buffers(), strict=True))


def test_measuring_works_under_no_grad():
    with torch.no_grad():
        assert activation_bytes(nn.Linear(4, 2), torch.zeros(8, 4)) == 128


def test_an_optimizer_it_cannot_predict_says_so():
    optimizer = torch.optim.LBFGS(tiny_mlp().parameters())
    with pytest.raises(ValueError, match="step"):
        optimizer_state_bytes(optimizer)
