"""Pitfall 12, ``no_sync`` with ZeRO-2/3: skipping ZeRO-2's per-micro-batch reduce-scatter
keeps the whole gradient on every process (1 psi instead of 1/P psi), and the gradient comes
out the same. The model of ZeRO-2 runs in 2 gloo processes (one start, about 5 s); the test
of DeepSpeed's real engine runs only where DeepSpeed is installed.
"""

import pytest

from coursekit.distributed import run_workers

pytestmark = pytest.mark.module4

WORKERS = "coursekit.workers.zero_no_sync"
ACCUM_STEPS = 4


@pytest.fixture(scope="module")
def model_results():
    return run_workers(f"{WORKERS}.zero2_model_run", 2, progress=False, accum_steps=ACCUM_STEPS)


def test_zero2_holds_a_shard_and_no_sync_the_whole_gradient(model_results):
    for result in model_results:
        psi = result["parameter_bytes"]
        zero2 = result["variants"]["zero2"]["held_bytes"]
        no_sync = result["variants"]["zero2_no_sync"]["held_bytes"]
        # half of psi with 2 processes; each parameter's shard is padded by at most 1 element
        assert all(psi / 2 <= held <= psi / 2 + 8 * 6 for held in zero2)
        assert no_sync[:-1] == [psi] * (ACCUM_STEPS - 1)  # the whole gradient, waiting
        assert no_sync[-1] == zero2[-1]  # reduced at last, back to the shard


def test_both_give_the_full_batch_gradient(model_results):
    for result in model_results:
        for variant in result["variants"].values():
            assert variant["gap_to_full_batch"] < 1e-12


def test_no_sync_reduces_once_instead_of_every_micro_batch(model_results):
    variants = model_results[0]["variants"]
    zero2, no_sync = variants["zero2"], variants["zero2_no_sync"]
    assert zero2["reduce_scatters"] == ACCUM_STEPS * no_sync["reduce_scatters"]
    assert zero2["bytes_reduced"] == ACCUM_STEPS * no_sync["bytes_reduced"]


def test_deepspeed_refuses_no_sync_at_stages_2_and_3():
    pytest.importorskip("deepspeed")
    results = run_workers(f"{WORKERS}.deepspeed_run", 2, progress=False)
    for result in results:
        stages = result["stages"]
        assert stages[0]["no_sync"] == stages[1]["no_sync"] == "ok"
        for stage in (2, 3):
            assert stages[stage]["no_sync"] == (
                "AssertionError: no_sync context manager is incompatible with gradient "
                f"partitioning logic of ZeRO stage {stage}"
            )
        assert stages[2]["accumulation"]["grad_held_psi"] == [0.0] * 4
        if "coalesced" in stages[2]:  # the opt-in keeps whole gradients on the parameters
            assert stages[2]["coalesced"]["grad_held_psi"] == [1.0] * 4
