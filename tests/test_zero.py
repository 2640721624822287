"""ZeRO memory per device and DeepSpeed's batch arithmetic (groundwork for module 4)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coursekit.zero import BatchConfig, resolve_batch_config, zero_bytes_per_device

pytestmark = pytest.mark.module4


def test_the_papers_table_for_7_5b_parameters_on_64_devices():
    gigabytes = [round(zero_bytes_per_device(7.5e9, stage, 64) / 1e9, 1) for stage in range(4)]
    assert gigabytes == [120.0, 31.4, 16.6, 1.9]


@given(psi=st.floats(1e3, 1e12), world_size=st.integers(1, 4096))
def test_each_stage_needs_no_more_than_the_one_before_and_one_device_shards_nothing(
    psi, world_size
):
    per_stage = [zero_bytes_per_device(psi, stage, world_size) for stage in range(4)]
    assert all(a >= b * (1 - 1e-12) for a, b in zip(per_stage[:-1], per_stage[1:], strict=True))
    for stage in range(4):
        assert zero_bytes_per_device(psi, stage, 1) == pytest.approx(16 * psi, rel=1e-12)


def test_bad_stages_and_world_sizes_are_explained():
    with pytest.raises(ValueError, match="stage must be one of 0, 1, 2, 3; got 4"):
        zero_bytes_per_device(1e9, 4, 8)
    with pytest.raises(ValueError, match="world_size"):
        zero_bytes_per_device(1e9, 1, 0)


@pytest.mark.parametrize(
    "given_settings",
    [
        {"train_batch_size": 256, "train_micro_batch_size_per_gpu": 8},
        {"train_batch_size": 256, "gradient_accumulation_steps": 8},
        {"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 8},
        {
            "train_batch_size": 256,
            "train_micro_batch_size_per_gpu": 8,
            "gradient_accumulation_steps": 8,
        },
    ],
)
def test_any_two_settings_give_the_third(given_settings):
    assert resolve_batch_config(4, **given_settings) == BatchConfig(256, 8, 8, 4)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"train_batch_size": 100, "train_micro_batch_size_per_gpu": 8}, "not a multiple"),
        ({"train_batch_size": 100, "gradient_accumulation_steps": 3}, "not a multiple"),
        (
            {
                "train_batch_size": 128,
                "train_micro_batch_size_per_gpu": 8,
                "gradient_accumulation_steps": 8,
            },
            "Inconsistent batch settings: train_batch_size 128 != .* = 8 x 8 x 4 = 256",
        ),
        ({"train_batch_size": 256}, "gradient_accumulation_steps are missing"),
        ({"train_batch_size": 0, "gradient_accumulation_steps": 2}, "must be at least 1"),
        ({"train_batch_size": 2, "train_micro_batch_size_per_gpu": 8}, "not a multiple"),
    ],
)
def test_inconsistent_or_incomplete_settings_are_refused_with_the_arithmetic(settings, message):
    with pytest.raises(ValueError, match=message):
        resolve_batch_config(4, **settings)
