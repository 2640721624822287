"""Step counts (coursekit.step_counts, exercise 5.3) against simulated loops and real frameworks."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from coursekit.step_counts import count_steps, deepspeed_boundaries, loop_boundaries

pytestmark = pytest.mark.module5


def simulate(micro: int, accum: int, epochs: int) -> tuple[int, int]:
    """Steps of the course's loop and of DeepSpeed's engine rule, by running both counters."""
    loop_steps = engine_steps = micro_steps = 0
    for _ in range(epochs):
        for index in range(micro):
            if (index + 1) % accum == 0 or index + 1 == micro:  # the loop: short windows too
                loop_steps += 1
            if (micro_steps + 1) % accum == 0:  # DeepSpeedEngine.is_gradient_accumulation_boundary
                engine_steps += 1
            micro_steps += 1  # DeepSpeedEngine.step() increments it after every micro-batch
    return loop_steps, engine_steps


@settings(max_examples=300, deadline=None)
@given(
    micro=st.integers(0, 60),
    accum=st.integers(1, 12),
    epochs=st.integers(0, 5),
    procs=st.integers(1, 8),
)
def test_counts_equal_the_simulated_loops(micro, accum, epochs, procs):
    counts = count_steps(micro, accum, epochs, procs)
    loop_steps, engine_steps = simulate(micro, accum, epochs)
    assert counts.optimizer_steps == loop_steps == len(loop_boundaries(micro, accum, epochs))
    assert counts.deepspeed_steps == engine_steps == len(deepspeed_boundaries(micro, accum, epochs))
    assert counts.prepared_scheduler_total == loop_steps * procs
    assert counts.deepspeed_loss_divisor == 1
    assert all(type(value) is int for value in counts)


def test_the_example_in_the_exercise_text():
    assert count_steps(10, 4, 3, 2).as_dict() == {
        "optimizer_steps": 9,
        "prepared_scheduler_total": 18,
        "deepspeed_steps": 7,
        "deepspeed_loss_divisor": 1,
    }


def test_where_each_counter_steps():
    # 5 micro-batches per epoch, N = 2: the loop closes a short window at each epoch's end;
    # DeepSpeed's windows run across the epoch boundary, and the last micro-batch is left.
    assert loop_boundaries(5, 2, 2) == [(0, 1), (0, 3), (0, 4), (1, 1), (1, 3), (1, 4)]
    assert deepspeed_boundaries(5, 2, 2) == [(0, 1), (0, 3), (1, 0), (1, 2), (1, 4)]


# ---------------------------------------------------------------- the real frameworks


# The scheduler run: 5 micro-batches per epoch and process, N = 2, 2 epochs, 2 processes.
SCHEDULER = {"micro_batches_per_epoch": 5, "accum_steps": 2, "epochs": 2}
SCHEDULER_COUNTS = count_steps(5, 2, 2, num_processes=2)


def framework_runs(
    rank: int, world_size: int, *, scheduler_totals: list[int], with_trainer: bool
) -> dict:
    """Every two-process framework run of this file, in one pair of gloo processes.

    Starting two processes that import torch, Accelerate and transformers takes seconds,
    under load tens of seconds; the runs themselves take a fraction of one, so the tests
    share one start. Each run builds its own Accelerator, model and data, and the results
    are the ones each run gives in processes of its own (compared when this was written).
    The Trainer runs last: it resets the state Accelerate keeps per process when it starts.
    """
    from coursekit.workers import frameworks

    runs = {
        ("scheduler", total): frameworks.accelerate_scheduler_run(
            rank, world_size, scheduler_total=total, **SCHEDULER
        )
        for total in scheduler_totals
    }
    runs["gradients"] = frameworks.accelerate_gradients_run(rank, world_size, steps=3)
    if with_trainer:
        runs["trainer"] = frameworks.trainer_run(rank, world_size, steps=3)
    return runs


@pytest.fixture(scope="module")
def two_process_runs() -> list[dict]:
    """What :func:`framework_runs` returned, one dict per rank (the Trainer's run only
    where transformers is installed: the Accelerate tests need only Accelerate)."""
    pytest.importorskip("accelerate")
    from coursekit.distributed import run_workers

    return run_workers(
        f"{__name__}.framework_runs",  # spawned processes import this module by its name
        world_size=2,
        progress=False,
        scheduler_totals=[
            SCHEDULER_COUNTS.optimizer_steps,
            SCHEDULER_COUNTS.prepared_scheduler_total,
        ],
        with_trainer=importlib.util.find_spec("transformers") is not None,
    )


@pytest.mark.slow  # over 4 s: out of the quick run (-m 'not slow')
@pytest.mark.frameworks
def test_accelerate_steps_a_prepared_scheduler_once_per_process_on_two_processes(
    two_process_runs,
):
    pytest.importorskip("accelerate")
    counts = SCHEDULER_COUNTS
    for total in (counts.optimizer_steps, counts.prepared_scheduler_total):
        results = [runs["scheduler", total] for runs in two_process_runs]
        for result in results:
            assert result["distributed_type"] == "MULTI_CPU"
            assert result["micro_batches_per_epoch"] == 5
            assert result["optimizer_steps"] == counts.optimizer_steps == 6
            assert result["scheduler_steps"] == counts.prepared_scheduler_total == 12
            rates = result["learning_rates"]
            if total == counts.optimizer_steps:  # sized without num_processes: done halfway
                assert rates[:3] == pytest.approx([4 / 6, 2 / 6, 0.0]) and rates[3:] == [0.0] * 3
            else:  # sized right: the decay spans the run and ends at the last step
                assert rates == pytest.approx([10 / 12, 8 / 12, 6 / 12, 4 / 12, 2 / 12, 0.0])


class _TinyRegression(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(1, 1)

    def forward(self, x, y):
        return {"loss": torch.nn.functional.mse_loss(self.linear(x), y)}


@pytest.mark.frameworks
@pytest.mark.parametrize(("micro", "accum", "epochs"), [(5, 2, 3), (9, 4, 2), (8, 4, 2)])
def test_the_hf_trainer_takes_the_loops_step_count(micro, accum, epochs, tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    from transformers import PrinterCallback, Trainer, TrainingArguments

    dataset = [{"x": torch.ones(1), "y": torch.ones(1)} for _ in range(micro)]
    args = TrainingArguments(
        output_dir=str(tmp_path),
        num_train_epochs=epochs,
        per_device_train_batch_size=1,
        gradient_accumulation_steps=accum,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        use_cpu=True,
        dataloader_pin_memory=False,
        remove_unused_columns=False,
        logging_strategy="no",
    )
    trainer = Trainer(model=_TinyRegression(), args=args, train_dataset=dataset)
    trainer.remove_callback(PrinterCallback)
    trainer.train()
    expected = count_steps(micro, accum, epochs).optimizer_steps
    assert trainer.state.max_steps == expected
    assert trainer.state.global_step == expected
    assert trainer.state.epoch == pytest.approx(epochs)  # every epoch it was asked for


@pytest.mark.frameworks
def test_accelerate_on_two_processes_moves_the_weights_as_the_course_loop_does(two_process_runs):
    """Real Accelerate, 2 gloo processes with different token counts: the mean loss per
    micro-batch misses the course's loop (a mean of means across micro-batches and ranks);
    the summed loss times global_token_scale * accum_steps matches it to float64 rounding."""
    pytest.importorskip("accelerate")
    results = [runs["gradients"] for runs in two_process_runs]
    for r in results:
        assert r["optimizer_steps"] == {"mean per micro-batch": 3, "global token count": 3}
        assert r["weight_gaps"]["global token count"] < 1e-12
        assert r["weight_gaps"]["mean per micro-batch"] > 0.05


@pytest.mark.frameworks
def test_the_trainer_on_two_processes_moves_the_weights_as_the_course_loop_does(two_process_runs):
    """The real HF Trainer on 2 gloo processes: with average_tokens_across_devices (its
    default) its num_items_in_batch makes the run the course's loop; without, each process
    divides by its own count and the ranks' means are averaged (transformers #34242)."""
    pytest.importorskip("transformers")
    results = [runs["trainer"] for runs in two_process_runs]
    on, off = "average_tokens_across_devices=True", "average_tokens_across_devices=False"
    for r in results:
        assert r["optimizer_steps"] == {on: 3, off: 3}
        assert r["weight_gaps"][on] < 1e-12
        assert r["weight_gaps"][off] > 0.05
