"""ZeRO memory per device and DeepSpeed's batch arithmetic (groundwork for module 4)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coursekit.zero import (
    COLLECTIVES,
    BatchConfig,
    bytes_sent_per_process,
    communication_per_step,
    deepspeed_communication_per_step,
    resolve_batch_config,
    zero_bytes_per_device,
)

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


# ---------------------------------------------------------------- communication beyond the paper


@pytest.mark.parametrize("accum_steps", [1, 2, 4, 7])
def test_deepspeed_defaults_all_reduce_where_the_paper_reduce_scatters(accum_steps):
    # measured on DeepSpeed 0.19.8 (the review): 3 psi at stage 1, 9 psi for 4 at stage 2
    assert deepspeed_communication_per_step(1, accum_steps) == 3.0
    assert deepspeed_communication_per_step(2, accum_steps) == 2 * accum_steps + 1
    # with use_multi_rank_bucket_allreduce off, the engine moves the paper's volumes
    for stage, setup in ((1, "zero1"), (2, "zero2")):
        off = deepspeed_communication_per_step(
            stage, accum_steps, multi_rank_bucket_allreduce=False
        )
        assert off == communication_per_step(setup, accum_steps)
    with pytest.raises(ValueError, match="stage must be one of 1, 2"):
        deepspeed_communication_per_step(3, accum_steps)


@pytest.mark.parametrize("world_size", [2, 3, 8, 64])
@pytest.mark.parametrize("setup", ["ddp", "ddp_no_sync", "zero1", "zero2", "fsdp", "fsdp_no_sync"])
def test_a_ring_sends_the_papers_volume_times_p_minus_1_over_p(setup, world_size):
    ring = bytes_sent_per_process(setup, 4, world_size, gloo=False)
    paper = communication_per_step(setup, 4)
    assert ring == pytest.approx(paper * (world_size - 1) / world_size)
    # gloo's reduce-scatter is a whole all-reduce: never less than a ring, more when used
    gloo = bytes_sent_per_process(setup, 4, world_size)
    uses_reduce_scatter = "reduce_scatter" in COLLECTIVES[setup]
    assert (gloo > ring) if uses_reduce_scatter else (gloo == ring)


def test_zero1_no_sync_has_no_single_figure_per_process():
    with pytest.raises(ValueError, match="uneven"):
        bytes_sent_per_process("zero1_no_sync", 4, 2)
