"""Pitfall 15: FSDP2's MixedPrecisionPolicy reduces, and with sync off sums, gradients in bf16
unless reduce_dtype says otherwise. One start of two gloo processes (about 15 s on 2 cores)
serves every assertion; the runs are deterministic, the margins several-fold."""

import pytest

from coursekit.distributed import run_workers

pytestmark = pytest.mark.module4


@pytest.fixture(scope="module")
def rows():
    results = run_workers(
        "coursekit.workers.fsdp_precision.reduce_dtype_run", 2, accum_steps=(1, 256)
    )
    assert [r["error"] for r in results[0]] == [r["error"] for r in results[1]]
    return {(r["policy"], r["sync"], r["accum_steps"]): r for r in results[0]}


@pytest.mark.slow  # over 4 s: out of the quick run (-m 'not slow')
def test_without_mixed_precision_fsdp2_accumulates_the_full_batch_gradient(rows):
    for sync in ("every", "last"):
        for n in (1, 256):
            assert rows["float32", sync, n]["error"] < 1e-6


def test_the_default_reduce_dtype_is_the_compute_dtype(rows):
    assert rows["bf16", "every", 1]["reduce_dtypes"] == ["bfloat16"]
    assert rows["bf16_reduce_fp32", "every", 1]["reduce_dtypes"] == ["float32"]
    assert rows["float32", "every", 1]["reduce_dtypes"] == ["float32"]
    # float32 costs twice the bytes of every reduce-scatter
    fp32_bytes = rows["bf16_reduce_fp32", "every", 256]["reduce_scatter_bytes"]
    assert fp32_bytes == 2 * rows["bf16", "every", 256]["reduce_scatter_bytes"]
    # with sync off there is one reduce-scatter per window, not one per micro-batch
    last_bytes = rows["bf16_reduce_fp32", "last", 256]["reduce_scatter_bytes"]
    assert fp32_bytes == 256 * last_bytes


def test_with_sync_off_gradients_wait_in_the_reduce_dtype(rows):
    assert rows["bf16", "last", 256]["waiting_dtype"] == "bfloat16"
    assert rows["bf16_reduce_fp32", "last", 256]["waiting_dtype"] == "float32"
    assert rows["float32", "last", 256]["waiting_dtype"] == "float32"
    assert rows["bf16", "every", 256]["waiting_dtype"] is None


def test_the_sharded_grad_is_a_float32_dtensor_whatever_the_policy(rows):
    assert {(r["grad_type"], r["grad_dtype"]) for r in rows.values()} == {("DTensor", "float32")}


def test_bf16_accumulation_with_sync_off_grows_with_n(rows):
    # measured 2.1e-3 at N = 1 and 2.9e-2 at N = 256
    alone = rows["bf16", "last", 1]["reduction_error"]
    summed = rows["bf16", "last", 256]["reduction_error"]
    assert 1e-4 < alone < 1e-2
    assert summed > 4 * alone
    # against the float64 oracle: measured 3.0e-2, against 2.7e-3 with reduce_dtype=float32
    assert rows["bf16", "last", 256]["error"] > 4 * rows["bf16_reduce_fp32", "last", 256]["error"]


def test_with_sync_every_micro_batch_the_sum_runs_in_float32(rows):
    # each bf16 reduce-scatter rounds one micro-batch's share, 1/N of the gradient, and FSDP2
    # adds the shares in float32: the rounding shrinks with N (measured 2.1e-3, then 2.6e-4)
    one, many = rows["bf16", "every", 1], rows["bf16", "every", 256]
    assert many["reduction_error"] < one["reduction_error"] / 3
    assert many["error"] < 1.5 * rows["bf16_reduce_fp32", "every", 256]["error"]


def test_a_float32_reduce_sums_the_same_bf16_gradients_whatever_the_sync(rows):
    # bf16 compute leaves ~3e-3 against float64 either way; the float32 sums agree to float32
    # rounding whether they run sharded (sync every) or unsharded (sync off)
    for n in (1, 256):
        every = rows["bf16_reduce_fp32", "every", n]["error"]
        last = rows["bf16_reduce_fp32", "last", n]["error"]
        assert 1e-4 < every < 1e-2
        assert abs(every - last) < 1e-5
