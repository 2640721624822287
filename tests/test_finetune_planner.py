"""Module 8's planner, its table and widget, and the HF Trainer's auto_find_batch_size
against coursekit's tuner on a simulated card."""

from __future__ import annotations

import math

import pytest

from coursekit.finetune import (
    auto_batch_comparison,
    default_card,
    estimate_memory,
    fits_table,
    plan_fine_tune,
    planner_html,
    render_fits_table,
)
from coursekit.parameters import ParameterError
from coursekit.real_model.simulated_device import SimulatedDevice

pytestmark = pytest.mark.module8

GIB = 2**30


@pytest.mark.parametrize(
    "model, card_gb, mode, checkpointing",
    [
        ("Qwen2.5-1.5B", 12, "qlora-nf4", True),
        ("Qwen2.5-0.5B", 16, "full-bf16-adam8bit", False),
        ("Qwen2.5-3B", 24, "lora-bf16", True),
    ],
)
def test_the_plan_is_the_largest_micro_batch_within_the_budget(model, card_gb, mode, checkpointing):
    seq_len, tokens = 1024, 65536
    plan = plan_fine_tune(model, card_gb, mode, seq_len, tokens, checkpointing=checkpointing)
    budget = card_gb * GIB * 0.9
    assert plan.fits and plan.budget_bytes == int(budget)

    def needs(size):
        return estimate_memory(model, mode, size, seq_len, checkpointing=checkpointing).total_bytes

    # the oracle: the plan's micro-batch fits, one more does not (or the window is reached)
    assert needs(plan.micro_batch_size) <= budget
    assert plan.micro_batch_size == 64 or needs(plan.micro_batch_size + 1) > budget
    assert plan.effective_tokens == tokens == sum(plan.micro_batch_sizes) * seq_len
    assert plan.accum_steps == math.ceil(64 / plan.micro_batch_size)
    assert max(plan.micro_batch_sizes) - min(plan.micro_batch_sizes) <= 1
    assert f"micro-batch {plan.micro_batch_size}" in str(plan)


def test_a_smaller_card_keeps_the_tokens_and_raises_the_accumulation():
    big = plan_fine_tune("Qwen2.5-1.5B", 24, "lora-bf16", 1024, 131072, checkpointing=True)
    small = plan_fine_tune("Qwen2.5-1.5B", 12, "lora-bf16", 1024, 131072, checkpointing=True)
    assert small.effective_tokens == big.effective_tokens == 131072
    assert small.micro_batch_size < big.micro_batch_size
    assert small.accum_steps > big.accum_steps


def test_tokens_that_are_not_whole_sequences_round_up_and_say_so():
    plan = plan_fine_tune("Qwen2.5-0.5B", 24, "qlora-nf4", 1000, 10_500, checkpointing=True)
    assert plan.effective_tokens == 11_000  # 11 sequences of 1,000 tokens
    assert "500 more than asked" in str(plan)


def test_a_model_that_does_not_fit_says_what_dominates():
    plan = plan_fine_tune("Qwen2.5-7B", 8, "full-fp32", 1024, 65536)
    assert not plan.fits and plan.micro_batch_size == plan.accum_steps == 0
    text = str(plan)
    assert text.startswith("Does not fit even at micro-batch 1")
    assert "The largest part is optimizer state" in text and "8-bit AdamW" in text
    qlora = str(plan_fine_tune("Qwen2.5-7B", 6, "qlora-nf4", 1024, 65536, checkpointing=True))
    assert "The largest part is weights" in qlora and "already 4-bit" in qlora


@pytest.mark.parametrize(
    "change, named",
    [
        ({"card_gb": 0}, "card_gb"),
        ({"card_gb": "12"}, "card_gb"),
        ({"card_gb": True}, "card_gb"),
        ({"seq_len": 0}, "seq_len"),
        ({"seq_len": 2.5}, "seq_len"),
        ({"tokens_per_step": 100}, "tokens_per_step"),
        ({"mode": "qlora"}, "qlora-nf4"),
        ({"checkpointing": "yes"}, "checkpointing"),
        ({"margin": 1.0}, "margin"),
        ({"config": {"hidden_size": 64}}, "model_type"),
        ({"config": "Qwen-9000"}, "Qwen-9000"),
    ],
)
def test_bad_input_is_a_named_parameter_error(change, named):
    arguments = {
        "config": "Qwen2.5-0.5B",
        "card_gb": 12,
        "mode": "qlora-nf4",
        "seq_len": 1024,
        "tokens_per_step": 65536,
    }
    options = {key: change.pop(key) for key in ("checkpointing", "margin") if key in change}
    arguments.update(change)
    with pytest.raises(ParameterError, match=named):
        plan_fine_tune(**arguments, **options)


@pytest.mark.parametrize("model_type", ["llama", "mistral", "gpt_neox"])
def test_a_students_own_architecture_is_planned(model_type):
    config = {
        "model_type": model_type,
        "hidden_size": 256,
        "intermediate_size": 704,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 1000,
    }
    plan = plan_fine_tune(config, 1, "lora-bf16", 256, 4096, checkpointing=True)
    assert plan.fits and plan.effective_tokens == 4096


def test_an_architecture_without_sdpa_is_a_named_error():
    config = {
        "model_type": "gemma2",
        "hidden_size": 256,
        "intermediate_size": 704,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 1000,
        "head_dim": 64,
    }
    with pytest.raises(ParameterError, match="sdpa"):
        plan_fine_tune(config, 8, "lora-bf16", 256, 4096)


def test_the_table_is_the_planner_on_every_card():
    rows = fits_table(["Qwen2.5-0.5B"], (8, 24), ("full-fp32", "qlora-nf4"), 512, 32768, (True,))
    assert len(rows) == 4
    for row in rows:
        plan = plan_fine_tune("Qwen2.5-0.5B", row.card_gb, row.mode, 512, 32768, checkpointing=True)
        assert (row.micro_batch_size, row.accum_steps) == (plan.micro_batch_size, plan.accum_steps)
    markdown = render_fits_table(rows)
    assert markdown.splitlines()[0] == "| model | mode | checkpointing | 8 GB | 24 GB |"
    assert len(markdown.splitlines()) == 2 + 2  # header, rule, one line per mode
    assert "<table>" in render_fits_table(rows, "html")
    with pytest.raises(ValueError, match="markdown"):
        render_fits_table(rows, "latex")


def test_the_widget_shows_the_plan_or_the_problem():
    assert "<b>fits</b>" in planner_html("Qwen2.5-0.5B", 24, "qlora-nf4", 1024, 65536, True)
    assert "No plan" in planner_html("Qwen2.5-0.5B", 24, "qlora-nf4", 1024, 10, True)
    pytest.importorskip("ipywidgets")
    from coursekit.finetune import planner_widget

    widget = planner_widget(
        {
            "model_type": "llama",
            "hidden_size": 256,
            "num_attention_heads": 4,
            "intermediate_size": 512,
            "num_hidden_layers": 2,
            "vocab_size": 1000,
        }
    )
    view = widget.children[-1]
    before = view.value
    widget.children[1].value = 48  # the card
    assert view.value != before and "48 GB card" in view.value


@pytest.mark.slow  # over 2.5 s: out of the quick run (-m 'not slow')
@pytest.mark.frameworks  # transformers' find_executable_batch_size calls accelerate's
def test_auto_find_batch_size_shrinks_the_effective_batch_and_the_tuner_does_not():
    comparison = auto_batch_comparison(
        per_device_train_batch_size=64, gradient_accumulation_steps=4
    )
    trainer, tuner = comparison.trainer, comparison.tuner
    assert comparison.asked_effective_batch == 256
    # accelerate >= 1.9: each out-of-memory error retries at int(0.9 x size)
    assert trainer.tried[0] == 64
    assert all(
        b == int(a * 0.9) for a, b in zip(trainer.tried[:-1], trainer.tried[1:], strict=True)
    )
    card = default_card()
    assert card.needs(trainer.micro_batch_size) <= card.capacity_bytes  # it ran
    assert card.needs(trainer.tried[-2]) > card.capacity_bytes  # the size before failed
    assert trainer.accum_steps == 4  # gradient_accumulation_steps is never touched
    assert trainer.effective_batch == 4 * trainer.micro_batch_size < 256
    assert tuner.effective_batch == 256 and tuner.micro_batch_size * tuner.accum_steps >= 256
    assert card.needs(tuner.micro_batch_size) <= 0.9 * card.capacity_bytes  # its margin
    assert "144 samples per step" in str(comparison)


@pytest.mark.frameworks
def test_a_card_that_fits_the_window_leaves_both_alike():
    roomy = SimulatedDevice(2 * GIB, 2**20, 2**20)
    comparison = auto_batch_comparison(roomy, 16, 4)
    assert comparison.trainer.tried == (16,)
    assert comparison.trainer.effective_batch == comparison.tuner.effective_batch == 64


@pytest.mark.slow  # a real HF Trainer run, seconds: the full suite runs it
@pytest.mark.frameworks
def test_the_real_trainer_shrinks_the_same_way():
    comparison = auto_batch_comparison(mechanism="trainer")
    assert (comparison.trainer.micro_batch_size, comparison.trainer.accum_steps) == (36, 4)
    assert comparison.trainer.effective_batch == 144
    assert comparison.trainer.tried[:6] == (64, 57, 51, 45, 40, 36)
    assert comparison.trainer.tried[6:] == (36,) * 4  # then one step's four micro-batches


def test_auto_batch_refuses_bad_input():
    with pytest.raises(ValueError, match="per_device_train_batch_size"):
        auto_batch_comparison(per_device_train_batch_size=0)
    with pytest.raises(ValueError, match="trainer"):
        auto_batch_comparison(mechanism="lightning")
