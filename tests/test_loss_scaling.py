"""Module 2's library: token data and normalisations, loss factors, schedules, fp16 helpers."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from coursekit.data import make_regression, split_micro_batches
from coursekit.gradients import flat_gradient, full_batch_gradient, relative_error
from coursekit.loss_scaling import loss_scales, normalisation_errors
from coursekit.mixed_precision import (
    Autocast,
    amp_window,
    fp16_lost_fraction,
    scale_history,
)
from coursekit.models import tiny_lm, tiny_mlp
from coursekit.schedules import optimizer_steps, warmup_linear_decay
from coursekit.tokens import (
    BOS,
    IGNORE_INDEX,
    NORMALISATIONS,
    PAD,
    accumulate_tokens,
    count_tokens,
    global_token_scale,
    lm_loss,
    make_token_batches,
    split_token_batches,
    train_token_lm,
)

pytestmark = pytest.mark.module2


# ---------------------------------------------------------------- token data


def test_token_batches_are_padded_next_token_pairs():
    inputs, labels = make_token_batches(20, seq_len=10, padding_ratio=0.5, seed=2)
    assert inputs.shape == labels.shape == (20, 10)
    assert (inputs[:, 0] == BOS).all()
    padding = labels == IGNORE_INDEX
    assert ((inputs == PAD) == padding).all()  # padding positions line up
    real = ~padding
    assert (real[:, :-1] >= real[:, 1:]).all()  # real tokens first, then padding
    length = int(real[0].sum())
    assert torch.equal(inputs[0, 1:length], labels[0, : length - 1])  # labels are shifted inputs


@pytest.mark.parametrize("padding_ratio", [0.0, 0.25, 0.5, 0.75])
def test_the_padding_ratio_is_about_what_was_asked(padding_ratio):
    _, labels = make_token_batches(400, seq_len=16, padding_ratio=padding_ratio, seed=0)
    measured = 1 - count_tokens(labels) / labels.numel()
    assert abs(measured - padding_ratio) < 0.05


def test_the_same_seed_gives_the_same_batches_whatever_was_drawn_before():
    first = make_token_batches(5, seed=4)
    torch.rand(100)
    assert all(torch.equal(a, b) for a, b in zip(first, make_token_batches(5, seed=4), strict=True))


def test_bad_token_settings_are_explained():
    with pytest.raises(ValueError, match="padding_ratio"):
        make_token_batches(4, padding_ratio=1.0)
    with pytest.raises(ValueError, match="add up to 6"):
        split_token_batches(*make_token_batches(6), [2, 2])


# ---------------------------------------------------------------- normalisations


def window(seed=1, sizes=(2, 5, 3)):
    inputs, labels = make_token_batches(sum(sizes), seq_len=12, padding_ratio=0.5, seed=seed)
    model = tiny_lm(dtype=torch.float64, seed=seed)
    return model, inputs, labels, split_token_batches(inputs, labels, list(sizes))


def test_token_normalisation_equals_the_full_batch_mean_per_token():
    model, inputs, labels, micro_batches = window()
    expected = full_batch_gradient(model, lm_loss, inputs, labels)
    logged = accumulate_tokens(model, micro_batches)
    assert relative_error(flat_gradient(model.parameters()), expected) < 1e-12
    assert logged == pytest.approx(lm_loss(model(inputs), labels).item(), rel=1e-12)


@pytest.mark.parametrize("normalisation", sorted(set(NORMALISATIONS) - {"tokens"}))
def test_each_wrong_normalisation_misses_the_full_batch_gradient(normalisation):
    model, inputs, labels, micro_batches = window()
    expected = full_batch_gradient(model, lm_loss, inputs, labels)
    accumulate_tokens(model, micro_batches, normalisation)
    assert relative_error(flat_gradient(model.parameters()), expected) > 1e-3


def test_the_2024_bug_makes_the_logged_loss_depend_on_n_and_the_fix_does_not():
    inputs, labels = make_token_batches(32 * 6, seq_len=16, padding_ratio=0.5, seed=0)

    def final_losses(normalisation, accum_steps):
        model = tiny_lm(dtype=torch.float64)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        sizes = [32 // accum_steps] * (6 * accum_steps)
        micro_batches = split_token_batches(inputs, labels, sizes)
        return train_token_lm(model, optimizer, micro_batches, accum_steps, normalisation)

    fixed = [final_losses("tokens", n) for n in (1, 8, 32)]
    buggy = [final_losses("mean_of_means", n) for n in (1, 8, 32)]
    assert fixed[1] == pytest.approx(fixed[0], rel=1e-12)
    assert fixed[2] == pytest.approx(fixed[0], rel=1e-12)
    assert buggy[0] == pytest.approx(fixed[0], rel=1e-12)  # N = 1: nothing to average
    assert buggy[2][-1] > fixed[2][-1] * 1.01  # small micro-batches over-weight short sequences


def test_an_unknown_normalisation_is_refused():
    model, _, _, micro_batches = window()
    with pytest.raises(ValueError, match="normalisation"):
        accumulate_tokens(model, micro_batches, "median")


# ---------------------------------------------------------------- loss factors


@given(
    sizes=st.lists(st.integers(min_value=1, max_value=50), min_size=1, max_size=12),
    reduction=st.sampled_from(["mean", "sum"]),
)
def test_loss_scales_turn_the_summed_losses_into_the_mean_over_samples(sizes, reduction):
    # Per-micro-batch losses with every sample's loss equal to 1: the window's mean is 1.
    reduced = [1.0 if reduction == "mean" else float(size) for size in sizes]
    scales = loss_scales(sizes, reduction)
    assert len(scales) == len(sizes)
    assert math.isclose(sum(s * r for s, r in zip(scales, reduced, strict=True)), 1.0)


def test_loss_scales_refuse_an_unknown_reduction():
    with pytest.raises(ValueError, match="reduction"):
        loss_scales([1, 2], "max")


@given(
    accum_steps=st.integers(1, 12),
    padding_ratio=st.floats(0.0, 0.9),
    micro_batch_size=st.integers(1, 8),
    size_spread=st.floats(0.0, 1.0),
)
def test_the_explorer_shows_the_right_normalisation_exact_and_padding_as_padding(
    accum_steps, padding_ratio, micro_batch_size, size_spread
):
    errors = normalisation_errors(accum_steps, padding_ratio, micro_batch_size, size_spread)
    assert abs(errors["tokens"]) < 1e-12
    assert errors["padding_counted"] <= 1e-12  # dividing by more positions than tokens
    assert errors["not_divided"] == pytest.approx(accum_steps - 1, abs=0.5 * accum_steps)


def test_with_equal_micro_batches_and_no_padding_only_the_missing_division_is_wrong():
    errors = normalisation_errors(4, padding_ratio=0.0, micro_batch_size=4, size_spread=0.0)
    assert abs(errors["padding_counted"]) < 1e-12
    assert abs(errors["sequence_mean"]) < 1e-12  # every sequence has the same length
    assert errors["not_divided"] == pytest.approx(3.0)


# ---------------------------------------------------------------- schedules


def test_optimizer_steps_count_the_last_shorter_window():
    assert optimizer_steps(10, 4) == 3
    assert optimizer_steps(8, 4, epochs=2) == 4
    with pytest.raises(ValueError):
        optimizer_steps(10, 0)


def test_the_schedule_warms_up_then_decays_to_zero_in_optimizer_steps():
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=2.0)
    scheduler = warmup_linear_decay(optimizer, warmup_steps=2, total_steps=6)
    rates = []
    for _ in range(7):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert rates == pytest.approx([1.0, 2.0, 2.0, 1.5, 1.0, 0.5, 0.0])
    with pytest.raises(ValueError, match="warmup_steps < total_steps"):
        warmup_linear_decay(optimizer, warmup_steps=6, total_steps=6)


# ---------------------------------------------------------------- fp16 and the scaler


def test_fp16_loses_values_below_its_smallest_subnormal():
    assert fp16_lost_fraction(torch.tensor([1e-3, 5e-8, 1e-9, 0.0])) == pytest.approx(1 / 3)
    assert fp16_lost_fraction(torch.zeros(3)) == 0.0


def amp_problem(inf_at=None):
    model = tiny_mlp(in_features=4, hidden=6, seed=3, dtype=torch.float64)
    inputs, targets = make_regression(12, in_features=4, seed=4, dtype=torch.float64)
    if inf_at is not None:
        targets[inf_at, 0] = float("inf")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    return model, optimizer, scaler, split_micro_batches(inputs, targets, 4)


def test_the_scaled_window_steps_like_the_plain_one_when_nothing_overflows():
    model, optimizer, scaler, micro_batches = amp_problem()
    plain = tiny_mlp(in_features=4, hidden=6, seed=3, dtype=torch.float64)
    plain_optimizer = torch.optim.SGD(plain.parameters(), lr=0.1)
    for x, y in micro_batches:
        (nn.functional.mse_loss(plain(x), y) / 3).backward()
    nn.utils.clip_grad_norm_(plain.parameters(), 0.5)
    plain_optimizer.step()
    amp_window(model, optimizer, scaler, nn.MSELoss(), micro_batches, max_norm=0.5)
    for a, b in zip(model.parameters(), plain.parameters(), strict=True):
        assert torch.allclose(a, b, rtol=1e-12, atol=1e-14)
    assert all(p.grad is None for p in model.parameters())


def test_an_inf_in_one_micro_batch_skips_the_whole_step_and_halves_the_scale():
    model, optimizer, scaler, micro_batches = amp_problem(inf_at=5)
    before = [p.detach().clone() for p in model.parameters()]
    amp_window(model, optimizer, scaler, nn.MSELoss(), micro_batches, max_norm=1.0)
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))
    assert scaler.get_scale() == 2.0**9
    assert all(p.grad is None for p in model.parameters())


def test_autocast_runs_the_forward_in_fp16_and_returns_float32():
    inner = nn.Linear(4, 2)
    seen = []
    inner.register_forward_hook(lambda _m, _i, output: seen.append(output.dtype))
    outputs = Autocast(inner, "cpu")(torch.randn(3, 4))
    assert seen == [torch.float16]
    assert outputs.dtype == torch.float32


def test_the_scale_history_backs_off_from_a_too_high_start_then_settles():
    scales, skipped = scale_history(amp_window, n_windows=24)
    assert len(scales) == len(skipped) == 24
    assert skipped[0] and scales[1] == scales[0] / 2
    assert not all(skipped[-8:])  # it found a scale that works
    assert min(scales) < scales[0]


def test_the_scale_history_takes_a_torch_device_and_a_seed(monkeypatch):
    default = scale_history(amp_window, n_windows=6)
    assert scale_history(amp_window, device=torch.device("cpu"), n_windows=6, seed=0) == default
    scales, skipped = scale_history(amp_window, n_windows=6, seed=1)
    assert len(scales) == len(skipped) == 6 and skipped[0]
    from coursekit import data

    drawn = []
    make_regression = data.make_regression
    monkeypatch.setattr(
        data,
        "make_regression",
        lambda *a, **k: drawn.append(k["seed"]) or make_regression(*a, **k),
    )
    scale_history(amp_window, n_windows=2, seed=7)
    assert drawn == [8]  # the data's seed follows the model's


def test_the_scale_history_gives_autocast_the_device_type_not_its_index(monkeypatch):
    """autocast and GradScaler take "cuda"; a notebook's device can be cuda:1."""
    from coursekit import mixed_precision

    kinds = []

    class Recorder(torch.amp.GradScaler):
        def __init__(self, device, **options):
            kinds.append(device)
            super().__init__("cpu", **options)

    monkeypatch.setattr(torch.amp, "GradScaler", Recorder)
    monkeypatch.setattr(
        mixed_precision, "Autocast", lambda model, kind: kinds.append(kind) or model
    )
    monkeypatch.setattr(torch.Tensor, "to", lambda self, *a, **k: self)
    monkeypatch.setattr(torch.nn.Module, "to", lambda self, *a, **k: self)
    scale_history(amp_window, device="cuda:1", n_windows=1)
    assert kinds == ["cuda", "cuda"]


def test_global_token_scale_in_one_process_is_one_over_the_count():
    assert global_token_scale([30, 10]) == 1 / 40
    assert global_token_scale(torch.tensor([0, 7])) == 1 / 7  # a micro-batch of padding only


@pytest.mark.parametrize(
    ("counts", "error", "words"),
    [
        (40, TypeError, "list of this rank's real-token counts"),
        ("40", TypeError, "list of this rank's real-token counts"),
        ([3, -1], ValueError, "at least 0"),
        ([True, 2], TypeError, "a bool"),
        ([2.5], TypeError, "whole number"),
        ([0, 0], ValueError, "No real token"),
        ([], ValueError, "No real token"),
    ],
)
def test_global_token_scale_explains_bad_counts(counts, error, words):
    with pytest.raises(error, match=words):
        global_token_scale(counts)
