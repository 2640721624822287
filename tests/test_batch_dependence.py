"""Module 3's library: dependence between samples, BatchNorm repairs, GradCache, the CNN task."""

import copy

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from coursekit.batch_norm import (
    accumulated_gradient,
    batch_norms,
    batchnorm_report,
    convert_batchnorm,
    corrected_momentum,
    depends_on_other_samples,
    freeze_batchnorm,
    gradient_gap,
    set_accumulation_momentum,
)
from coursekit.contrastive import (
    grad_cache_step,
    info_nce,
    make_pairs,
    naive_accumulation,
    tiny_encoder,
)
from coursekit.data import make_images, make_regression
from coursekit.gradients import flat_gradient, full_batch_gradient, relative_error
from coursekit.models import norm_layer, tiny_cnn, tiny_mlp
from coursekit.vision import accuracy, train_classifier

pytestmark = pytest.mark.module3


@pytest.mark.parametrize(
    ("norm", "mixes"), [("none", False), ("layer", False), ("group", False), ("batch", True)]
)
def test_only_batchnorm_in_train_mode_makes_samples_depend_on_each_other(norm, mixes):
    model = tiny_mlp(norm=norm, dtype=torch.float64)
    inputs, _ = make_regression(8, dtype=torch.float64)
    assert (depends_on_other_samples(model, inputs) > 0) == mixes
    assert depends_on_other_samples(model.eval(), inputs) == 0.0


@pytest.mark.parametrize("norm", ["none", "layer", "group"])
def test_per_sample_norms_accumulate_to_the_full_batch_gradient(norm):
    model = tiny_cnn(norm, dtype=torch.float64)
    images, labels = make_images(12, dtype=torch.float64)
    gap = gradient_gap(model, nn.CrossEntropyLoss(), images, labels, micro_batch_size=3)
    assert gap.relative_error < 1e-12
    assert gap.cosine == pytest.approx(1.0, abs=1e-12)


def test_batchnorm_gap_grows_as_micro_batches_shrink_and_vanishes_without_accumulation():
    model = tiny_mlp(hidden=32, depth=3, norm="batch", dtype=torch.float64)
    inputs, targets = make_regression(64, dtype=torch.float64)
    gaps = [gradient_gap(model, nn.MSELoss(), inputs, targets, m).relative_error for m in (2, 8)]
    assert gaps[0] > gaps[1] > 1e-3
    assert gradient_gap(model, nn.MSELoss(), inputs, targets, 64).relative_error == 0.0


def test_accumulated_gradient_weights_a_smaller_last_micro_batch_by_its_size():
    model = tiny_mlp(dtype=torch.float64)
    inputs, targets = make_regression(10, dtype=torch.float64)
    accumulated = accumulated_gradient(model, nn.MSELoss(), inputs, targets, micro_batch_size=4)
    expected = full_batch_gradient(model, nn.MSELoss(), inputs, targets)
    assert relative_error(accumulated, expected) < 1e-12
    assert model[0].weight.grad is None  # the model itself is untouched


@given(momentum=st.floats(0.001, 0.999), accum_steps=st.integers(1, 64))
def test_n_corrected_updates_forget_as_much_as_one_update(momentum, accum_steps):
    corrected = corrected_momentum(momentum, accum_steps)
    assert (1 - corrected) ** accum_steps == pytest.approx(1 - momentum, rel=1e-9)
    assert 0 < corrected <= momentum * (1 + 1e-12)  # never more than the original


def test_the_momentum_correction_reaches_every_batchnorm_and_skips_none():
    model = nn.Sequential(
        nn.BatchNorm1d(2, momentum=0.1),
        nn.Sequential(nn.Sequential(nn.BatchNorm2d(3, momentum=0.5))),
        nn.BatchNorm1d(2, momentum=None),
        nn.GroupNorm(1, 2),
    )
    set_accumulation_momentum(model, 4)
    assert [m.momentum for m in batch_norms(model)] == pytest.approx(
        [corrected_momentum(0.1, 4), corrected_momentum(0.5, 4), None]
    )


def test_corrected_running_mean_forgets_like_one_update_on_constant_data():
    layer = nn.BatchNorm1d(1, momentum=0.1).double()
    single = copy.deepcopy(layer)
    set_accumulation_momentum(layer, 4)
    data = torch.full((8, 1), 3.0, dtype=torch.float64)
    with torch.no_grad():
        for chunk in data.split(2):
            layer(chunk)
        single(data)
    assert layer.running_mean.item() == pytest.approx(single.running_mean.item(), rel=1e-12)


def test_converting_to_group_norm_keeps_affine_values_dtype_and_nested_layers():
    model = tiny_cnn("batch", dtype=torch.float64)
    with torch.no_grad():
        for layer in batch_norms(model):
            layer.weight.uniform_(0.5, 2.0)
            layer.bias.uniform_(-1.0, 1.0)
    weights = [layer.weight.clone() for layer in batch_norms(model)]
    nested = nn.Sequential(model)
    converted = convert_batchnorm(nested, num_groups=4)
    assert converted is nested
    groups = [m for m in converted.modules() if isinstance(m, nn.GroupNorm)]
    assert not list(batch_norms(converted)) and len(groups) == 3
    assert all(g.num_groups == 4 and g.weight.dtype == torch.float64 for g in groups)
    assert all(torch.equal(g.weight, w) for g, w in zip(groups, weights, strict=True))


def test_frozen_batchnorm_is_exact_until_train_is_called_again():
    model = tiny_cnn("batch", dtype=torch.float64)
    images, labels = make_images(8, dtype=torch.float64)
    freeze_batchnorm(model)
    assert gradient_gap(model, nn.CrossEntropyLoss(), images, labels, 2).relative_error < 1e-12
    model.train()
    assert gradient_gap(model, nn.CrossEntropyLoss(), images, labels, 2).relative_error > 1e-3


def test_the_explorer_report_shows_the_corrected_window_weight_and_no_stats_for_group_norm():
    plain = batchnorm_report(4, 4, "batch", corrected=False)
    fixed = batchnorm_report(4, 4, "batch", corrected=True)
    assert plain.window_weight == pytest.approx(1 - 0.9**4)
    assert fixed.window_weight == pytest.approx(0.1)
    assert fixed.running_mean_gap < plain.running_mean_gap
    assert plain.gap.relative_error == fixed.gap.relative_error > 1e-3
    group = batchnorm_report(4, 4, "group")
    assert group.window_weight is None and group.gap.relative_error < 1e-12


def test_unknown_norm_names_are_refused():
    with pytest.raises(ValueError, match="'layer', 'none'; got 'instance'"):
        norm_layer("instance", 4)


# ---------------------------------------------------------------- contrastive


@pytest.mark.parametrize(("n_pairs", "micro_batch_size"), [(12, 4), (10, 4), (7, 7), (9, 2)])
def test_grad_cache_gives_the_full_batch_gradient_and_loss(n_pairs, micro_batch_size):
    queries, keys = make_pairs(n_pairs, dtype=torch.float64)
    encoder = tiny_encoder(dtype=torch.float64)
    full = copy.deepcopy(encoder)
    expected_loss = info_nce(full(queries), full(keys), 0.2)
    expected_loss.backward()
    loss = grad_cache_step(encoder, queries, keys, micro_batch_size, 0.2)
    gap = relative_error(flat_gradient(encoder.parameters()), flat_gradient(full.parameters()))
    assert gap < 1e-12
    assert loss == pytest.approx(expected_loss.item(), rel=1e-12)


def test_plain_accumulation_of_in_batch_negatives_is_a_different_easier_loss():
    queries, keys = make_pairs(32, dtype=torch.float64)
    encoder = tiny_encoder(dtype=torch.float64)
    full_loss = info_nce(encoder(queries), encoder(keys)).item()
    assert naive_accumulation(copy.deepcopy(encoder), queries, keys, 4) < full_loss


# ---------------------------------------------------------------- the vision task


def test_images_are_deterministic_labelled_and_vary_in_brightness():
    images, labels = make_images(64, size=10, seed=3)
    again, _ = make_images(64, size=10, seed=3)
    assert images.shape == (64, 1, 10, 10) and torch.equal(images, again)
    assert set(labels.tolist()) == {0, 1, 2, 3}
    assert images.mean(dim=(1, 2, 3)).std() > 1.0  # images differ in brightness


def test_training_logs_a_loss_per_step_and_an_accuracy_per_epoch_and_keeps_the_mode():
    model = tiny_cnn("group")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    run = train_classifier(
        model, optimizer, make_images(64), make_images(32, seed=1), 4, 2, epochs=2
    )
    assert len(run.step_losses) == 2 * 64 // 8 and len(run.test_accuracy) == 2
    model.train()
    accuracy(model, *make_images(8))
    assert model.training


def test_negatives_gathered_across_two_processes_give_the_full_batch_gradient_with_grad_cache():
    from coursekit.distributed import run_workers

    for outcome in run_workers(
        "coursekit.workers.contrastive.gathered_negatives_run", 2, progress=False
    ):
        local = outcome["local_negatives"]
        assert local["keys_per_query"] == 8 and local["gap"] > 0.05  # only its own keys
        unwired = outcome["gathered_without_own_slot"]
        assert unwired["keys_per_query"] == 16 and "does not require grad" in unwired["error"]
        gathered = outcome["gathered"]
        assert gathered["keys_per_query"] == 16 and gathered["gap"] < 1e-12
