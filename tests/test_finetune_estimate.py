"""Module 8's memory model against measurement on the CPU: activations measured on small
copies against the hand count of what each layer saves, the loss's bytes per logit, and the
estimate part by part against what torch holds (the tiny model in every mode, a GPT-2-sized
one in one; benchmarks/finetune_memory.py prints the rest)."""

from __future__ import annotations

import warnings

import pytest
import torch

from coursekit.finetune import (
    LOSS_BYTES_PER_LOGIT,
    compare_with_measurement,
    count_parameters,
    estimate_memory,
    korthikanti_layer_bytes,
    meta_model,
    published_config,
    saved_bytes_per_token,
)
from coursekit.memory import peak_live_bytes

pytestmark = pytest.mark.module8

#: The largest gap allowed between the predicted and the measured peak of a micro-batch.
PEAK_TOLERANCE = 0.02
EXACT_PARTS = ("weights", "saved activations", "gradients", "optimizer state")


def test_gpt2_layers_save_what_the_hand_count_says():
    """10h + 5i + a + 4 float32 numbers per token and layer (activations.py's docstring)."""
    config = published_config("gpt2")
    h, i, a = config.n_embd, 4 * config.n_embd, config.n_head
    assert saved_bytes_per_token(config, "full-fp32").per_layer == 4 * (10 * h + 5 * i + a + 4)


@pytest.mark.parametrize("name", ["Qwen2.5-0.5B", "Qwen2.5-7B"])
def test_llama_style_layers_save_what_the_hand_count_says(name):
    """8h + 2kv + 4i + a + 2 float32 numbers per token and layer, at the real widths."""
    c = published_config(name)
    h, i, a = c.hidden_size, c.intermediate_size, c.num_attention_heads
    kv = c.num_key_value_heads * h // a
    expected = 4 * (8 * h + 2 * kv + 4 * i + a + 2)
    assert saved_bytes_per_token(c, "full-fp32").per_layer == pytest.approx(expected, abs=1)


def test_korthikanti_formula_and_what_sdpa_saves_instead():
    # sbh(34 + 5as/h) for GPT-2's sizes at 1,024 tokens: the s^2 term is 2.35 times the rest
    full = korthikanti_layer_bytes(1024, 1, 768, 12)
    assert full == 1024 * 768 * 34 + 5 * 12 * 1024**2
    # in bf16, GPT-2 under SDPA saves more than the paper's 34h per token (its Python GeLU
    # keeps four tensors), but no score matrix, so less than the paper's total at 1,024
    saved = saved_bytes_per_token("gpt2", "full-bf16-adam8bit").per_layer
    assert 34 * 768 < saved < full / 1024


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_loss_holds_twelve_bytes_per_logit(dtype):
    """LOSS_BYTES_PER_LOGIT measured again: the peak's growth per token and vocabulary entry
    with the model's own loss, the embedding frozen so that only the logits grow."""
    from transformers import AutoConfig, AutoModelForCausalLM

    vocab = 8192
    config = AutoConfig.for_model(
        "qwen2",
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).to(dtype).train()
    model.get_input_embeddings().weight.requires_grad_(False)
    peaks = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for batch in (2, 4):
            ids = torch.randint(0, vocab, (batch, 64))
            peaks[batch * 64] = peak_live_bytes(
                lambda ids=ids: model(input_ids=ids, labels=ids).loss.backward()
            )
    per_logit = (peaks[256] - peaks[128]) / 128 / vocab
    name = "fp32" if dtype == torch.float32 else "bf16"
    # the rest of the growth is the one small layer's activations, 2-3% of a logit's bytes
    assert LOSS_BYTES_PER_LOGIT[name] <= per_logit < LOSS_BYTES_PER_LOGIT[name] * 1.04


def _check(rows):
    for row in rows:
        if row.part in EXACT_PARTS:
            assert row.predicted_bytes == pytest.approx(row.measured_bytes, abs=64), row
        else:
            assert abs(row.ratio - 1) <= PEAK_TOLERANCE, row


@pytest.mark.parametrize(
    "mode, checkpointing",
    [
        ("full-fp32", False),
        ("full-fp32", True),
        ("full-bf16-adam8bit", False),
        ("lora-fp32", True),
        ("lora-bf16", False),
        ("lora-bf16", True),
    ],
)
def test_the_estimate_matches_the_tiny_model(mode, checkpointing):
    rows = compare_with_measurement("tiny", mode, 2, 32, checkpointing)
    assert [row.part for row in rows][-1] == "micro-batch peak"
    _check(rows)


@pytest.mark.parametrize("checkpointing", [False, True])
def test_qlora_on_a_real_nf4_base_matches(checkpointing):
    pytest.importorskip("bitsandbytes")
    _check(compare_with_measurement("tiny", "qlora-nf4", 2, 32, checkpointing))


def test_an_nf4_base_saves_what_a_bf16_base_saves():
    """bitsandbytes' 4-bit matmul keeps no activation for backward, as a frozen bf16
    nn.Linear keeps none: the reason QLoRA's activations are measured on a bf16 base."""
    pytest.importorskip("bitsandbytes")
    nf4, bf16 = (compare_with_measurement("tiny", mode)[1] for mode in ("qlora-nf4", "lora-bf16"))
    assert nf4.part == bf16.part == "saved activations"
    assert nf4.measured_bytes == bf16.measured_bytes


def test_the_estimate_matches_a_gpt2_sized_model():
    # LoRA: the GPT-2-sized model's forward and backward without a 1 GB AdamW state;
    # full fine-tuning of it is in benchmarks/finetune_memory.py (within 0.5% there)
    _check(compare_with_measurement("gpt2", "lora-bf16", 1, 16))


def test_the_estimate_grows_with_tokens_and_checkpointing_saves():
    one = estimate_memory("Qwen2.5-0.5B", "lora-bf16", 1, 512)
    four = estimate_memory("Qwen2.5-0.5B", "lora-bf16", 4, 512)
    assert four.weights_bytes == one.weights_bytes
    assert four.activations_bytes == pytest.approx(4 * one.activations_bytes, rel=1e-9)
    assert four.logits_bytes == 4 * one.logits_bytes == 4 * 512 * 151936 * 12 * 4 // 4
    checkpointed = estimate_memory("Qwen2.5-0.5B", "lora-bf16", 4, 512, checkpointing=True)
    assert checkpointed.activations_bytes < four.activations_bytes / 10
    assert checkpointed.recompute_bytes > 0 and four.recompute_bytes == 0


def test_full_fp32_peaks_in_the_optimizer_step_at_20_bytes_per_parameter():
    estimate = estimate_memory("Qwen2.5-7B", "full-fp32", 1, 1024, context_gb=0)
    n = count_parameters(meta_model("Qwen2.5-7B"))
    assert estimate.step_bytes == 20 * n > estimate.training_bytes
    assert estimate.total_bytes == 20 * n
    assert estimate.largest_part() == "optimizer state"
    assert "optimizer step" in str(estimate)


def test_the_logits_are_the_largest_part_of_a_small_qlora_model():
    estimate = estimate_memory("Qwen2.5-0.5B", "qlora-nf4", 4, 1024, checkpointing=True)
    assert estimate.largest_part() == "logits and loss"
