"""Module 8's library, the parts that need no forward pass: published configurations on the
meta device, bytes of weights in each format, LoRA adapters and 8-bit optimizer state."""

from __future__ import annotations

import math

import pytest

from coursekit.finetune import (
    PUBLISHED_CONFIGS,
    count_parameters,
    meta_model,
    published_config,
    weight_bytes,
)
from coursekit.finetune.configs import as_config
from coursekit.finetune.modes import MODES, mode_named
from coursekit.finetune.weights import (
    adam8bit_state_bytes,
    lora_parameter_shapes,
    nf4_layer_bytes,
    quantized_linears,
    trainable_state,
)
from coursekit.parameters import ParameterError

pytestmark = pytest.mark.module8

# The model cards' "Number of Parameters" and "(Non-Embedding)", in billions, two decimals
# (the cards round some and cut others: 7.6156 is "7.61B", 3.0859 "3.09B").
MODEL_CARDS = {
    "Qwen2.5-0.5B": (0.49, 0.36),
    "Qwen2.5-1.5B": (1.54, 1.31),
    "Qwen2.5-3B": (3.09, 2.77),
    "Qwen2.5-7B": (7.61, 6.53),
}


@pytest.mark.parametrize("name", sorted(MODEL_CARDS))
def test_published_configs_count_what_the_model_cards_say(name):
    model = meta_model(name)
    total = count_parameters(model)
    embeddings = {
        id(m.weight): m.weight.numel()
        for m in (model.get_input_embeddings(), model.get_output_embeddings())
    }
    card_total, card_body = MODEL_CARDS[name]
    assert abs(total / 1e9 - card_total) < 0.01
    assert abs((total - sum(embeddings.values())) / 1e9 - card_body) < 0.01
    assert all(p.device.type == "meta" for p in model.parameters())  # nothing allocated


def test_gpt2_is_the_released_124m_model():
    assert count_parameters(meta_model("gpt2")) == 124_439_808
    assert weight_bytes(meta_model("gpt2"), "fp32") == 4 * 124_439_808
    assert weight_bytes(meta_model("gpt2"), "bf16") == 2 * 124_439_808


def test_bad_configurations_are_named():
    with pytest.raises(ParameterError, match="Qwen2.5-0.5B"):
        published_config("Qwen-9000")
    with pytest.raises(ParameterError, match="model_type"):
        as_config({"hidden_size": 64})
    with pytest.raises(ParameterError, match="not-a-model"):
        as_config({"model_type": "not-a-model"})
    with pytest.raises(ParameterError, match="config is int"):
        as_config(3)
    with pytest.raises(ParameterError, match="pad_token_id"):
        meta_model({"model_type": "phi3", "vocab_size": 100, "pad_token_id": 500})
    config = as_config(dict(PUBLISHED_CONFIGS["Qwen2.5-0.5B"]))  # a config.json as a dict
    assert config.hidden_size == 896 and as_config(config) is config


def test_nf4_constants_are_the_qlora_papers_bits_per_weight():
    numel = 4096 * 4096
    packed = numel // 2
    code = 64
    plain = (nf4_layer_bytes(numel, double_quant=False) - packed - code) * 8 / numel
    double = (nf4_layer_bytes(numel, double_quant=True) - packed - code - 1024) * 8 / numel
    assert plain == 32 / 64  # 0.5 bit per weight
    assert double == pytest.approx(8 / 64 + 32 / (64 * 256), rel=1e-3)  # 0.127 bit


def test_quantized_formats_count_each_linear_layer():
    model = meta_model(
        {
            "model_type": "gpt2",
            "n_embd": 64,
            "n_layer": 2,
            "n_head": 4,
            "vocab_size": 1000,
            "n_positions": 128,
        }
    )
    linears = quantized_linears(model)
    assert len(linears) == 8  # 4 per block; lm_head (tied to the embedding) kept
    quantized = sum(m.weight.numel() for m in linears.values())
    rows = sum(m.weight.shape[1] for m in linears.values())  # Conv1D: (in, out)
    rest = count_parameters(model) - quantized
    assert weight_bytes(model, "int8") == quantized + 4 * rows + 2 * rest
    nf4 = sum(nf4_layer_bytes(m.weight.numel()) for m in linears.values())
    assert weight_bytes(model, "nf4") == nf4 + 2 * rest
    with pytest.raises(ValueError, match="nf4"):
        weight_bytes(model, "fp8")


def test_lora_adapters_are_rank_times_fan_in_plus_fan_out():
    model = meta_model(
        {
            "model_type": "gpt2",
            "n_embd": 64,
            "n_layer": 2,
            "n_head": 4,
            "vocab_size": 1000,
            "n_positions": 128,
        }
    )
    # per block: c_attn 64->192, attn c_proj 64->64, c_fc 64->256, mlp c_proj 256->64
    per_block = 8 * ((64 + 192) + (64 + 64) + (64 + 256) + (256 + 64))
    assert sum(lora_parameter_shapes(model, 8)) == 2 * per_block
    assert sum(lora_parameter_shapes(model, 8, ["c_attn"])) == 2 * 8 * (64 + 192)
    with pytest.raises(ParameterError, match="c_attn"):
        lora_parameter_shapes(model, 8, ["q_proj"])


def test_adam8bit_state_is_two_bytes_plus_block_constants():
    assert adam8bit_state_bytes([100]) == 800  # under min_8bit_size: two float32 states
    n = 10_000
    assert adam8bit_state_bytes([n]) == 2 * n + 8 * math.ceil(n / 256) + 2048
    assert adam8bit_state_bytes([n, 100]) == 2 * n + 8 * math.ceil(n / 256) + 2048 + 800
    # registered with optim_bits=32 (the HF Trainer's embeddings): two float32 states
    assert adam8bit_state_bytes([n], [20_000]) == adam8bit_state_bytes([n]) + 8 * 20_000


def test_each_mode_trains_what_it_says():
    model = meta_model("Qwen2.5-0.5B")
    n = count_parameters(model)
    full = trainable_state(model, mode_named("full-fp32"))
    assert (full.gradients_bytes, full.optimizer_bytes) == (4 * n, 8 * n)
    assert full.gradient_temporary_bytes == 3 * 4 * 151936 * 896  # tied embedding, 3 copies
    eight = trainable_state(model, mode_named("full-bf16-adam8bit"))
    assert eight.gradients_bytes == 2 * n and eight.step_temporary_bytes == 0
    embedding = 151936 * 896  # tied: the output layer shares the embedding's 32-bit states
    assert 8 * embedding + 2 * (n - embedding) < eight.optimizer_bytes
    assert eight.optimizer_bytes < 8 * embedding + 2.1 * (n - embedding)
    seven = meta_model("Qwen2.5-7B")  # untied: its output layer is a Linear, 8-bit states
    n7, embedding7 = count_parameters(seven), 152064 * 3584
    state7 = trainable_state(seven, mode_named("full-bf16-adam8bit")).optimizer_bytes
    assert (
        8 * embedding7 + 2 * (n7 - embedding7) < state7 < 8 * embedding7 + 2.1 * (n7 - embedding7)
    )
    lora = trainable_state(model, mode_named("qlora-nf4"), lora_rank=16)
    adapters = sum(lora_parameter_shapes(model, 16))
    assert lora.adapter_bytes == lora.gradients_bytes == 4 * adapters
    assert lora.optimizer_bytes == 8 * adapters
    assert set(MODES) >= {"full-fp32", "full-bf16-adam8bit", "lora-bf16", "qlora-nf4"}


def test_quantized_weights_match_bitsandbytes_on_the_cpu():
    pytest.importorskip("bitsandbytes")
    from coursekit.finetune import compare_quantized_weights

    for weight_format in ("nf4", "int8"):
        row = compare_quantized_weights("tiny", weight_format)
        assert row.predicted_bytes == row.measured_bytes, row
