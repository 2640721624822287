"""Module 5's framework comparisons: each framework against the course loop it should match.

The oracles are runs of ``course_loop`` with the framework's choices switched on. Tolerances:
the weights are float32 of size up to 4 after three SGD steps; the runs compute the same
operations (measured difference 0.0), so ``WEIGHT_TOL = 1e-6`` (a few float32 ulps at that
size) only allows for a different summation order in another torch build. The differences the tests
detect are at least 2e-2, four orders of magnitude above it. Logged losses are float32 sums
of four terms about 1 each: relative ``1e-6``.

Every framework is an optional extra: its tests skip without it, except where
``COURSEKIT_REQUIRE_FRAMEWORKS=1`` (``scripts/test`` sets it, since its set-up installs them):
there a missing or broken install fails, so CI cannot pass by skipping the comparisons.
"""

import importlib
import io
import os
import random
import subprocess
import sys
from contextlib import contextmanager, redirect_stdout

import pytest
import torch

from coursekit import frameworks
from coursekit.frameworks import (
    FrameworkRun,
    compare,
    course_loop,
    missing,
    table,
    token_micro_batches,
    with_accelerate,
    with_hf_trainer,
    with_lightning,
)
from coursekit.tokens import count_tokens

pytestmark = [pytest.mark.module5, pytest.mark.frameworks]

ACCUM_STEPS = 4
WEIGHT_TOL = 1e-6
VISIBLE = 1e-2  # a real difference in the weights is at least this (measured: 2.2e-2 and up)
LRS = [0.5, 0.5, 0.25]  # warm-up of 1 step, then linear decay to 0 at step 3: lr * (3 - s) / 2


def require(module: str):
    """The module; a skip without it, or a failure where the frameworks must be installed."""
    if os.environ.get("COURSEKIT_REQUIRE_FRAMEWORKS") == "1":
        return importlib.import_module(module)
    return pytest.importorskip(module)


def max_diff(run: FrameworkRun, reference: FrameworkRun) -> float:
    return compare([run], reference)[0].max_param_diff


@pytest.fixture(scope="module")
def micro_batches():
    return token_micro_batches(10)


@pytest.fixture(scope="module")
def course(micro_batches):
    """The oracles: the right loop, and the loops with the frameworks' choices."""
    return {
        (norm, last): course_loop(micro_batches, ACCUM_STEPS, normalisation=norm, last_window=last)
        for norm in ("tokens", "mean_of_means")
        for last in ("own_length", "divided_by_n")
    }


@contextmanager
def kept_rng():
    """Restore Python's and torch's global RNGs after the block (the HF Trainer reseeds)."""
    states = random.getstate(), torch.random.get_rng_state()
    yield states
    random.setstate(states[0])
    torch.random.set_rng_state(states[1])


def quiet_run(function, *args, **kwargs):
    """Run a framework; check it printed nothing and left the global RNGs as they were."""
    printed = io.StringIO()
    with kept_rng() as before, redirect_stdout(printed):
        run = function(*args, **kwargs)
        assert random.getstate() == before[0]
        assert torch.equal(torch.random.get_rng_state(), before[1])
    assert printed.getvalue() == ""
    return run


# ---------------------------------------------------------------- without any framework


def test_micro_batches_have_unequal_tokens_and_a_short_last_window(micro_batches):
    tokens = [count_tokens(labels) for _, labels in micro_batches]
    assert len(set(tokens)) >= 8
    assert len(micro_batches) % ACCUM_STEPS == 2


def test_course_loop_switches_each_change_the_weights(course):
    right = course["tokens", "own_length"]
    assert right.optimizer_steps == 3 and right.learning_rates == LRS
    for key, run in course.items():
        if key != ("tokens", "own_length"):
            assert max_diff(run, right) > VISIBLE, key
    # Divided by accum_steps, the last window of 2 reports half its mean-of-means loss.
    half = course["mean_of_means", "divided_by_n"].losses[-1]
    assert half == pytest.approx(course["mean_of_means", "own_length"].losses[-1] / 2, rel=1e-6)


def test_course_loop_rejects_unknown_switches(micro_batches):
    with pytest.raises(ValueError, match="normalisation"):
        course_loop(micro_batches, ACCUM_STEPS, normalisation="padding_counted")
    with pytest.raises(ValueError, match="last_window"):
        course_loop(micro_batches, ACCUM_STEPS, last_window="dropped")


def test_missing_names_the_extra(monkeypatch):
    with pytest.raises(ValueError, match="one of"):
        missing("keras")
    monkeypatch.setattr(frameworks.importlib.util, "find_spec", lambda name: None)
    message = missing("transformers")
    assert 'pip install "coursekit[frameworks]"' in message
    assert "transformers and accelerate" in message


def test_missing_is_none_when_importable():
    require("accelerate")
    assert missing("accelerate") is None


def test_importing_the_module_imports_no_framework():
    code = (
        "import sys, coursekit.frameworks; "
        "print([m for m in ('accelerate', 'lightning', 'transformers') if m in sys.modules])"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_compare_and_table(course):
    right = course["tokens", "own_length"]
    rows = compare([right, course["tokens", "divided_by_n"]], right)
    assert rows[0].max_param_diff == 0.0 and rows[1].max_param_diff > VISIBLE
    assert rows[0].final_lr == 0.25
    text = table(rows)
    assert text.splitlines()[1].startswith(right.name) and len(text.splitlines()) == 3


# ---------------------------------------------------------------- HF Accelerate


@pytest.fixture(scope="module")
def accelerate_run(micro_batches):
    require("accelerate")
    return quiet_run(with_accelerate, micro_batches, ACCUM_STEPS)


def test_accelerate_divides_the_last_window_by_n(accelerate_run, course):
    """accelerator.backward divides every loss by N, the last window's 2 too."""
    oracle = course["mean_of_means", "divided_by_n"]
    assert max_diff(accelerate_run, oracle) <= WEIGHT_TOL
    assert max_diff(accelerate_run, course["mean_of_means", "own_length"]) > VISIBLE
    assert accelerate_run.losses == pytest.approx(oracle.losses, rel=1e-6)


def test_accelerate_steps_the_scheduler_once_per_optimizer_step(accelerate_run):
    assert accelerate_run.optimizer_steps == 3
    assert accelerate_run.details["scheduler_steps"] == 3  # 10 micro-batches: 3, not 10
    assert accelerate_run.learning_rates == LRS
    assert accelerate_run.details["adjust_scheduler"] is False
    assert not accelerate_run.details["gradient_left_over"]


def test_accelerate_adjust_scheduler_true_is_dropped():
    """GradientAccumulationPlugin(adjust_scheduler=True) equals the default, so to_kwargs()
    leaves it out, and GradientState.adjust_scheduler falls back to False."""
    require("accelerate")
    from accelerate import Accelerator
    from accelerate.utils import GradientAccumulationPlugin

    plugin = GradientAccumulationPlugin(num_steps=ACCUM_STEPS, adjust_scheduler=True)
    accelerator = Accelerator(cpu=True, gradient_accumulation_plugin=plugin)
    assert accelerator.gradient_state.adjust_scheduler is False


def test_accelerate_without_prepared_dataloader_never_steps_the_last_window(micro_batches):
    require("accelerate")
    run = quiet_run(with_accelerate, micro_batches, ACCUM_STEPS, prepare_dataloader=False)
    assert run.optimizer_steps == 2
    assert run.details["gradient_left_over"]


# ---------------------------------------------------------------- PyTorch Lightning


@pytest.fixture(scope="module")
def lightning_run(micro_batches):
    require("lightning")
    return quiet_run(with_lightning, micro_batches, ACCUM_STEPS)


def test_lightning_steps_on_the_last_window_divided_by_k(lightning_run, course):
    """Lightning #19987: the epoch's last, shorter window is stepped, its losses still / K."""
    assert lightning_run.optimizer_steps == 3
    assert max_diff(lightning_run, course["mean_of_means", "divided_by_n"]) <= WEIGHT_TOL
    assert max_diff(lightning_run, course["mean_of_means", "own_length"]) > VISIBLE


def test_lightning_hook_loss_is_divided_by_k(lightning_run):
    returned = lightning_run.details["training_step_losses"]
    hooked = lightning_run.details["on_train_batch_end_losses"]
    assert hooked == pytest.approx([loss / ACCUM_STEPS for loss in returned], rel=1e-6)


def test_lightning_scheduler_counts_optimizer_steps(lightning_run):
    assert lightning_run.details["estimated_stepping_batches"] == 3
    assert lightning_run.learning_rates == LRS


# ---------------------------------------------------------------- HF Trainer


@pytest.fixture(scope="module")
def trainer_runs(micro_batches):
    require("transformers")
    require("accelerate")
    return {
        "tokens": quiet_run(with_hf_trainer, micro_batches, ACCUM_STEPS),
        "means": quiet_run(with_hf_trainer, micro_batches, ACCUM_STEPS, num_items_in_batch=False),
        "linear": quiet_run(
            with_hf_trainer, micro_batches, ACCUM_STEPS, lr_scheduler_type="linear"
        ),
    }


def test_trainer_with_num_items_in_batch_is_the_course_loop(trainer_runs, course, micro_batches):
    run, oracle = trainer_runs["tokens"], course["tokens", "own_length"]
    assert run.details["model_accepts_loss_kwargs"] is True
    assert max_diff(run, oracle) <= WEIGHT_TOL
    assert run.losses == pytest.approx(oracle.losses, rel=1e-6)  # log_history: real mean
    windows = [micro_batches[start : start + ACCUM_STEPS] for start in (0, 4, 8)]
    expected = [sum(count_tokens(y) for _, y in w) for w in windows for _ in w]
    assert run.details["num_items_in_batch"] == expected  # the last window: its own tokens


def test_trainer_without_num_items_in_batch_averages_means_over_the_real_window(
    trainer_runs, course
):
    run = trainer_runs["means"]
    assert run.details["model_accepts_loss_kwargs"] is False
    assert max_diff(run, course["mean_of_means", "own_length"]) <= WEIGHT_TOL
    assert max_diff(run, course["mean_of_means", "divided_by_n"]) > VISIBLE  # not Accelerate's
    assert max_diff(run, course["tokens", "own_length"]) > VISIBLE


def test_trainer_counts_its_schedule_in_optimizer_steps(trainer_runs):
    assert trainer_runs["tokens"].learning_rates == LRS
    linear = trainer_runs["linear"]
    assert linear.details["max_steps"] == 3  # ceil(10 / 4): the short window counts
    # Its own "linear" warm-up starts at 0 (factor step / warmup_steps), the course's at 1/W.
    assert linear.learning_rates == [0.0, 0.5, 0.25]


def test_trainer_passes_num_items_in_batch_only_to_var_keyword_forwards(monkeypatch, tmp_path):
    """A plain nn.Module works; without an ``accepts_loss_kwargs`` attribute the Trainer
    passes ``num_items_in_batch`` only if forward takes ``**kwargs``: an explicit keyword
    of that name silently gets nothing, and the loss stays a mean per micro-batch."""
    require("accelerate")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    transformers = require("transformers")

    class ExplicitKeyword(torch.nn.Linear):
        def forward(self, input_ids, labels, num_items_in_batch=None):
            return super().forward(input_ids)

    class VarKeyword(torch.nn.Linear):
        def forward(self, input_ids, labels, **kwargs):
            return super().forward(input_ids)

    args = transformers.TrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True)
    with kept_rng():
        accepts = {
            model: transformers.Trainer(model=model(2, 2), args=args).model_accepts_loss_kwargs
            for model in (ExplicitKeyword, VarKeyword)
        }
    assert accepts == {ExplicitKeyword: False, VarKeyword: True}
