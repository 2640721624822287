"""Fitting an LLM fine-tune on one 8-24 GB card: where the memory goes, what fits, and the
micro-batch and accumulation steps that reach a target batch in tokens (module 8).

One idea per module: ``configs`` (published model configurations built on the ``meta``
device, so a 7B model is counted exactly without a download), ``weights`` (bytes of a frozen
base in fp32, bf16, 8-bit LLM.int8 or 4-bit NF4, LoRA adapters, gradients and optimizer state
in AdamW fp32 or bitsandbytes' 8-bit AdamW), ``activations`` (what autograd saves per token,
measured on small copies of the architecture, and Korthikanti et al.'s formula beside it),
``estimate`` (one training step's peak, part by part), ``planner`` (the micro-batch and the
accumulation steps for a card), ``table`` ("what fits on 8 / 12 / 16 / 24 GB"), ``measured``
(the model against what torch holds on the CPU), ``auto_batch`` (the HF Trainer's
``auto_find_batch_size`` against :func:`coursekit.real_model.tune` on a simulated card) and
``widget``. Notebooks import every name from here.

The API (module 8 calls these; sizes in bytes, cards in GiB)::

    MODES                      # {name: Mode}: "full-fp32", "full-bf16-adam8bit", "lora-fp32",
                               # "lora-bf16", "lora-int8", "qlora-nf4"; TABLE_MODES: the four
                               # of the table
    PUBLISHED_CONFIGS, SOURCES, TABLE_MODELS
    published_config(name) -> transformers config
    meta_model(config) -> nn.Module on the meta device
    count_parameters(model) -> int
    weight_bytes(model, weight_format)  # "fp32", "bf16", "int8", "nf4"
    saved_bytes_per_token(config, mode) -> SavedPerToken  # .per_layer .rest .layer_input
    korthikanti_layer_bytes(seq_len, micro_batch, hidden, heads) -> int

    estimate_memory(config, mode, micro_batch_size, seq_len, *, checkpointing=False,
                    lora_rank=16, lora_targets="all-linear", context_gb=CONTEXT_GB)
        -> MemoryEstimate  # .weights_bytes .gradients_bytes .optimizer_bytes
                           # .activations_bytes .logits_bytes .context_bytes .total_bytes
                           # .gradient_temporary_bytes .recompute_bytes
                           # .step_temporary_bytes
                           # .training_bytes .step_bytes
                           # .parts() -> dict, .largest_part() -> str, str() a breakdown

    plan_fine_tune(config, card_gb, mode, seq_len, tokens_per_step, *, checkpointing=False,
                   lora_rank=16, lora_targets="all-linear", margin=0.1, context_gb=CONTEXT_GB)
        -> FineTunePlan    # .fits .micro_batch_size .accum_steps .effective_tokens
                           # .estimate (MemoryEstimate at that micro-batch, or at 1)
                           # str(): the plan, or "does not fit even at micro-batch 1: ..."
    planner_widget(config=None) -> ipywidgets.VBox  # config: added as "your model"
    planner_html(config, card_gb, mode, seq_len, tokens_per_step, checkpointing) -> str

    fits_table(models=TABLE_MODELS, cards_gb=(8, 12, 16, 24), modes=TABLE_MODES,
               seq_len=1024, tokens_per_step=65536, checkpointing=(False, True))
        -> list[FitRow]    # .model .mode .checkpointing .card_gb .micro_batch_size (0: no)
                           # .accum_steps .needs_bytes .cell ("4 x 16" or "no")
    render_fits_table(rows, fmt="markdown" | "html") -> str

    compare_with_measurement(model="tiny" | "gpt2", mode="full-fp32", micro_batch_size=2,
                             seq_len=32, checkpointing=False) -> list[Comparison]
        # .part .predicted_bytes .measured_bytes .ratio .note; comparison_table(rows) -> str
    compare_quantized_weights(model="tiny" | "gpt2", weight_format="nf4" | "int8")
        -> Comparison      # needs bitsandbytes (the optional "quantization" extra)

    auto_batch_comparison(card=None, per_device_train_batch_size=64,
                          gradient_accumulation_steps=4, *,
                          mechanism="find_executable_batch_size" | "trainer", margin=0.1)
        -> AutoBatchComparison  # .asked_effective_batch .mechanism, str() a summary
        # .trainer and .tuner (BatchChoice): .finder .micro_batch_size .accum_steps
        # .effective_batch .tried; card: a coursekit SimulatedDevice (default_card())
"""

from coursekit.finetune.activations import (
    SavedPerToken,
    korthikanti_layer_bytes,
    saved_bytes_per_token,
)
from coursekit.finetune.auto_batch import (
    AutoBatchComparison,
    BatchChoice,
    auto_batch_comparison,
    default_card,
)
from coursekit.finetune.configs import (
    PUBLISHED_CONFIGS,
    SOURCES,
    TABLE_MODELS,
    count_parameters,
    meta_model,
    published_config,
)
from coursekit.finetune.estimate import (
    CONTEXT_GB,
    LOSS_BYTES_PER_LOGIT,
    MemoryEstimate,
    estimate_memory,
)
from coursekit.finetune.measured import (
    Comparison,
    compare_quantized_weights,
    compare_with_measurement,
    comparison_table,
)
from coursekit.finetune.modes import MODES, TABLE_MODES, Mode
from coursekit.finetune.planner import FineTunePlan, plan_fine_tune
from coursekit.finetune.table import CARDS_GB, FitRow, fits_table, render_fits_table
from coursekit.finetune.weights import WEIGHT_FORMATS, weight_bytes
from coursekit.finetune.widget import planner_html, planner_widget

__all__ = [
    "AutoBatchComparison",
    "BatchChoice",
    "CARDS_GB",
    "Comparison",
    "CONTEXT_GB",
    "LOSS_BYTES_PER_LOGIT",
    "MODES",
    "PUBLISHED_CONFIGS",
    "SOURCES",
    "TABLE_MODELS",
    "TABLE_MODES",
    "WEIGHT_FORMATS",
    "FineTunePlan",
    "FitRow",
    "MemoryEstimate",
    "Mode",
    "SavedPerToken",
    "auto_batch_comparison",
    "compare_quantized_weights",
    "compare_with_measurement",
    "comparison_table",
    "count_parameters",
    "default_card",
    "estimate_memory",
    "fits_table",
    "korthikanti_layer_bytes",
    "meta_model",
    "plan_fine_tune",
    "planner_html",
    "planner_widget",
    "published_config",
    "render_fits_table",
    "saved_bytes_per_token",
    "weight_bytes",
]
